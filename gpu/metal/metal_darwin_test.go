//go:build darwin && arm64

package metal

import (
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"

	"petal/gpu"
	"petal/gpu/metal/mtl"
)

// openMac opens the Mac's GPU; a Mac without one (a virtual machine) skips.
func openMac(t *testing.T) *Device {
	t.Helper()
	d, err := Open()
	if errors.Is(err, gpu.ErrUnsupported) {
		t.Skipf("no usable Metal GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*Device)
}

func TestCompileOptionsTurnFastMathOff(t *testing.T) {
	c := openMac(t).comp.(*libraries).m.(*mtlCompiler)
	mtl.WithPool(func() {
		o := c.compileOptions()
		defer o.Release()
		if o.HasMathMode() != c.math.safeMathMode {
			t.Errorf("the OS has mathMode: %v, but the driver chose %+v", o.HasMathMode(), c.math)
		}
		if c.math.safeMathMode {
			if o.MathMode() != mtl.MathModeSafe || o.MathFloatingPointFunctions() != mtl.MathFloatingPointFunctionsPrecise {
				t.Errorf("mathMode %d, mathFloatingPointFunctions %d; want safe (0), precise (1)", o.MathMode(), o.MathFloatingPointFunctions())
			}
		}
		if o.FastMathEnabled() {
			t.Error("fastMathEnabled is still YES")
		}
	})
}

// nanKernel answers what fast math may fold away: isnan, isinf and x != x.
const nanKernel = `#include <metal_stdlib>
using namespace metal;
kernel void classify(device const float* x [[buffer(0)]], device uint* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    out[i] = (isnan(x[i]) ? 1u : 0u) | (isinf(x[i]) ? 2u : 0u) | (x[i] != x[i] ? 4u : 0u);
}
`

func TestNaNAndInfinitySurviveCompilation(t *testing.T) {
	d := openMac(t)
	p, err := d.NewPipeline(gpu.Source{Name: "classify.metal", Text: nanKernel}, "classify")
	if err != nil {
		t.Fatal(err)
	}
	in := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1.5}
	want := []uint32{1 | 4, 2, 2, 0}
	x, err := d.NewBuffer(4 * len(in))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	for i, f := range in {
		binary.LittleEndian.PutUint32(x.Contents()[4*i:], math.Float32bits(f))
	}
	out, err := d.NewBuffer(4 * len(in))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	cb := commit(t, d, &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: len(in), Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BufferArg(0, x, 0), gpu.BufferArg(1, out, 0)}})
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got := binary.LittleEndian.Uint32(out.Contents()[4*i:]); got != w {
			t.Errorf("classify(%v) = %03b, want %03b", in[i], got, w)
		}
	}
}

// TestConcurrentWait holds the gpu contract that any number of goroutines
// may Wait on (and poll) one command buffer.
func TestConcurrentWait(t *testing.T) {
	d := openMac(t)
	p, err := d.NewPipeline(gpu.Source{Name: "classify.metal", Text: nanKernel}, "classify")
	if err != nil {
		t.Fatal(err)
	}
	x, _ := d.NewBuffer(4 * 64)
	out, _ := d.NewBuffer(4 * 64)
	defer x.Release()
	defer out.Release()
	for round := 0; round < 20; round++ {
		cb := commit(t, d, &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BufferArg(0, x, 0), gpu.BufferArg(1, out, 0)}})
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cb.Status()
				if err := cb.Wait(); err != nil {
					t.Error(err)
				}
				if s := cb.Status(); s != gpu.Completed {
					t.Errorf("status %v after Wait", s)
				}
			}()
		}
		wg.Wait()
	}
}

func commit(t *testing.T, d *Device, disp *gpu.Dispatch) gpu.CommandBuffer {
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
	return cb
}
