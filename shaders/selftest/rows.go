package selftest

import (
	"fmt"
	"math"

	"petal/gpu"
	"petal/shaders"
)

// The multi-row products' cases (qmv_rows.metal): a batched step's decode
// rows, each row's outputs against the Go reference of its own product.

// rowsTokens is the rows the cases multiply: more than one, fewer than
// the kernels' bound, so both the loop over rows and its early end run.
const rowsTokens = 3

func qmvRowsCase(bits int) Case {
	return Case{Name: fmt.Sprintf("qmv_rows %d-bit", bits), Kernels: []string{fmt.Sprintf("qmv_rows_bf16_gs64_b%d", bits)}, seed: 46,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 13, 320 // a partial threadgroup and a partial step
			q := e.qmatrix(1, rows, cols, bits)
			x := e.rand(rowsTokens*cols, 1)
			xv, out := e.f32(x), e.buf(4*rowsTokens*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMVRows(cb, out, q.m, xv, rowsTokens) },
				func() error {
					var want, tol []float64
					for t := range rowsTokens {
						w, tl := q.product(0, x[t*cols:(t+1)*cols])
						want, tol = append(want, w...), append(tol, tl...)
					}
					return compare("y", readF32(out, rowsTokens*rows), want, at(tol))
				}
		},
		bench: func(e *env) func(gpu.CommandBuffer) error {
			const rows, cols, tokens = 8192, 2048, 4 // qmvCase's matrix, four decode rows
			q := e.qmatrix(1, rows, cols, bits)
			xv, out := e.f32(e.rand(tokens*cols, 1)), e.buf(4*tokens*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMVRows(cb, out, q.m, xv, tokens) }
		}}
}

func qmvRowsSwiGLUCase() Case {
	return Case{Name: "qmv_rows_swiglu", Kernels: []string{"qmv_rows_swiglu_bf16_gs64_b4"}, seed: 47,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 13, 256
			g, up := e.qmatrix(1, rows, cols, 4), e.qmatrix(1, rows, cols, 4)
			x := e.rand(rowsTokens*cols, 1)
			xv, out := e.f32(x), e.buf(4*rowsTokens*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.QMVRowsSwiGLU(cb, out, g.m, up.m, xv, rowsTokens) },
				func() error {
					var want, tol []float64
					for t := range rowsTokens {
						xt := x[t*cols : (t+1)*cols]
						gw, gt := g.product(0, xt)
						uw, ut := up.product(0, xt)
						for r := range rows {
							w, tl := swiglu(gw[r], gt[r], uw[r], ut[r])
							want, tol = append(want, w), append(tol, tl)
						}
					}
					return compare("y", readF32(out, rowsTokens*rows), want, at(tol))
				}
		}}
}

func qmvRowsExpertsCase() Case {
	return Case{Name: "qmv_rows_experts_swiglu_routed", Kernels: []string{"qmv_rows_experts_swiglu_routed_bf16_gs64_b4"}, seed: 48,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const experts, topK, rows, cols = 40, 3, 12, 128
			g, up := e.qmatrix(experts, rows, cols, 4), e.qmatrix(experts, rows, cols, 4)
			x, lg := e.rand(rowsTokens*cols, 1), e.rand(rowsTokens*experts, 2)
			pairs := rowsTokens * topK
			xv, lv, out := e.f32(x), e.f32(lg), e.buf(4*pairs*rows)
			ids, ws := e.buf(4*pairs), e.buf(4*pairs)
			return func(cb gpu.CommandBuffer) error {
					return e.k.QMVRowsExpertsSwiGLURouted(cb, shaders.RowsExpertsIO{
						Out: out, Gate: g.m, Up: up.m, X: xv, IDs: ids, Weights: ws, Logits: lv,
						Experts: experts, TopK: topK, NormalizeTopK: true, Tokens: rowsTokens,
					})
				}, func() error {
					gotIDs := readU32(ids, pairs)
					var want, tol, wantW []float64
					for t := range rowsTokens {
						rowIDs, rowW := Router(lg[t*experts:(t+1)*experts], topK, true)
						wantW = append(wantW, rowW...)
						xt := x[t*cols : (t+1)*cols]
						for j, id := range rowIDs {
							if got := gotIDs[t*topK+j]; got != id {
								return fmt.Errorf("%w: row %d expert %d = %d, want %d", ErrMismatch, t, j, got, id)
							}
							gw, gt := g.product(int(id), xt)
							uw, ut := up.product(int(id), xt)
							for r := range rows {
								w, tl := swiglu(gw[r], gt[r], uw[r], ut[r])
								want, tol = append(want, w), append(tol, tl)
							}
						}
					}
					if err := compare("weight", readF32(ws, pairs), wantW, relTol(wantW, 1e-6)); err != nil {
						return err
					}
					return compare("y", readF32(out, pairs*rows), want, at(tol))
				}
		}}
}

func moeRowsDownCase() Case {
	return Case{Name: "moe_rows_down_combine", Kernels: []string{"moe_rows_down_combine_bf16_gs64_b4"}, seed: 49,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const experts, topK, rows, cols, sharedCols = 5, 3, 13, 128, 192
			ids := []uint32{4, 0, 2, 1, 4, 3, 0, 1, 2}
			pairs := rowsTokens * topK
			down, shDown := e.qmatrix(experts, rows, cols, 4), e.qmatrix(1, rows, sharedCols, 4)
			h, sh, ws, gate := e.rand(pairs*cols, 1), e.rand(rowsTokens*sharedCols, 1), e.rand(pairs, 0.5), e.rand(rowsTokens, 1)
			out := e.buf(4 * rowsTokens * rows)
			hv, shv, wsv, gv, iv := e.f32(h), e.f32(sh), e.f32(ws), e.f32(gate), e.u32(ids)
			return func(cb gpu.CommandBuffer) error {
					return e.k.MoERowsDownCombine(cb, shaders.MoERowsDownIO{
						Out: out, Down: down.m, H: hv, IDs: iv, Weights: wsv, TopK: topK,
						SharedDown: shDown.m, SharedH: shv, SharedGate: gv, Tokens: rowsTokens,
					})
				}, func() error {
					want, tol := make([]float64, rowsTokens*rows), make([]float64, rowsTokens*rows)
					for t := range rowsTokens {
						o := t * rows
						for j := range topK {
							p := t*topK + j
							y, yt := down.product(int(ids[p]), h[p*cols:(p+1)*cols])
							for r := range rows {
								want[o+r] += float64(ws[p]) * y[r]
								tol[o+r] += math.Abs(float64(ws[p])) * yt[r]
							}
						}
						sg := Sigmoid(float64(gate[t]))
						s, st := shDown.product(0, sh[t*sharedCols:(t+1)*sharedCols])
						for r := range rows {
							want[o+r] += sg * s[r]
							tol[o+r] += sg*st[r] + 1e-6*(1+math.Abs(want[o+r]))
						}
					}
					return compare("y", readF32(out, rowsTokens*rows), want, at(tol))
				}
		}}
}
