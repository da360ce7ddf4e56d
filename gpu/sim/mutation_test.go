package sim_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

// Mirrors of the argument structs in the testdata snapshots' inlined args.h.
type (
	rmsnormArgs struct {
		N            int32
		Eps          float32
		WeightOffset float32
		_            int32
		RowStride    uint64
		_            uint64
	}
	qmvArgs struct {
		Rows, K int32
		_       [2]int32
	}
	argmaxArgs struct {
		N, OutIndex int32
		_           [2]int32
	}
)

// argBytes is the little-endian image of an args struct.
func argBytes(v any) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
		panic(err) // the structs above hold only fixed-size fields
	}
	return b.Bytes()
}

// maxMutatedLines bounds how far a mutant may drift from the snapshot it
// mutates, so each mutant stays one small, named change.
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
	args := rmsnormArgs{N: n, Eps: 1e-6, WeightOffset: 1, RowStride: n}
	w := make([]uint32, n/2) // bf16 pairs: 0x3f80 = 1.0
	for i := range w {
		w[i] = 0x3f803f80
	}
	return &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: rows, Y: 1, Z: 1}, Threads: gpu.Size{X: 128, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, argBytes(&args)),
			gpu.BufferArg(1, buffer(t, d, ramp(rows*n, func(i int) float32 { return float32(i%17) - 8 })), 0),
			gpu.BufferArg(2, buffer(t, d, w), 0),
			gpu.BufferArg(3, buffer(t, d, make([]uint32, rows*n)), 0)}}
}

func qmvSetup(t *testing.T, d gpu.Device, p gpu.Pipeline) *gpu.Dispatch {
	const rows, k = 13, 256 // rows not a multiple of a threadgroup's 8
	args := qmvArgs{Rows: rows, K: k}
	codes := make([]uint32, rows*k/8)
	for i := range codes {
		codes[i] = uint32(i) * 0x9e3779b9
	}
	sb := make([]uint32, rows*k/64/2)
	for i := range sb {
		sb[i] = 0x3c003c00 // bf16 0.0078125
	}
	return &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 2, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, argBytes(&args)),
			gpu.BufferArg(1, buffer(t, d, codes), 0),
			gpu.BufferArg(2, buffer(t, d, sb), 0),
			gpu.BufferArg(3, buffer(t, d, sb), 0),
			gpu.BufferArg(4, buffer(t, d, ramp(k, func(i int) float32 { return float32(i%5) - 2 })), 0),
			gpu.BufferArg(5, buffer(t, d, make([]uint32, rows)), 0)}}
}

func argmaxSetup(t *testing.T, d gpu.Device, p gpu.Pipeline) *gpu.Dispatch {
	const n = 40 // fewer values than the 64 threads
	args := argmaxArgs{N: n, OutIndex: 0}
	return &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, argBytes(&args)),
			gpu.BufferArg(1, buffer(t, d, ramp(n, func(i int) float32 { return float32((i * 7) % 40) })), 0),
			gpu.BufferArg(2, buffer(t, d, make([]uint32, 1)), 0)}}
}

// TestMutantsAreCaught runs each mutated copy of a real kernel under
// testdata/ and expects the sim to report the specific hazard, while the
// unmutated copy passes the same dispatch.
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
			realSrc := testdataSource(t, c.real).Text
			mutSrc := testdataSource(t, c.mutant).Text
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

func testdataSource(t *testing.T, name string) gpu.Source {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return gpu.Source{Name: name, Text: string(b)}
}
