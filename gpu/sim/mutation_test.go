package sim_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
	"petal/shaders"
)

// maxMutatedLines bounds how far a mutant may drift from the real kernel it
// copies, so that a change to the real kernel forces the copy to follow.
const maxMutatedLines = 6

// setup builds the buffers of one dispatch of fn on d and returns it.
type setup func(t *testing.T, d gpu.Device, p gpu.Pipeline) *gpu.Dispatch

func buffer(t *testing.T, d gpu.Device, words []uint32) gpu.Buffer {
	t.Helper()
	b, err := d.NewBuffer(4 * len(words))
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range words {
		binary.LittleEndian.PutUint32(b.Contents()[4*i:], w)
	}
	return b
}

func ramp(n int, f func(i int) float32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = math.Float32bits(f(i))
	}
	return out
}

func rmsnormSetup(t *testing.T, d gpu.Device, p gpu.Pipeline) *gpu.Dispatch {
	const rows, n = 2, 300
	args := shaders.RMSNormArgs{N: n, Eps: 1e-6, WeightOffset: 1, RowStride: n}
	w := make([]uint32, n/2) // bf16 pairs: 0x3f80 = 1.0
	for i := range w {
		w[i] = 0x3f803f80
	}
	return &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: rows, Y: 1, Z: 1}, Threads: gpu.Size{X: 128, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)),
			gpu.BufferArg(1, buffer(t, d, ramp(rows*n, func(i int) float32 { return float32(i%17) - 8 })), 0),
			gpu.BufferArg(2, buffer(t, d, w), 0),
			gpu.BufferArg(3, buffer(t, d, make([]uint32, rows*n)), 0)}}
}

func qmvSetup(t *testing.T, d gpu.Device, p gpu.Pipeline) *gpu.Dispatch {
	const rows, k = 13, 256 // rows not a multiple of a threadgroup's 8
	args := shaders.QMVArgs{Rows: rows, K: k}
	codes := make([]uint32, rows*k/8)
	for i := range codes {
		codes[i] = uint32(i) * 0x9e3779b9
	}
	sb := make([]uint32, rows*k/64/2)
	for i := range sb {
		sb[i] = 0x3c003c00 // bf16 0.0078125
	}
	return &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 2, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)),
			gpu.BufferArg(1, buffer(t, d, codes), 0),
			gpu.BufferArg(2, buffer(t, d, sb), 0),
			gpu.BufferArg(3, buffer(t, d, sb), 0),
			gpu.BufferArg(4, buffer(t, d, ramp(k, func(i int) float32 { return float32(i%5) - 2 })), 0),
			gpu.BufferArg(5, buffer(t, d, make([]uint32, rows)), 0)}}
}

func argmaxSetup(t *testing.T, d gpu.Device, p gpu.Pipeline) *gpu.Dispatch {
	const n = 40 // fewer values than the 64 threads
	args := shaders.ArgmaxArgs{N: n, OutIndex: 0}
	return &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)),
			gpu.BufferArg(1, buffer(t, d, ramp(n, func(i int) float32 { return float32((i * 7) % 40) })), 0),
			gpu.BufferArg(2, buffer(t, d, make([]uint32, 1)), 0)}}
}

// TestMutantsAreCaught runs each mutated copy of a real kernel under
// testdata/ and expects the sim to report the specific hazard, while the
// real kernel passes the same dispatch.
func TestMutantsAreCaught(t *testing.T) {
	cases := []struct {
		mutant, real, fn string
		setup            setup
		want             error
	}{
		{"rmsnorm_no_barrier.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", rmsnormSetup, sim.ErrRace},
		{"rmsnorm_divergent_simd.metal", "rmsnorm.metal", "rmsnorm_f32_bf16", rmsnormSetup, sim.ErrDivergence},
		{"qmv_off_by_one.metal", "qmv.metal", "qmv_bf16_gs64_b4", qmvSetup, sim.ErrOutOfBounds},
		{"argmax_early_return.metal", "argmax.metal", "argmax_f32", argmaxSetup, sim.ErrDeadlock},
	}
	d, err := sim.Open(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range cases {
		t.Run(c.mutant, func(t *testing.T) {
			realSrc, err := shaders.Source(c.real)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join("testdata", c.mutant))
			if err != nil {
				t.Fatal(err)
			}
			mutSrc := mutantSource(t, c.mutant, string(raw)).Text
			if n := changedLines(realSrc, mutSrc); n == 0 || n > maxMutatedLines {
				t.Fatalf("%s differs from %s in %d lines; want 1..%d (update the copy)", c.mutant, c.real, n, maxMutatedLines)
			}
			for _, v := range []struct {
				name, src string
				want      error
			}{{c.real, realSrc, nil}, {c.mutant, mutSrc, c.want}} {
				p, err := d.NewPipeline(gpu.Source{Name: v.name, Text: v.src}, c.fn)
				if err != nil {
					t.Fatal(err)
				}
				err = runOne(t, d, c.setup(t, d, p))
				switch {
				case v.want == nil && err != nil:
					t.Fatalf("real kernel %s: %v", v.name, err)
				case v.want != nil && !errors.Is(err, v.want):
					t.Fatalf("%s: got %v, want %v", v.name, err, v.want)
				case v.want != nil:
					var h *sim.HazardError
					if !errors.As(err, &h) || h.Kernel != c.fn || !errors.Is(err, gpu.ErrExecution) {
						t.Fatalf("%s: error %v is not a HazardError of %s wrapping gpu.ErrExecution", v.name, err, c.fn)
					}
					t.Logf("%s: %v", v.name, err)
				}
			}
		})
	}
}

func runOne(t *testing.T, d gpu.Device, disp *gpu.Dispatch) error {
	t.Helper()
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Dispatch(disp); err != nil {
		t.Fatal(err)
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	err = cb.Wait()
	if (err == nil) != (cb.Status() == gpu.Completed) {
		t.Fatalf("status %v after error %v", cb.Status(), err)
	}
	return err
}

// changedLines counts lines in one text and not the other (as multisets).
func changedLines(a, b string) int {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	n := 0
	for _, c := range count {
		n += max(c, -c)
	}
	return n
}

func mutantSource(t *testing.T, name, text string) gpu.Source {
	t.Helper()
	src, err := shaders.Expand(name, text)
	if err != nil {
		t.Fatal(err)
	}
	return gpu.Source{Name: name, Text: src}
}
