package gpumodel

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/reftest"
	"petal/gpu"
	"petal/gpu/record"
)

// mlxLayout rewrites the fixture in dir as MLX writes it, its first
// shard's data at offset mod 16.
func mlxLayout(t testing.TB, dir string, offset int) string {
	t.Helper()
	dst := t.TempDir()
	if err := checkpointtest.RewriteMLX(dir, dst, offset); err != nil {
		t.Fatal(err)
	}
	return dst
}

// copyMeter counts the bytes of the buffers a model allocates, which at
// load are its vector copies and its copies of misaligned tensors.
type copyMeter struct {
	gpu.Device
	allocated int64
}

func (d *copyMeter) NewBuffer(n int) (gpu.Buffer, error) {
	d.allocated += int64(n)
	return d.Device.NewBuffer(n)
}

// TestMLXLayoutRecorded loads every fixture, rewritten in MLX's layout at
// every data offset mod 16, on the recording driver and runs a prompt
// through prefill and decode: the recorder checks every dispatch's
// bindings, and the load checked every matrix's alignment. The model
// copies exactly the bytes checkpoint.MisalignedBytes predicts (what petal
// fit counts), and allocates exactly that much more than the padded
// original.
func TestMLXLayoutRecorded(t *testing.T) {
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		t.Run(ref.Name(), func(t *testing.T) {
			base := &copyMeter{Device: record.New()}
			m, err := Open(ref.Dir, base)
			if err != nil {
				t.Fatal(err)
			}
			if m.CopiedBytes() != 0 {
				t.Errorf("padded original: copied %d bytes", m.CopiedBytes())
			}
			m.Close()
			for r := range 16 {
				dir := mlxLayout(t, ref.Dir, r)
				want, err := checkpoint.MisalignedBytes(dir)
				if err != nil {
					t.Fatal(err)
				}
				dev := &copyMeter{Device: record.New()}
				m, err := Open(dir, dev)
				if err != nil {
					t.Fatalf("offset %d: %v", r, err)
				}
				if got := m.CopiedBytes(); got != want || got == 0 {
					t.Errorf("offset %d: copied %d bytes, MisalignedBytes says %d (> 0)", r, got, want)
				}
				if extra := dev.allocated - base.allocated; extra != want {
					t.Errorf("offset %d: allocated %d bytes more than the padded original, want %d", r, extra, want)
				}
				s, err := m.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				tokens := ref.Tokens[:2*prefillMinTokens]
				if err := s.Forward(tokens, make([]float32, len(tokens)*ref.Vocab)); err != nil {
					t.Errorf("offset %d: prefill: %v", r, err)
				}
				if err := s.Forward(ref.Tokens[len(tokens):len(tokens)+1], make([]float32, ref.Vocab)); err != nil {
					t.Errorf("offset %d: decode: %v", r, err)
				}
				s.Close()
				m.Close()
			}
		})
	}
}

// mlxSweepPositions bounds the positions compared: a prompt of the first
// 20 and 4 decode steps still run every matrix through both the prefill and
// the decode kernels (each read through its copy where it was misaligned),
// and keep the sweep of every fixture over all 16 data offsets to a few
// seconds an offset on the project's machine.
const (
	mlxSweepPositions   = 24
	mlxSweepDecodeSteps = 4
)

// TestMLXLayoutSim runs fixtures rewritten in MLX's layout through the GPU
// path on the sim: the logits are bit-identical to the padded original's
// (the copies hold the same bytes; only where they lie differs), so they
// match transformers' reference exactly as tightly as the original does,
// which TestFixtures bounds by maxRefDiff.
func TestMLXLayoutSim(t *testing.T) {
	dev := openDevice(t)
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, dir string, tokens []int, vocab int) []float32 {
		m, err := Open(dir, dev)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// A prefill, then decode steps: the prefill kernels read codes as
		// words, the decode kernels as 8-byte pairs.
		out := make([]float32, len(tokens)*vocab)
		n := len(tokens) - mlxSweepDecodeSteps
		if err := s.Forward(tokens[:n], out[:n*vocab]); err != nil {
			t.Fatal(err)
		}
		for i := n; i < len(tokens); i++ {
			if err := s.Forward(tokens[i:i+1], out[i*vocab:(i+1)*vocab]); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	for _, ref := range refs {
		tokens := ref.Tokens[:mlxSweepPositions]
		t.Run(ref.Name(), func(t *testing.T) {
			padded := run(t, ref.Dir, tokens, ref.Vocab)
			origDiff := maxDiff(padded, ref.Logits[:len(padded)])
			for r := range 16 {
				t.Run(fmt.Sprintf("offset=%d", r), func(t *testing.T) {
					got := run(t, mlxLayout(t, ref.Dir, r), tokens, ref.Vocab)
					if !slices.Equal(got, padded) {
						t.Errorf("logits differ from the padded original's by up to %g", maxDiff(got, padded))
					}
					if d := maxDiff(got, ref.Logits[:len(got)]); d != origDiff || d > maxRefDiff {
						t.Errorf("max |logit - reference| = %g, the padded original's %g (tolerance %g)", d, origDiff, maxRefDiff)
					}
				})
			}
			t.Logf("max |logit - reference| over %d positions: %.3g, in MLX's layout and padded alike", len(tokens), origDiff)
		})
	}
}

func maxDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(float64(a[i]-b[i])))
	}
	return worst
}
