package gpumodel

import (
	"fmt"
	"io"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/shaders"
)

// StateClass names the numerics of a saved state: this backend's kernels
// on this device, with half-precision keys and values. Another device's
// driver may round differently, so its states are not taken.
func (m *Model) StateClass() string {
	return fmt.Sprintf("gpu/%s/kv-f%d", m.k.Device().Info().Name, 8*shaders.KVElementBytes)
}

// stateParts are the buffers that hold a sequence's state, in the order
// SaveState writes them, and how many bytes of each count after pos
// positions: the keys' and values' rows of an attention layer, and the
// whole conv inputs and recurrent state of a DeltaNet layer. The bytes are
// the device's, little-endian on every device Petal runs on.
func (s *Sequence) stateParts(pos int) [][]byte {
	c := s.m.cfg
	row := c.KVHeads * c.HeadDim * shaders.KVElementBytes
	var parts [][]byte
	for i, l := range s.m.layers {
		st := &s.layers[i]
		if l.kind == checkpoint.Attention {
			parts = append(parts, st.kCache.Buf.Contents()[:pos*row], st.vCache.Buf.Contents()[:pos*row])
		} else {
			parts = append(parts, st.conv.Buf.Contents(), st.state.Buf.Contents())
		}
	}
	return parts
}

// SaveState writes the caches (see stateParts). As Fork, it reads them on
// the host, after the command buffers that wrote them completed.
func (s *Sequence) SaveState(w io.Writer) error {
	if s.closed {
		return fmt.Errorf("gpumodel: %w", engine.ErrClosed)
	}
	if err := s.img.refuse(); err != nil {
		return err
	}
	if s.pos == 0 {
		// An empty sequence may have no key and value buffers yet.
		return fmt.Errorf("gpumodel: saving an empty sequence")
	}
	for _, p := range s.stateParts(s.pos) {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// LoadState reads what SaveState wrote after tokens tokens.
func (m *Model) LoadState(r io.Reader, tokens int) (engine.Sequence, error) {
	if tokens <= 0 || (m.cfg.MaxPositions > 0 && tokens > m.cfg.MaxPositions) {
		return nil, fmt.Errorf("gpumodel: a saved state of %d tokens, outside the model's %d positions", tokens, m.cfg.MaxPositions)
	}
	s, err := m.sequenceFor(tokens)
	if err != nil {
		return nil, err
	}
	for i, p := range s.stateParts(tokens) {
		if _, err := io.ReadFull(r, p); err != nil {
			s.Close()
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("gpumodel: saved state, part %d: %w", i, err)
		}
	}
	s.pos = tokens
	return s, nil
}
