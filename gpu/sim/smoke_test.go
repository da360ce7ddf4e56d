package sim

import (
	"encoding/binary"
	"math"
	"testing"

	"petal/gpu"
)

const smokeSrc = `
#include <metal_stdlib>
using namespace metal;

kernel void add_sum(device const float* a [[buffer(0)]],
                    device float* out [[buffer(1)]],
                    uint gid [[thread_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
    float v = a[gid];
    float s = simd_sum(v);
    out[gid] = s + float(lane);
}
`

func TestSmoke(t *testing.T) {
	d, err := Open(Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := d.NewPipeline(gpu.Source{Name: "smoke.metal", Text: smokeSrc}, "add_sum")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.NewBuffer(64 * 4)
	out, _ := d.NewBuffer(64 * 4)
	for i := range 64 {
		binary.LittleEndian.PutUint32(a.Contents()[4*i:], math.Float32bits(float32(i)))
	}
	cb, _ := d.NewCommandBuffer()
	if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 2, Y: 1, Z: 1}, Threads: gpu.Size{X: 32, Y: 1, Z: 1},
		Args: []gpu.Arg{gpu.BufferArg(0, a, 0), gpu.BufferArg(1, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out.Contents()[4*i:]))
		base := 0
		if i >= 32 {
			base = 32
		}
		want := float32((base+base+31)*32/2 + i%32)
		if got != want {
			t.Errorf("out[%d] = %v, want %v", i, got, want)
		}
	}
}
