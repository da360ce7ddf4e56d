package selftest

import (
	"fmt"
	"math"

	"petal/gpu"
	"petal/shaders"
)

// The mixers' cases, at the demo model's attention and DeltaNet shapes (so
// on the sim they reuse the libraries the demo model compiles).

var (
	attnShape  = shaders.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 128, RotaryDim: 32, Theta: 1e7, Eps: 1e-6}
	deltaShape = shaders.DeltaShape{KeyHeads: 4, ValueHeads: 8, KeyDim: 64, ValueDim: 64, ConvKernel: 4, Eps: 1e-6}
)

// attnTol bounds attention's error relative to 1 + |o|: fp32 dot products
// and an online softmax err by ~1e-6 at most here, while one position too
// many or too few moves o by ~|v|/n, above 1e-3.
const attnTol = 1e-5

// ropePair is the magnitude of want[i] plus, in the rotated part of a
// head, that of the element RoPE rotates it with.
func ropePair(want []float64, i int, a shaders.AttnShape) float64 {
	pair := math.Abs(want[i])
	if j := i % a.HeadDim; j < a.RotaryDim {
		pair += math.Abs(want[i-j+(j+a.RotaryDim/2)%a.RotaryDim])
	}
	return pair
}

func attnPrepCase() Case {
	return Case{Name: "attn_prep", Kernels: []string{"attn_prep_f16kv"}, seed: 21,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			a := attnShape
			const pos, rows = 3, 2
			hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			qg, kin, vin := e.rand(rows*2*hd, 2), e.rand(rows*kd, 2), e.rand(rows*kd, 1)
			qn, kn := e.rand(a.HeadDim, 0.3), e.rand(a.HeadDim, 0.3)
			for i := range qn {
				qn[i]++
				kn[i]++
			}
			capacity := pos + rows + 1
			qv, gv := e.buf(4*rows*hd), e.buf(4*rows*hd)
			kc, vc := e.half(make([]float32, capacity*kd)), e.half(make([]float32, capacity*kd))
			in := []shaders.View{e.f32(qg), e.f32(kin), e.f32(vin), e.f32(qn), e.f32(kn)}
			return func(cb gpu.CommandBuffer) error {
					return e.k.AttnPrepRows(cb, shaders.AttnPrepIO{
						Q: qv, Gate: gv, QG: in[0], K: in[1], V: in[2], KCache: kc, VCache: vc,
						QNorm: in[3], KNorm: in[4], Shape: a, Pos: pos,
					}, rows)
				}, func() error {
					var wantQ, wantG, wantK []float64
					for r := range rows {
						for h := range a.Heads {
							q := RMSNorm(qg[(r*a.Heads+h)*2*a.HeadDim:][:a.HeadDim], qn, a.Eps)
							Rope(q, a.RotaryDim, a.Theta, pos+r)
							wantQ = append(wantQ, q...)
							wantG = append(wantG, widen(qg[(r*a.Heads+h)*2*a.HeadDim+a.HeadDim:][:a.HeadDim])...)
						}
						for h := range a.KVHeads {
							k := RMSNorm(kin[(r*a.KVHeads+h)*a.HeadDim:][:a.HeadDim], kn, a.Eps)
							Rope(k, a.RotaryDim, a.Theta, pos+r)
							wantK = append(wantK, k...)
						}
					}
					// A norm, a product and a rotation by an fp32 angle: 1e-5
					// of the pair's magnitude; the cache adds fp16 rounding.
					e5 := func(w []float64) func(int) float64 {
						return func(i int) float64 { return 1e-5*ropePair(w, i, a) + 1e-7 }
					}
					if err := compare("q", readF32(qv, rows*hd), wantQ, e5(wantQ)); err != nil {
						return err
					}
					if err := compare("gate", readF32(gv, rows*hd), wantG, func(int) float64 { return 0 }); err != nil {
						return err
					}
					if err := compare("k cache", readHalf(kc.At(2*pos*kd), rows*kd), wantK, func(i int) float64 {
						t := e5(wantK)(i)
						return math.Exp2(-11)*(math.Abs(wantK[i])+t) + t + math.Exp2(-25)
					}); err != nil {
						return err
					}
					return compare("v cache", readHalf(vc.At(2*pos*kd), rows*kd), widen(RoundHalves(vin)), func(int) float64 { return 0 })
				}
		}}
}

// attnCaches draws fp16-rounded caches of capacity positions; the
// reference attends the same rounded values.
func (e *env) attnCaches(a shaders.AttnShape, capacity int) (kc, vc []float32) {
	kd := a.KVHeads * a.HeadDim
	s := 1 / math.Sqrt(math.Sqrt(float64(a.HeadDim)))
	return RoundHalves(e.rand(capacity*kd, s)), RoundHalves(e.rand(capacity*kd, 1))
}

func attnDecodeCase() Case {
	return Case{Name: "attn_decode", Kernels: []string{"attn_decode_f16kv", "attn_merge_f32"}, seed: 22,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			a := attnShape
			n := shaders.AttnBlock + 5 // past one block: blocks, then the merge
			hd := a.Heads * a.HeadDim
			q, gate := e.rand(hd, 2/math.Sqrt(math.Sqrt(float64(a.HeadDim)))), e.rand(hd, 2)
			kc, vc := e.attnCaches(a, n)
			ov, qv, gv, kv, vv := e.buf(4*hd), e.f32(q), e.f32(gate), e.half(kc), e.half(vc)
			scratch := e.buf(shaders.AttnScratchBytes(a, n))
			return func(cb gpu.CommandBuffer) error {
					return e.k.AttnDecode(cb, shaders.AttnDecodeIO{AttnIO: shaders.AttnIO{O: ov, Q: qv, Gate: gv, KCache: kv, VCache: vv, Shape: a}, Scratch: scratch, N: n})
				},
				func() error {
					var want []float64
					for h := range a.Heads {
						want = append(want, Attend(q, gate, kc, vc, a, h, n)...)
					}
					return compare("o", readF32(ov, hd), want, relTol(want, attnTol))
				}
		},
		bench: func(e *env) func(gpu.CommandBuffer) error {
			a := shaders.AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256} // the model's layer, 4096 positions: 8 MB of fp16 K/V
			const n = 4096
			hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			ov, qv, gv := e.buf(4*hd), e.f32(e.rand(hd, 0.3)), e.f32(e.rand(hd, 1))
			kv, vv, scratch := e.half(e.rand(n*kd, 0.5)), e.half(e.rand(n*kd, 1)), e.buf(shaders.AttnScratchBytes(a, n))
			return func(cb gpu.CommandBuffer) error {
				return e.k.AttnDecode(cb, shaders.AttnDecodeIO{AttnIO: shaders.AttnIO{O: ov, Q: qv, Gate: gv, KCache: kv, VCache: vv, Shape: a}, Scratch: scratch, N: n})
			}
		}}
}

func attnPrefillCase() Case {
	return Case{Name: "attn_prefill", Kernels: []string{"attn_prefill_f16kv"}, seed: 23,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			a := attnShape
			const pos0, tokens = 3, 5
			hd := a.Heads * a.HeadDim
			rows := shaders.AttnPrefillRows(tokens)
			q, gate := e.rand(tokens*hd, 2/math.Sqrt(math.Sqrt(float64(a.HeadDim)))), e.rand(tokens*hd, 2)
			kc, vc := e.attnCaches(a, pos0+tokens)
			// q's rows past the chunk hold NaN: they must not reach a real row.
			qp := append(append([]float32(nil), q...), make([]float32, (rows-tokens)*hd)...)
			for i := tokens * hd; i < len(qp); i++ {
				qp[i] = float32(math.NaN())
			}
			ov, qv, gv, kv, vv := e.buf(4*rows*hd), e.f32(qp), e.f32(gate), e.half(kc), e.half(vc)
			return func(cb gpu.CommandBuffer) error {
					return e.k.AttnPrefill(cb, shaders.AttnPrefillIO{AttnIO: shaders.AttnIO{O: ov, Q: qv, Gate: gv, KCache: kv, VCache: vv, Shape: a}, Pos0: pos0, Tokens: tokens})
				},
				func() error {
					var want []float64
					for t := range tokens {
						for h := range a.Heads {
							want = append(want, Attend(q[t*hd:], gate[t*hd:], kc, vc, a, h, pos0+t+1)...)
						}
					}
					return compare("o", readF32(ov, tokens*hd), want, relTol(want, attnTol))
				}
		}}
}

// deltaConvRowsCase runs three tokens through the conv in one
// DeltaConvRows.
func deltaConvRowsCase() Case {
	const tokens = 3
	return Case{Name: "delta_conv_rows", Kernels: []string{"delta_conv_rows_f32"}, seed: 24,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			c, kern := deltaShape.Channels(), deltaShape.ConvKernel
			in, hist, w := e.rand(tokens*c, 1), e.rand(c*(kern-1), 1), e.rand(c*kern, 0.5)
			uv, sv, wv, out := e.f32(in), e.f32(hist), e.f32(w), e.buf(4*tokens*c)
			return func(cb gpu.CommandBuffer) error {
					return e.k.DeltaConvRows(cb, out, uv, sv, wv, c, kern, tokens)
				}, func() error {
					h := append([]float32(nil), hist...)
					want := make([]float64, tokens*c)
					for t := range tokens {
						for ch := range c {
							want[t*c+ch] = Silu(Conv(h, w, ch, kern, in[t*c+ch]))
						}
					}
					if err := compare("out", readF32(out, tokens*c), want, relTol(want, 1e-6)); err != nil {
						return err
					}
					return compare("state", readF32(sv, len(h)), widen(h), func(int) float64 { return 0 })
				}
		}}
}

// deltaInputs draws tokens tokens of DeltaNet inputs and the reference
// starting from the same state.
type deltaInputs struct {
	qkv, z, b, a, state []float32
	ref                 *Delta
	v                   struct{ qkv, z, b, a, state, negA, dtBias, norm shaders.View }
}

func (e *env) deltaInputs(d shaders.DeltaShape, tokens int) *deltaInputs {
	hv := d.ValueHeads * d.ValueDim
	in := &deltaInputs{qkv: e.rand(tokens*d.Channels(), 1), z: e.rand(tokens*hv, 1.5), b: e.rand(tokens*d.ValueHeads, 2), a: e.rand(tokens*d.ValueHeads, 3)}
	negA := make([]float32, d.ValueHeads)
	for h := range negA {
		negA[h] = -float32(math.Exp(e.rng.Float64()*4 - 2))
	}
	in.a[0] = 30 // past softplus's threshold
	norm := e.rand(d.ValueDim, 0.3)
	for i := range norm {
		norm[i]++
	}
	in.state = e.rand(d.ValueHeads*d.KeyDim*d.ValueDim, 0.5)
	in.ref = &Delta{D: d, NegA: negA, DtBias: e.rand(d.ValueHeads, 1), Norm: norm, State: widen(in.state)}
	in.v.qkv, in.v.z, in.v.b, in.v.a = e.f32(in.qkv), e.f32(in.z), e.f32(in.b), e.f32(in.a)
	in.v.state, in.v.negA, in.v.dtBias, in.v.norm = e.f32(in.state), e.f32(negA), e.f32(in.ref.DtBias), e.f32(norm)
	return in
}

// check compares tokens outputs in o and the final state with the
// reference; the error bound grows with the tokens the state has seen.
func (in *deltaInputs) check(o shaders.View, tokens int) error {
	d := in.ref.D
	hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
	got := readF32(o, tokens*hv)
	for s := range tokens {
		want := in.ref.Step(in.qkv[s*ch:], in.z[s*hv:], in.b[s*d.ValueHeads:], in.a[s*d.ValueHeads:])
		if err := compare(fmt.Sprintf("token %d o", s), got[s*hv:], want, relTol(want, 5e-5*float64(1+s/8))); err != nil {
			return err
		}
	}
	return compare("state", readF32(in.v.state, len(in.state)), in.ref.State, relTol(in.ref.State, 5e-5*float64(1+tokens/8)))
}

func deltaScanCase() Case {
	return Case{Name: "delta_scan", Kernels: []string{"delta_chunk_prep_f32", "delta_chunk_scan_f32", "delta_gated_norm_rows_f32"}, seed: 26,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			d := deltaShape
			const tokens = 5
			in := e.deltaInputs(d, tokens)
			o, scratch := e.buf(4*tokens*d.ValueHeads*d.ValueDim), e.buf(4*shaders.DeltaScanScratch(d, tokens))
			v := in.v
			return func(cb gpu.CommandBuffer) error {
				return e.k.DeltaScan(cb, shaders.DeltaScanIO{DeltaStepIO: shaders.DeltaStepIO{O: o, QKV: v.qkv, Z: v.z, B: v.b, A: v.a, State: v.state, NegA: v.negA, DtBias: v.dtBias, Norm: v.norm, Shape: d}, Scratch: scratch, Tokens: tokens})
			}, func() error { return in.check(o, tokens) }
		}}
}
