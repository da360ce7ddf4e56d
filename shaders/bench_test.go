package shaders_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
	"petal/shaders"
)

// BenchmarkDispatchOverhead times a command buffer of 100 one-simd-group
// argmax dispatches separated by barriers: the sim's fixed cost per
// dispatch, which dominates a tiny model's decode step.
func BenchmarkDispatchOverhead(b *testing.B) {
	for _, fast := range []bool{true, false} {
		b.Run(fmt.Sprintf("fast=%v", fast), func(b *testing.B) {
			d, err := sim.Open(sim.Options{Fast: fast})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
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

// BenchmarkQMV times the qmv kernel in the sim (Fast: one run per
// dispatch, as whole-model tests that opt out of the race check would).
func BenchmarkQMV(b *testing.B) {
	for _, shape := range []struct{ rows, k int }{{2048, 2048}, {512, 2048}} {
		for _, fast := range []bool{true, false} {
			b.Run(fmt.Sprintf("rows=%d/k=%d/fast=%v", shape.rows, shape.k, fast), func(b *testing.B) {
				d, err := sim.Open(sim.Options{Fast: fast})
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				src, err := shaders.Source("qmv.metal")
				if err != nil {
					b.Fatal(err)
				}
				p, err := d.NewPipeline(gpu.Source{Name: "qmv.metal", Text: src}, "qmv_bf16_gs64_b4")
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(7, 8))
				codes := make([]uint32, shape.rows*shape.k/8)
				for i := range codes {
					codes[i] = rng.Uint32()
				}
				sb := make([]uint16, shape.rows*shape.k/64)
				for i := range sb {
					sb[i] = 0x3c00
				}
				x := make([]float32, shape.k)
				args := shaders.QMVArgs{Rows: int32(shape.rows), K: int32(shape.k)}
				disp := qmvDispatch(p, &args, u32s(b, d, codes), u16s(b, d, sb), u16s(b, d, sb), floats(b, d, x), floats(b, d, make([]float32, shape.rows)))
				b.SetBytes(int64(len(codes)*4 + len(sb)*4))
				for b.Loop() {
					cb, _ := d.NewCommandBuffer()
					if err := cb.Dispatch(disp); err != nil {
						b.Fatal(err)
					}
					cb.Commit()
					if err := cb.Wait(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
