package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"petal/gpu"
)

func TestGraphModeFrom(t *testing.T) {
	for env, want := range map[string]graphMode{"": graphLevels, "levels": graphLevels, "serial": graphSerial, "off": graphOff} {
		if got, err := graphModeFrom(env); err != nil || got != want {
			t.Errorf("%q: got %v, %v; want %v", env, got, err, want)
		}
	}
	if _, err := graphModeFrom("on"); err == nil {
		t.Error(`"on" accepted`)
	}
}

// A graph serves only command buffers of its shape: the same kernels in
// the same levels.
func TestGraphFits(t *testing.T) {
	ls := []launch{{fn: 1, level: 0}, {fn: 2, level: 0}, {fn: 1, level: 1}}
	gr := &graph{fns: []uintptr{1, 2, 1}, levels: []int32{0, 0, 1}}
	if !gr.fits(ls) {
		t.Fatal("its own shape does not fit")
	}
	for i, other := range [][]launch{
		{{fn: 1, level: 0}, {fn: 2, level: 1}, {fn: 1, level: 2}},
		{{fn: 1, level: 0}, {fn: 3, level: 0}, {fn: 1, level: 1}},
		{{fn: 1, level: 0}, {fn: 2, level: 0}},
	} {
		if gr.fits(other) {
			t.Errorf("shape %d fits", i)
		}
		if shape(other) == shape(ls) {
			t.Errorf("shape %d hashes alike", i)
		}
	}
}

const axpbSource = `#include <metal_stdlib>
using namespace metal;
kernel void axpb(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
	y[i] = a * x[i] + 1.0f;
}
`

func openGPU(t *testing.T) *Device {
	t.Helper()
	d, err := Open(Options{CacheDir: t.TempDir()})
	if errors.Is(err, gpu.ErrUnsupported) {
		t.Skipf("no NVIDIA GPU here (this test runs on the device machine): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// Command buffers of one shape replay one graph with their own inline
// values and buffers; a new shape builds another; past maxGraphs the least
// recently used goes; and every mode computes the same. Each command
// buffer is a chain over levels (y[k] = a_k*y[k-1] + 1 for the chain's
// links, two chains in each level, so a missing dependency between levels
// or a stale inline value or buffer shows).
func TestGraphReplay(t *testing.T) {
	d := openGPU(t)
	p, err := d.NewPipeline(gpu.Source{Name: "axpb.metal", Text: axpbSource}, "axpb")
	if err != nil {
		t.Fatal(err)
	}
	const n = 4096
	buf := func() gpu.Buffer {
		b, err := d.NewBuffer(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Release)
		return b
	}
	bufs := make([]gpu.Buffer, 6)
	for i := range bufs {
		bufs[i] = buf()
	}
	f32 := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	// run encodes links levels of two chains, from bufs[src] (filled with
	// x0) through bufs[2..] alternately, and checks each chain's end
	// against the same recurrence in float32.
	run := func(t *testing.T, links int, src int, x0, scale float32) {
		t.Helper()
		in := bufs[src].Contents()
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(x0+float32(i%7)))
		}
		cb, err := d.NewCommandBuffer()
		if err != nil {
			t.Fatal(err)
		}
		prev := [2]int{src, src}
		next := [2][2]int{{2, 3}, {4, 5}}
		for k := 0; k < links; k++ {
			for c := range 2 {
				dst := next[c][k%2]
				a := link(scale, k, c)
				err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: n / 256, Y: 1, Z: 1}, Threads: gpu.Size{X: 256, Y: 1, Z: 1},
					Args: []gpu.Arg{gpu.BufferArg(0, bufs[dst], 0), gpu.BufferArg(1, bufs[prev[c]], 0), gpu.BytesArg(2, f32(a))}})
				if err != nil {
					t.Fatal(err)
				}
				prev[c] = dst
			}
			cb.Barrier()
		}
		if err := cb.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := cb.Wait(); err != nil {
			t.Fatal(err)
		}
		for c := range 2 {
			out := bufs[prev[c]].Contents()
			for i := 0; i < n; i += 97 {
				want := x0 + float32(i%7)
				for k := 0; k < links; k++ {
					want = float32(math.FMA(float64(link(scale, k, c)), float64(want), 1))
				}
				got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
				if !(math.Abs(float64(got-want)) <= 1e-5*math.Abs(float64(want))) {
					t.Fatalf("links %d from buffer %d x0 %v scale %v: chain %d element %d is %v, want %v", links, src, x0, scale, c, i, got, want)
				}
			}
		}
	}
	for _, mode := range []graphMode{graphLevels, graphSerial, graphOff} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			d.mu.Lock()
			d.graphs.close(d)
			d.graphs = &graphCache{mode: mode, graphs: map[uint64][]*graph{}}
			d.mu.Unlock()
			run(t, 5, 0, 1, 0.5)
			run(t, 5, 1, -2, 0.25) // same shape: another input buffer, other inline values
			run(t, 5, 0, 3, -0.75)
			run(t, 6, 0, 1, 0.5) // another shape
			want := 2
			if mode == graphOff {
				want = 0
			}
			if d.graphs.n != want {
				t.Fatalf("%d graphs kept, want %d", d.graphs.n, want)
			}
			for links := 7; links < 7+maxGraphs; links++ {
				run(t, links, links%2, float32(links), 0.125)
			}
			if mode != graphOff && d.graphs.n != maxGraphs {
				t.Fatalf("%d graphs kept, want at most %d", d.graphs.n, maxGraphs)
			}
			run(t, 5, 1, 2, 0.5) // evicted: built again
		})
	}
}

// link is the factor of chain c's k-th link, below 1 in size so that long
// chains stay finite.
func link(scale float32, k, c int) float32 {
	return scale * (1 - 0.01*float32(k)) * (1 - 0.3*float32(c))
}

func (m graphMode) String() string { return [...]string{"levels", "serial", "off"}[m] }
