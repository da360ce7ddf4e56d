package cpu

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"petal/engine"
	"petal/engine/checkpoint"
)

// stateBuffer is the I/O buffer of SaveState and LoadState.
const stateBuffer = 1 << 16

// StateClass names the CPU backend's numerics: float32 everywhere, with the
// KV cache rounded to half precision under Options.HalfKV.
func (m *Model) StateClass() string {
	if m.halfKV {
		return "cpu/kv-f16"
	}
	return "cpu/kv-f32"
}

// SaveState writes, layer by layer, the keys and values of an attention
// layer or the conv inputs and recurrent state of a DeltaNet layer, as
// little-endian float32s; their lengths follow from the config and Len.
func (s *Sequence) SaveState(w io.Writer) error {
	if s.layers == nil {
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	if s.images {
		return errImagesSaved
	}
	bw := bufio.NewWriterSize(w, stateBuffer)
	var b [4]byte
	for _, l := range s.layers {
		for _, part := range [][]float32{l.k, l.v, l.conv, l.state} {
			for _, x := range part {
				binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
				if _, err := bw.Write(b[:]); err != nil {
					return err
				}
			}
		}
	}
	return bw.Flush()
}

// LoadState reads what SaveState wrote after tokens tokens.
func (m *Model) LoadState(r io.Reader, tokens int) (engine.Sequence, error) {
	c := m.cfg
	if tokens < 0 || (c.MaxPositions > 0 && tokens > c.MaxPositions) {
		return nil, fmt.Errorf("cpu: a saved state of %d tokens, outside the model's %d positions", tokens, c.MaxPositions)
	}
	seq, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	s := seq.(*Sequence)
	s.pos = tokens
	// Not buffered past what is asked: r may hold more after the state.
	for i, l := range m.layers {
		st := &s.layers[i]
		if l.kind == checkpoint.DeltaNet {
			err = readStateFloats(r, st.conv)
			if err == nil {
				err = readStateFloats(r, st.state)
			}
		} else {
			st.k = make([]float32, tokens*c.KVHeads*c.HeadDim)
			st.v = make([]float32, len(st.k))
			err = readStateFloats(r, st.k)
			if err == nil {
				err = readStateFloats(r, st.v)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cpu: saved state, layer %d: %w", i, err)
		}
	}
	return s, nil
}

// readStateFloats fills dst with little-endian float32s from r.
func readStateFloats(r io.Reader, dst []float32) error {
	buf := make([]byte, min(stateBuffer, 4*len(dst)))
	for len(dst) > 0 {
		n := min(len(buf)/4, len(dst))
		if _, err := io.ReadFull(r, buf[:4*n]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		for i := range n {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		dst = dst[n:]
	}
	return nil
}
