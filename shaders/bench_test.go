package shaders_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/gpu/gputest"
	"petal/shaders"
)

// BenchmarkDispatchOverhead times a command buffer of 100 one-simd-group
// argmax dispatches separated by barriers: the sim's fixed cost per
// dispatch, which dominates a tiny model's decode step.
func BenchmarkDispatchOverhead(b *testing.B) {
	for _, fast := range []bool{true, false} {
		b.Run(fmt.Sprintf("fast=%v", fast), func(b *testing.B) {
			d := gputest.Open(b, fast)
			p := pipeline(b, d, "argmax.metal", "argmax_f32")
			args := shaders.ArgmaxArgs{N: 32}
			disp := &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 32, Y: 1, Z: 1},
				Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)), gpu.BufferArg(1, floats(b, d, make([]float32, 32)), 0), gpu.BufferArg(2, u32s(b, d, []uint32{0}), 0)}}
			for b.Loop() {
				cb, _ := d.NewCommandBuffer()
				for range 100 {
					if err := cb.Dispatch(disp); err != nil {
						b.Fatal(err)
					}
					cb.Barrier()
				}
				cb.Commit()
				if err := cb.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQMV times the QMV op in the sim (Fast: one run per dispatch, as
// whole-model tests that opt out of the race check would); bytes are the
// weights read.
func BenchmarkQMV(b *testing.B) {
	for _, shape := range []struct{ rows, k, bits int }{{2048, 2048, 4}, {512, 2048, 4}, {256, 2048, 8}} {
		for _, fast := range []bool{true, false} {
			b.Run(fmt.Sprintf("rows=%d/k=%d/bits=%d/fast=%v", shape.rows, shape.k, shape.bits, fast), func(b *testing.B) {
				d := gputest.Open(b, fast)
				k := shaders.NewKernels(d)
				q := newDenseQ(b, d, rand.New(rand.NewPCG(7, 8)), 1, shape.rows, shape.k, shape.bits)
				x := denseBuf(b, d, 0, make([]byte, 4*shape.k))
				y := denseBuf(b, d, 0, make([]byte, 4*shape.rows))
				run := func(cb gpu.CommandBuffer) error { return k.QMV(cb, y, q.m, x) }
				denseRun(b, k, run) // compiles the pipeline off the clock
				b.SetBytes(int64(q.m.ExpertCodeBytes() + 2*q.m.ExpertScaleBytes()))
				for b.Loop() {
					denseRun(b, k, run)
				}
			})
		}
	}
}

// BenchmarkQMVFused times the decode step's fused products at the 35B
// shape in the sim: DeltaNet's four input projections in one QMVMulti, the
// shared expert's gate and up in one QMVSwiGLU, and the routed experts'
// gate and up at top-8 in one QMVExpertsSwiGLU; bytes are the weights read.
func BenchmarkQMVFused(b *testing.B) {
	const hidden, experts, topK = 2048, 16, 8
	d := gputest.Open(b, true)
	k := shaders.NewKernels(d)
	rng := rand.New(rand.NewPCG(11, 12))
	weightBytes := func(m shaders.QMatrix) int64 { return int64(m.ExpertCodeBytes() + 2*m.ExpertScaleBytes()) }
	x := denseBuf(b, d, 0, make([]byte, 4*hidden))

	var ms []shaders.QMatrix
	var outs []shaders.View
	var multiBytes int64
	for _, rows := range []int{8192, 4096, 32, 32} {
		q := newDenseQ(b, d, rng, 1, rows, hidden, 4)
		ms, outs = append(ms, q.m), append(outs, denseBuf(b, d, 0, make([]byte, 4*rows)))
		multiBytes += weightBytes(q.m)
	}
	shGate, shUp := newDenseQ(b, d, rng, 1, 512, hidden, 4), newDenseQ(b, d, rng, 1, 512, hidden, 4)
	gate, up := newDenseQ(b, d, rng, experts, 512, hidden, 4), newDenseQ(b, d, rng, experts, 512, hidden, 4)
	ids := denseBuf(b, d, 0, denseU32s([]uint32{3, 1, 4, 15, 9, 2, 6, 5}))
	y := denseBuf(b, d, 0, make([]byte, 4*topK*512))
	for _, c := range []struct {
		name  string
		bytes int64
		run   func(cb gpu.CommandBuffer) error
	}{
		{"QMVMulti/rows=8192+4096+32+32/k=2048", multiBytes, func(cb gpu.CommandBuffer) error { return k.QMVMulti(cb, outs, ms, x) }},
		{"QMVSwiGLU/rows=512/k=2048", 2 * weightBytes(shGate.m), func(cb gpu.CommandBuffer) error { return k.QMVSwiGLU(cb, y, shGate.m, shUp.m, x) }},
		{"QMVExpertsSwiGLU/rows=512/k=2048/slots=8", 2 * topK * weightBytes(gate.m), func(cb gpu.CommandBuffer) error {
			return k.QMVExpertsSwiGLU(cb, y, gate.m, up.m, x, ids, topK)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			denseRun(b, k, c.run) // compiles the pipeline off the clock
			b.SetBytes(c.bytes)
			for b.Loop() {
				denseRun(b, k, c.run)
			}
		})
	}
}
