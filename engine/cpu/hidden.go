package cpu

import (
	"fmt"

	"petal/engine"
)

// Hidden appends tokens like Forward and writes into out the final hidden
// state of each (the residual stream after the last layer and the final
// norm, what the LM head reads): len(tokens)*Hidden floats.
func (s *Sequence) Hidden(tokens []int, out []float32) error {
	if s.layers == nil {
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	c := s.m.cfg
	if err := engine.CheckTokens(tokens, c.Vocab); err != nil {
		return err
	}
	if len(out) != len(tokens)*c.Hidden {
		return fmt.Errorf("cpu: hidden states buffer of %d floats, want %d tokens of %d", len(out), len(tokens), c.Hidden)
	}
	if c.MaxPositions > 0 && s.pos+len(tokens) > c.MaxPositions {
		return fmt.Errorf("cpu: %d tokens exceed the model's %d positions", s.pos+len(tokens), c.MaxPositions)
	}
	sc := s.m.acquire()
	defer s.m.release(sc)
	h := c.Hidden
	for start := 0; start < len(tokens); start += maxChunk {
		end := min(start+maxChunk, len(tokens))
		x, _ := s.layersChunk(sc, tokens[start:end])
		rmsNormRows(out[start*h:end*h], x, s.m.finalNorm, h, c.RMSNormEps)
	}
	return nil
}

// NewHiddenSequence starts an empty sequence that reports hidden states.
func (m *Model) NewHiddenSequence() (engine.HiddenSequence, error) {
	seq, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	return seq.(*Sequence), nil
}
