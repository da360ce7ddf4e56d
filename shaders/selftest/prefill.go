package selftest

import (
	"fmt"
	"math"

	"petal/gpu"
	"petal/shaders"
)

// The prefill family's cases: the tiled quantized GEMM, the grouped MoE
// path (route, expert GEMM, combine) and SwiGLU.

// qmmCase runs QMM over tokens tokens: up to shaders.QMMSmallTokens the
// small-tile kernel, past them the full tile's.
func qmmCase(bits, tokens int) Case {
	kernel := "qmm"
	if tokens <= shaders.QMMSmallTokens {
		kernel = "qmm_small"
	}
	return Case{Name: fmt.Sprintf("qmm %d-bit, %d tokens", bits, tokens), Kernels: []string{fmt.Sprintf("%s_bf16_gs64_b%d", kernel, bits)}, seed: 11,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 20, 128
			q := e.qmatrix(1, rows, cols, bits)
			x := e.rand(tokens*cols, 1)
			xv, out := e.f32(x), e.buf(4*tokens*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMM(cb, out, q.m, xv, tokens) },
				func() error {
					var want, tol []float64
					for t := range tokens {
						w, tl := q.product(0, x[t*cols:])
						want, tol = append(want, w...), append(tol, tl...)
					}
					return compare("y", readF32(out, tokens*rows), want, at(tol))
				}
		}}
}

// moeGroupedCase routes tokens' experts on the GPU, runs the grouped
// expert GEMM over the block map and combines the slots back per token;
// only the combined rows are compared, so a wrong route, GEMM or combine
// shows in them.
// Up to shaders.QMMExpertsSmallPairs (token, choice) pairs the expert GEMM
// is the small-tile kernel, past them the full tile's.
func moeGroupedCase(tokens int) Case {
	const topK, experts, rows, cols = 2, 4, 16, 128
	pairs := tokens * topK
	kernel := "qmm_experts_bf16_gs64_b4"
	if pairs <= shaders.QMMExpertsSmallPairs {
		kernel = "qmm_experts_small_bf16_gs64_b4"
	}
	return Case{Name: fmt.Sprintf("moe grouped, %d tokens", tokens), Kernels: []string{"moe_route", kernel, "moe_combine_rows_f32"}, seed: 12,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			// Uneven loads: expert 2 takes most pairs, expert 1 few.
			ids := make([]uint32, pairs)
			for i := range ids {
				ids[i] = uint32([]int{2, 0, 2, 3, 1, 2}[i%6])
			}
			q := e.qmatrix(experts, rows, cols, 4)
			x, ws, shared, gate := e.rand(tokens*cols, 1), e.rand(pairs, 0.5), e.rand(tokens*rows, 1), e.rand(tokens, 1)
			idv, xv, wv, sv, gv := e.u32(ids), e.f32(x), e.f32(ws), e.f32(shared), e.f32(gate)
			mapping, slotOf := e.buf(4*pairs), e.buf(4*pairs)
			blocks := e.buf(16 * shaders.RouteCapacity(pairs, experts))
			ys, out := e.buf(4*pairs*rows), e.buf(4*tokens*rows)
			return func(cb gpu.CommandBuffer) error {
					if err := e.k.MoERoute(cb, mapping, slotOf, blocks, idv, pairs, experts); err != nil {
						return err
					}
					cb.Barrier()
					if err := e.k.QMMExperts(cb, ys, q.m, xv, tokens, topK, blocks, mapping, pairs, experts); err != nil {
						return err
					}
					cb.Barrier()
					return e.k.MoECombineRows(cb, out, ys, wv, slotOf, sv, gv, rows, topK, tokens)
				}, func() error {
					want, tol := make([]float64, tokens*rows), make([]float64, tokens*rows)
					for t := range tokens {
						for j := range topK {
							y, yt := q.product(int(ids[t*topK+j]), x[t*cols:])
							for r := range rows {
								want[t*rows+r] += float64(ws[t*topK+j]) * y[r]
								tol[t*rows+r] += math.Abs(float64(ws[t*topK+j])) * yt[r]
							}
						}
						for r := range rows {
							want[t*rows+r] += Sigmoid(float64(gate[t])) * float64(shared[t*rows+r])
							tol[t*rows+r] += 1e-6 * (1 + math.Abs(want[t*rows+r]))
						}
					}
					return compare("out", readF32(out, tokens*rows), want, at(tol))
				}
		}}
}

func swigluCase() Case {
	return Case{Name: "swiglu", Kernels: []string{"swiglu_f32"}, seed: 13,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n = 300
			g, up := e.rand(n, 2), e.rand(n, 1)
			gv, uv, out := e.f32(g), e.f32(up), e.buf(4*n)
			return func(cb gpu.CommandBuffer) error { return e.k.SwiGLU(cb, out, gv, uv, n) },
				func() error {
					want := make([]float64, n)
					for i := range want {
						want[i] = Silu(float64(g[i])) * float64(up[i])
					}
					return compare("out", readF32(out, n), want, relTol(want, 1e-6))
				}
		}}
}
