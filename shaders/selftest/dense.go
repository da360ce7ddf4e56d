package selftest

import (
	"errors"
	"fmt"
	"math"

	"petal/gpu"
	"petal/shaders"
)

// The dense family's cases: quantized products, embeddings, norms, the
// router and argmax, at the demo model's widths or smaller.

// product is expert ex of q times x for every row, with each row's bound.
func (q *qmatrix) product(ex int, x []float32) (want, tol []float64) {
	want, tol = make([]float64, q.m.Rows), make([]float64, q.m.Rows)
	for r := range want {
		y, mag := q.Mul(ex, r, x)
		want[r], tol[r] = y, qmvTol(q.m.Cols, mag)
	}
	return want, tol
}

// swiglu is silu(g) * u with the bound that g's and u's bounds give it
// (|silu'| < 1.1).
func swiglu(g, gt, up, ut float64) (want, tol float64) {
	want = Silu(g) * up
	return want, 1.1*gt*(math.Abs(up)+ut) + (math.Abs(Silu(g))+1.1*gt)*ut + 8*u*math.Abs(want)
}

func at(tol []float64) func(int) float64 { return func(i int) float64 { return tol[i] } }

func qmvCase(bits int) Case {
	return Case{Name: fmt.Sprintf("qmv %d-bit", bits), Kernels: []string{fmt.Sprintf("qmv_bf16_gs64_b%d", bits)}, seed: 1,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 13, 320 // a partial threadgroup and a partial step
			q := e.qmatrix(1, rows, cols, bits)
			x := e.rand(cols, 1)
			xv, out := e.f32(x), e.buf(4*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMV(cb, out, q.m, xv) },
				func() error {
					want, tol := q.product(0, x)
					return compare("y", readF32(out, rows), want, at(tol))
				}
		},
		bench: func(e *env) func(gpu.CommandBuffer) error {
			const rows, cols = 8192, 2048 // 8 MB of 4-bit codes, as the experts' stacks read per token
			q := e.qmatrix(1, rows, cols, bits)
			xv, out := e.f32(e.rand(cols, 1)), e.buf(4*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMV(cb, out, q.m, xv) }
		}}
}

func qmvMultiCase(bits int) Case {
	return Case{Name: fmt.Sprintf("qmv_multi %d-bit", bits), Kernels: []string{fmt.Sprintf("qmv_multi_bf16_gs64_b%d", bits)}, seed: 2,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const cols = 128
			qs := []*qmatrix{e.qmatrix(1, 9, cols, bits), e.qmatrix(1, 20, cols, bits)}
			x := e.rand(cols, 1)
			xv := e.f32(x)
			outs := []shaders.View{e.buf(4 * 9), e.buf(4 * 20)}
			return func(cb gpu.CommandBuffer) error {
					return e.k.QMVMulti(cb, outs, []shaders.QMatrix{qs[0].m, qs[1].m}, xv)
				}, func() error {
					for i, q := range qs {
						want, tol := q.product(0, x)
						if err := compare(fmt.Sprintf("y%d", i), readF32(outs[i], q.m.Rows), want, at(tol)); err != nil {
							return err
						}
					}
					return nil
				}
		}}
}

func qmvSwiGLUCase() Case {
	return Case{Name: "qmv_swiglu", Kernels: []string{"qmv_swiglu_bf16_gs64_b4"}, seed: 3,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 13, 256
			g, up := e.qmatrix(1, rows, cols, 4), e.qmatrix(1, rows, cols, 4)
			x := e.rand(cols, 1)
			xv, out := e.f32(x), e.buf(4*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMVSwiGLU(cb, out, g.m, up.m, xv) },
				func() error {
					gw, gt := g.product(0, x)
					uw, ut := up.product(0, x)
					want, tol := make([]float64, rows), make([]float64, rows)
					for r := range rows {
						want[r], tol[r] = swiglu(gw[r], gt[r], uw[r], ut[r])
					}
					return compare("y", readF32(out, rows), want, at(tol))
				}
		}}
}

func qmvExpertsSwiGLUCase() Case {
	return Case{Name: "qmv_experts_swiglu", Kernels: []string{"qmv_experts_swiglu_bf16_gs64_b4"}, seed: 4,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const experts, rows, cols, slots = 3, 12, 128, 2
			ids := []uint32{2, 0}
			g, up := e.qmatrix(experts, rows, cols, 4), e.qmatrix(experts, rows, cols, 4)
			x := e.rand(cols, 1)
			xv, idv, out := e.f32(x), e.u32(ids), e.buf(4*slots*rows)
			return func(cb gpu.CommandBuffer) error {
					return e.k.QMVExpertsSwiGLU(cb, out, g.m, up.m, xv, idv, slots)
				}, func() error {
					var want, tol []float64
					for _, id := range ids {
						gw, gt := g.product(int(id), x)
						uw, ut := up.product(int(id), x)
						for r := range rows {
							w, t := swiglu(gw[r], gt[r], uw[r], ut[r])
							want, tol = append(want, w), append(tol, t)
						}
					}
					return compare("y", readF32(out, slots*rows), want, at(tol))
				}
		}}
}

func embedCase() Case {
	return Case{Name: "embed", Kernels: []string{"embed_bf16_gs64_b4"}, seed: 5,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const vocab, cols = 10, 128
			tokens := []uint32{3, 7, 0}
			q := e.qmatrix(1, vocab, cols, 4)
			tv, out := e.u32(tokens), e.buf(4*len(tokens)*cols)
			return func(cb gpu.CommandBuffer) error { return e.k.EmbedRows(cb, out, q.m, tv, len(tokens)) },
				func() error {
					var want, tol []float64
					for _, t := range tokens {
						for c := range cols {
							w, mag := q.At(0, int(t), c)
							want, tol = append(want, w), append(tol, 2*u*mag)
						}
					}
					return compare("row", readF32(out, len(tokens)*cols), want, at(tol))
				}
		}}
}

// normTol is a norm's tolerance: fp32 sums of squares over a row of a few
// hundred elements err by well under 1e-6 relative.
const normTol = 1e-5

func rmsnormCase() Case {
	return Case{Name: "rmsnorm", Kernels: []string{"rmsnorm_f32"}, seed: 6,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n, rows = 384, 2
			x, w := e.rand(rows*n, 1), e.rand(n, 1)
			xv, wv, out := e.f32(x), e.f32(w), e.buf(4*rows*n)
			return func(cb gpu.CommandBuffer) error { return e.k.RMSNorm(cb, out, xv, wv, n, rows, 1e-6) },
				func() error {
					var want []float64
					for r := range rows {
						want = append(want, RMSNorm(x[r*n:(r+1)*n], w, 1e-6)...)
					}
					return compare("out", readF32(out, rows*n), want, relTol(want, normTol))
				}
		}}
}

func addRMSNormCase() Case {
	return Case{Name: "add_rmsnorm", Kernels: []string{"add_rmsnorm_f32"}, seed: 7,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n, rows = 384, 2
			x, delta, w := e.rand(rows*n, 1), e.rand(rows*n, 1), e.rand(n, 1)
			xv, dv, wv, out := e.f32(x), e.f32(delta), e.f32(w), e.buf(4*rows*n)
			return func(cb gpu.CommandBuffer) error { return e.k.AddRMSNormRows(cb, xv, dv, out, wv, n, rows, 1e-6) },
				func() error {
					sum := make([]float32, rows*n)
					for i := range sum {
						sum[i] = x[i] + delta[i]
					}
					if err := compare("x", readF32(xv, rows*n), widen(sum), func(int) float64 { return 0 }); err != nil {
						return err
					}
					var want []float64
					for r := range rows {
						want = append(want, RMSNorm(sum[r*n:(r+1)*n], w, 1e-6)...)
					}
					return compare("out", readF32(out, rows*n), want, relTol(want, normTol))
				}
		}}
}

func routerCase() Case {
	return Case{Name: "router_topk", Kernels: []string{"router_topk_f32"}, seed: 9,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const experts, topK, rows = 16, 4, 2
			lg := e.rand(rows*experts, 2)
			lv, ids, ws := e.f32(lg), e.buf(4*rows*topK), e.buf(4*rows*topK)
			return func(cb gpu.CommandBuffer) error {
					return e.k.RouterTopKRows(cb, ids, ws, lv, experts, topK, true, rows)
				},
				func() error {
					gotIDs, gotW := readU32(ids, rows*topK), readF32(ws, rows*topK)
					for r := range rows {
						wantIDs, want := Router(lg[r*experts:(r+1)*experts], topK, true)
						for j, id := range wantIDs {
							if g := gotIDs[r*topK+j]; g != id {
								return fmt.Errorf("%w: row %d: expert %d = %d, want %d", ErrMismatch, r, j, g, id)
							}
						}
						if err := compare(fmt.Sprintf("row %d weight", r), gotW[r*topK:], want, relTol(want, 1e-6)); err != nil {
							return err
						}
					}
					return nil
				}
		}}
}

func argmaxCase() Case {
	return Case{Name: "argmax", Kernels: []string{"argmax_f32"}, seed: 10,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n, best = 6144, 4321
			lg := e.rand(n, 1)
			lg[best] = 10
			lv, out := e.f32(lg), e.buf(4)
			lg[17] = float32(math.NaN()) // a broken row, said so (fast math would fold the check away)
			nv, nout := e.f32(lg), e.buf(4)
			return func(cb gpu.CommandBuffer) error {
					return errors.Join(e.k.Argmax(cb, out, lv, n), e.k.Argmax(cb, nout, nv, n))
				},
				func() error {
					if g, b := readU32(out, 1)[0], readU32(nout, 1)[0]; g != best || b != shaders.SampleBadLogits {
						return fmt.Errorf("%w: argmax = %d, want %d; with a NaN %d, want %d", ErrMismatch, g, best, b, uint32(shaders.SampleBadLogits))
					}
					return nil
				}
		},
		bench: func(e *env) func(gpu.CommandBuffer) error {
			const n = 248320 // the model's vocabulary
			lv, out := e.f32(e.rand(n, 1)), e.buf(4)
			return func(cb gpu.CommandBuffer) error { return e.k.Argmax(cb, out, lv, n) }
		}}
}
