package selftest

import (
	"fmt"
	"math"

	"petal/gpu"
	"petal/shaders"
)

// The fused decode ops' cases: products that fold in the RMSNorm before
// them or the residual add after them, the MoE's down projections with the
// combine, and the DeltaNet step that computes its conv, each against the
// Go reference of what it replaces.

// normed is RMSNorm(x) * w in float32, the input a normed product reads.
func normed(x, w []float32) []float32 {
	n := RMSNorm(x, w, 1e-6)
	out := make([]float32, len(n))
	for i, v := range n {
		out[i] = float32(v)
	}
	return out
}

// normedProduct is product over the normalised input xn, the norm's error
// (normTol relative to each term) in the bound.
func (q *qmatrix) normedProduct(ex int, xn []float32) (want, tol []float64) {
	want, tol = make([]float64, q.m.Rows), make([]float64, q.m.Rows)
	for r := range want {
		y, mag := q.Mul(ex, r, xn)
		want[r], tol[r] = y, qmvTol(q.m.Cols, mag)+normTol*mag
	}
	return want, tol
}

func qmvAddCase(bits int) Case {
	return Case{Name: fmt.Sprintf("qmv_add %d-bit", bits), Kernels: []string{fmt.Sprintf("qmv_add_bf16_gs64_b%d", bits)}, seed: 40,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 13, 320
			q := e.qmatrix(1, rows, cols, bits)
			x, y := e.rand(cols, 1), e.rand(rows, 1)
			xv, yv := e.f32(x), e.f32(y)
			return func(cb gpu.CommandBuffer) error { return e.k.QMVAdd(cb, yv, q.m, xv) },
				func() error {
					want, tol := q.product(0, x)
					for r := range want {
						want[r] += float64(y[r])
						tol[r] += u * (1 + want[r]*want[r])
					}
					return compare("y", readF32(yv, rows), want, at(tol))
				}
		}}
}

func normQMVMultiCase(bits int) Case {
	return Case{Name: fmt.Sprintf("qmv_multi_norm %d-bit", bits), Kernels: []string{fmt.Sprintf("qmv_multi_norm_bf16_gs64_b%d", bits)}, seed: 41,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const cols = 384
			qs := []*qmatrix{e.qmatrix(1, 9, cols, bits), e.qmatrix(1, 20, cols, bits)}
			x, w := e.rand(cols, 2), e.rand(cols, 1)
			xv, wv := e.f32(x), e.f32(w)
			outs := []shaders.View{e.buf(4 * 9), e.buf(4 * 20)}
			return func(cb gpu.CommandBuffer) error {
					return e.k.NormQMVMulti(cb, shaders.NormQMVMultiIO{
						Outs: outs, Ms: []shaders.QMatrix{qs[0].m, qs[1].m}, X: xv, Norm: shaders.Norm{W: wv, Eps: 1e-6},
					})
				}, func() error {
					xn := normed(x, w)
					for i, q := range qs {
						want, tol := q.normedProduct(0, xn)
						if err := compare(fmt.Sprintf("y%d", i), readF32(outs[i], q.m.Rows), want, at(tol)); err != nil {
							return err
						}
					}
					return nil
				}
		}}
}

func normQMVSwiGLUCase() Case {
	return Case{Name: "qmv_swiglu_norm", Kernels: []string{"qmv_swiglu_norm_bf16_gs64_b4"}, seed: 42,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const rows, cols = 13, 256
			g, up := e.qmatrix(1, rows, cols, 4), e.qmatrix(1, rows, cols, 4)
			x, w := e.rand(cols, 2), e.rand(cols, 1)
			xv, wv, out := e.f32(x), e.f32(w), e.buf(4*rows)
			return func(cb gpu.CommandBuffer) error {
					return e.k.NormQMVSwiGLU(cb, shaders.NormQMVSwiGLUIO{Out: out, Gate: g.m, Up: up.m, X: xv, Norm: shaders.Norm{W: wv, Eps: 1e-6}})
				}, func() error {
					xn := normed(x, w)
					gw, gt := g.normedProduct(0, xn)
					uw, ut := up.normedProduct(0, xn)
					want, tol := make([]float64, rows), make([]float64, rows)
					for r := range rows {
						want[r], tol[r] = swiglu(gw[r], gt[r], uw[r], ut[r])
					}
					return compare("y", readF32(out, rows), want, at(tol))
				}
		}}
}

func normQMVExpertsRoutedCase() Case {
	return Case{Name: "qmv_experts_swiglu_routed_norm", Kernels: []string{"qmv_experts_swiglu_routed_norm_bf16_gs64_b4"}, seed: 43,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const experts, topK, rows, cols = 40, 3, 12, 128
			g, up := e.qmatrix(experts, rows, cols, 4), e.qmatrix(experts, rows, cols, 4)
			x, w, lg := e.rand(cols, 2), e.rand(cols, 1), e.rand(experts, 2)
			xv, wv, lv, out := e.f32(x), e.f32(w), e.f32(lg), e.buf(4*topK*rows)
			ids, ws := e.buf(4*topK), e.buf(4*topK)
			return func(cb gpu.CommandBuffer) error {
					return e.k.NormQMVExpertsSwiGLURouted(cb, shaders.RoutedSwiGLUIO{
						Out: out, Gate: g.m, Up: up.m, X: xv, Norm: shaders.Norm{W: wv, Eps: 1e-6},
						IDs: ids, Weights: ws, Logits: lv, Experts: experts, TopK: topK, NormalizeTopK: true,
					})
				}, func() error {
					wantIDs, wantW := Router(lg, topK, true)
					gotIDs := readU32(ids, topK)
					xn := normed(x, w)
					var want, tol []float64
					for j, id := range wantIDs {
						if gotIDs[j] != id {
							return fmt.Errorf("%w: expert %d = %d, want %d", ErrMismatch, j, gotIDs[j], id)
						}
						gw, gt := g.normedProduct(int(id), xn)
						uw, ut := up.normedProduct(int(id), xn)
						for r := range rows {
							w, t := swiglu(gw[r], gt[r], uw[r], ut[r])
							want, tol = append(want, w), append(tol, t)
						}
					}
					if err := compare("weight", readF32(ws, topK), wantW, relTol(wantW, 1e-6)); err != nil {
						return err
					}
					return compare("y", readF32(out, topK*rows), want, at(tol))
				}
		}}
}

func moeDownCombineCase() Case {
	return Case{Name: "moe_down_combine", Kernels: []string{"moe_down_combine_bf16_gs64_b4"}, seed: 44,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const experts, topK, rows, cols, sharedCols = 5, 3, 13, 128, 192
			ids := []uint32{4, 0, 2}
			down, shDown := e.qmatrix(experts, rows, cols, 4), e.qmatrix(1, rows, sharedCols, 4)
			h, sh, ws, gate, x := e.rand(topK*cols, 1), e.rand(sharedCols, 1), e.rand(topK, 0.5), e.rand(1, 1), e.rand(rows, 1)
			xv := e.f32(x)
			hv, shv, wsv, gv, iv := e.f32(h), e.f32(sh), e.f32(ws), e.f32(gate), e.u32(ids)
			return func(cb gpu.CommandBuffer) error {
					return e.k.MoEDownCombine(cb, shaders.MoEDownIO{
						X: xv, Down: down.m, H: hv, IDs: iv, Weights: wsv, TopK: topK,
						SharedDown: shDown.m, SharedH: shv, SharedGate: gv,
					})
				}, func() error {
					sg := Sigmoid(float64(gate[0]))
					want, tol := widen(x), make([]float64, rows)
					for j, id := range ids {
						y, t := down.product(int(id), h[j*cols:(j+1)*cols])
						for r := range rows {
							want[r] += float64(ws[j]) * y[r]
							tol[r] += math.Abs(float64(ws[j])) * t[r]
						}
					}
					s, st := shDown.product(0, sh)
					for r := range rows {
						want[r] += sg * s[r]
						tol[r] += sg*st[r] + 1e-6*(1+math.Abs(want[r]))
					}
					return compare("x", readF32(xv, rows), want, at(tol))
				}
		}}
}

func deltaStepConvCase() Case {
	return Case{Name: "delta_step_conv", Kernels: []string{"delta_step_conv_f32", "delta_conv_shift_f32"}, seed: 45,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			d := deltaShape
			const tokens = 2
			hv, ch, kern := d.ValueHeads*d.ValueDim, d.Channels(), d.ConvKernel
			in := e.deltaInputs(d, tokens) // its qkv is the conv's input here
			hist, w := e.rand(ch*(kern-1), 1), e.rand(ch*kern, 0.5)
			cs, cw, o := e.f32(hist), e.f32(w), e.buf(4*tokens*hv)
			v := in.v
			return func(cb gpu.CommandBuffer) error {
					for s := range tokens {
						u := v.qkv.At(4 * s * ch)
						err := e.k.DeltaStepConv(cb, shaders.DeltaStepConvIO{
							DeltaStepIO: shaders.DeltaStepIO{
								O: o.At(4 * s * hv), QKV: u, Z: v.z.At(4 * s * hv), B: v.b.At(4 * s * d.ValueHeads), A: v.a.At(4 * s * d.ValueHeads),
								State: v.state, NegA: v.negA, DtBias: v.dtBias, Norm: v.norm, Shape: d,
							},
							ConvState: cs, ConvW: cw,
						})
						if err != nil {
							return err
						}
						cb.Barrier()
						if err := e.k.DeltaConvShift(cb, u, cs, ch, kern); err != nil {
							return err
						}
						cb.Barrier()
					}
					return nil
				}, func() error {
					h := append([]float32(nil), hist...)
					got := readF32(o, tokens*hv)
					conv := make([]float32, ch)
					for s := range tokens {
						for c := range ch {
							conv[c] = float32(Silu(Conv(h, w, c, kern, in.qkv[s*ch+c])))
						}
						want := in.ref.Step(conv, in.z[s*hv:], in.b[s*d.ValueHeads:], in.a[s*d.ValueHeads:])
						if err := compare(fmt.Sprintf("token %d o", s), got[s*hv:], want, relTol(want, 5e-5)); err != nil {
							return err
						}
					}
					if err := compare("state", readF32(v.state, len(in.state)), in.ref.State, relTol(in.ref.State, 5e-5)); err != nil {
						return err
					}
					return compare("conv state", readF32(cs, len(h)), widen(h), func(int) float64 { return 0 })
				}
		},
		bench: func(e *env) func(gpu.CommandBuffer) error {
			// The model's layer: 2 MB of fp32 state read and written.
			d := shaders.DeltaShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4, Eps: 1e-6}
			ch := d.Channels()
			v := e.deltaInputs(d, 1).v
			cs, cw, o := e.f32(e.rand(ch*(d.ConvKernel-1), 1)), e.f32(e.rand(ch*d.ConvKernel, 0.5)), e.buf(4*d.ValueHeads*d.ValueDim)
			step := shaders.DeltaStepIO{O: o, QKV: v.qkv, Z: v.z, B: v.b, A: v.a, State: v.state, NegA: v.negA, DtBias: v.dtBias, Norm: v.norm, Shape: d}
			return func(cb gpu.CommandBuffer) error {
				return e.k.DeltaStepConv(cb, shaders.DeltaStepConvIO{DeltaStepIO: step, ConvState: cs, ConvW: cw})
			}
		}}
}
