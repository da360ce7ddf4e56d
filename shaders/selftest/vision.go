package selftest

import (
	"fmt"
	"math"

	"petal/gpu"
	"petal/shaders"
)

// The vision family's cases: the tower's LayerNorm, dense products (bf16
// and f32 weights, each activation, accumulating), its rotary and
// attention within frames, the feature copy, and the 3D-rotary attention
// prep of a prompt with images.

// visionCases is every case of the family.
func visionCases() []Case {
	return []Case{
		visLayerNormCase(),
		visDenseCase(true, shaders.VisActNone, true), visDenseCase(true, shaders.VisActGELUTanh, false),
		visDenseCase(false, shaders.VisActGELUErf, false),
		visAttentionCase(8), visAttentionCase(72), visCopyCase(), mropePrepCase(), mropeStepCase(),
	}
}

func visLayerNormCase() Case {
	return Case{Name: "vis layernorm", Kernels: []string{"vis_layernorm_f32"}, seed: 61,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n, rows, eps = 300, 5, 1e-6
			x, w, b := e.rand(n*rows, 3), e.rand(n, 1), e.rand(n, 1)
			for i := range x {
				x[i] += 2 // a mean far from 0, as the tower's stream has
			}
			xv, wv, bv, out := e.f32(x), e.f32(w), e.f32(b), e.buf(4*n*rows)
			return func(cb gpu.CommandBuffer) error { return e.k.VisLayerNorm(cb, out, xv, wv, bv, n, rows, eps) },
				func() error {
					want := LayerNorm(x, w, b, n, eps)
					return compare("y", readF32(out, n*rows), want, relTol(want, 1e-5))
				}
		}}
}

// LayerNorm is (x - mean) / sqrt(var + eps) · w + b over each row of n.
func LayerNorm(x, w, b []float32, n int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r+n <= len(x); r += n {
		var s, ss float64
		for _, v := range x[r : r+n] {
			s += float64(v)
		}
		mean := s / float64(n)
		for _, v := range x[r : r+n] {
			ss += (float64(v) - mean) * (float64(v) - mean)
		}
		inv := 1 / math.Sqrt(ss/float64(n)+eps)
		for i, v := range x[r : r+n] {
			out[r+i] = (float64(v)-mean)*inv*float64(w[i]) + float64(b[i])
		}
	}
	return out
}

// GELU is the activation act of the vision kernels.
func GELU(v float64, act shaders.VisAct) float64 {
	switch act {
	case shaders.VisActGELUTanh:
		return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	case shaders.VisActGELUErf:
		return 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
	}
	return v
}

// visDenseCase runs a product over partial tiles (19 tokens, 37 outputs,
// 45 inputs: none a multiple of the 16-wide tile).
func visDenseCase(bf16 bool, act shaders.VisAct, accumulate bool) Case {
	kind, fn := "f32", "vis_dense_f32"
	if bf16 {
		kind, fn = "bf16", "vis_dense_bf16"
	}
	return Case{Name: fmt.Sprintf("vis dense %s, act %d, accumulate %t", kind, act, accumulate), Kernels: []string{fn}, seed: 62,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const tokens, rows, cols = 19, 37, 45
			w, b, x, y0 := e.rand(rows*cols, 0.2), e.rand(rows, 0.5), e.rand(tokens*cols, 1), e.rand(tokens*rows, 1)
			m := shaders.VisMatrix{Rows: rows, Cols: cols, BF16: bf16}
			if bf16 {
				raw := make([]uint16, len(w))
				for i, v := range w {
					raw[i] = BF16(v)
					w[i] = FromBF16(raw[i])
				}
				m.W = e.u16(raw)
			} else {
				m.W = e.f32(w)
			}
			bv, xv, out := e.f32(b), e.f32(x), e.f32(y0)
			return func(cb gpu.CommandBuffer) error { return e.k.VisDense(cb, out, m, bv, xv, tokens, act, accumulate) },
				func() error {
					want, tol := make([]float64, tokens*rows), make([]float64, tokens*rows)
					for t := range tokens {
						for o := range rows {
							s, mag := float64(b[o]), math.Abs(float64(b[o]))
							for k := range cols {
								p := float64(w[o*cols+k]) * float64(x[t*cols+k])
								s, mag = s+p, mag+math.Abs(p)
							}
							v := GELU(s, act)
							if accumulate {
								v += float64(y0[t*rows+o])
							}
							// fp32 sums of cols+1 terms, then the activation's
							// own rounding.
							want[t*rows+o], tol[t*rows+o] = v, float64(cols+2)*u*mag+1e-6*(1+math.Abs(v))
						}
					}
					return compare("y", readF32(out, tokens*rows), want, at(tol))
				}
		}}
}

// visAttentionCase rotates and attends two frames of 6x7 patches (42, past
// one run of 32 keys) with heads of headDim (72: the real tower's, past
// one lane's 32 dims).
func visAttentionCase(headDim int) Case {
	return Case{Name: fmt.Sprintf("vis rope+attention, head dim %d", headDim), Kernels: []string{"vis_rope_f32", "vis_attention_f32"}, seed: 63,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			s := shaders.VisShape{Heads: 2, HeadDim: headDim, Frame: 42}
			s.Tokens = 2 * s.Frame
			hd, half := s.Heads*s.HeadDim, s.HeadDim/2
			qkv := e.rand(s.Tokens*3*hd, 1)
			cos, sin := make([]float32, s.Frame*half), make([]float32, s.Frame*half)
			for i := range cos {
				a := e.rng.Float64() * 2 * math.Pi
				cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
			}
			qv, cv, sv, out := e.f32(qkv), e.f32(cos), e.f32(sin), e.buf(4*s.Tokens*hd)
			return func(cb gpu.CommandBuffer) error {
					if err := e.k.VisRope(cb, qv, cv, sv, s); err != nil {
						return err
					}
					cb.Barrier()
					return e.k.VisAttention(cb, out, qv, s)
				}, func() error {
					want := VisAttention(qkv, cos, sin, s)
					return compare("o", readF32(out, s.Tokens*hd), want, relTol(want, 1e-5))
				}
		}}
}

// VisAttention is the tower's attention in float64: q and k rotated by
// the tables (rotate-half), softmax(q·kᵀ/√d)·v within each frame.
func VisAttention(qkv, cos, sin []float32, s shaders.VisShape) []float64 {
	hd, d, half := s.Heads*s.HeadDim, s.HeadDim, s.HeadDim/2
	x := widen(qkv)
	for p := range s.Tokens {
		for part := range 2 {
			for h := range s.Heads {
				v := x[p*3*hd+part*hd+h*d:][:d]
				for i := range half {
					c, sn := float64(cos[(p%s.Frame)*half+i]), float64(sin[(p%s.Frame)*half+i])
					a, b := v[i], v[i+half]
					v[i], v[i+half] = a*c-b*sn, b*c+a*sn
				}
			}
		}
	}
	out := make([]float64, s.Tokens*hd)
	scores := make([]float64, s.Frame)
	for p := range s.Tokens {
		f0 := p / s.Frame * s.Frame
		for h := range s.Heads {
			q := x[p*3*hd+h*d:][:d]
			best := math.Inf(-1)
			for k := range scores {
				var dot float64
				for i, qi := range q {
					dot += qi * x[(f0+k)*3*hd+hd+h*d+i]
				}
				scores[k] = dot / math.Sqrt(float64(d))
				best = max(best, scores[k])
			}
			var sum float64
			for k := range scores {
				scores[k] = math.Exp(scores[k] - best)
				sum += scores[k]
			}
			for k, w := range scores {
				for i := range d {
					out[p*hd+h*d+i] += w / sum * x[(f0+k)*3*hd+2*hd+h*d+i]
				}
			}
		}
	}
	return out
}

func visCopyCase() Case {
	return Case{Name: "vis copy", Kernels: []string{"vis_copy_f32"}, seed: 64,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			const n, at = 300, 7
			x := e.rand(n, 1)
			xv, out := e.f32(x), e.buf(4*(n+2*at))
			return func(cb gpu.CommandBuffer) error { return e.k.CopyFloats(cb, out.At(4*at), xv, n) },
				func() error {
					want := make([]float64, n+2*at)
					copy(want[at:], widen(x))
					return compare("y", readF32(out, n+2*at), want, func(int) float64 { return 0 })
				}
		}}
}

// mropePrepCase preps three rows: an image token (three different
// components), a text row (all equal, as AttnPrep at that position) and
// another image token, with the interleaved axes of Qwen3.6's
// mrope_section [11, 11, 10] over 16 frequencies.
func mropePrepCase() Case {
	return Case{Name: "mrope_prep", Kernels: []string{"mrope_prep_f16kv"}, seed: 65,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			a := attnShape
			const pos, rows = 3, 3
			pos3 := []uint32{5, 6, 9, 12, 12, 12, 5, 7, 8}
			axes := make([]int, a.RotaryDim/2)
			for j := range axes {
				axes[j] = j % 3
			}
			hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			qg, kin, vin := e.rand(rows*2*hd, 2), e.rand(rows*kd, 2), e.rand(rows*kd, 1)
			qn, kn := e.rand(a.HeadDim, 0.3), e.rand(a.HeadDim, 0.3)
			capacity := pos + rows + 1
			qv, gv := e.buf(4*rows*hd), e.buf(4*rows*hd)
			kc, vc := e.half(make([]float32, capacity*kd)), e.half(make([]float32, capacity*kd))
			in := []shaders.View{e.f32(qg), e.f32(kin), e.f32(vin), e.f32(qn), e.f32(kn), e.u32(pos3)}
			return func(cb gpu.CommandBuffer) error {
					return e.k.MRopePrep(cb, shaders.AttnPrepIO{
						Q: qv, Gate: gv, QG: in[0], K: in[1], V: in[2], KCache: kc, VCache: vc,
						QNorm: in[3], KNorm: in[4], Shape: a, Pos: pos,
					}, in[5], axes, rows)
				}, func() error {
					var wantQ, wantK, wantV []float64
					for r := range rows {
						p := [3]int{int(pos3[3*r]), int(pos3[3*r+1]), int(pos3[3*r+2])}
						for h := range a.Heads {
							q := RMSNorm(qg[(r*a.Heads+h)*2*a.HeadDim:][:a.HeadDim], qn, a.Eps)
							Rope3(q, a.RotaryDim, a.Theta, p, axes)
							wantQ = append(wantQ, q...)
						}
						for h := range a.KVHeads {
							k := RMSNorm(kin[(r*a.KVHeads+h)*a.HeadDim:][:a.HeadDim], kn, a.Eps)
							Rope3(k, a.RotaryDim, a.Theta, p, axes)
							wantK = append(wantK, k...)
						}
						wantV = append(wantV, RoundHalvesF64(vin[r*kd:(r+1)*kd])...)
					}
					e5 := func(w []float64) func(int) float64 {
						return func(i int) float64 { return 1e-5*ropePair(w, i, a) + 1e-7 }
					}
					if err := compare("q", readF32(qv, rows*hd), wantQ, e5(wantQ)); err != nil {
						return err
					}
					if err := compare("v cache", readHalf(vc.At(2*pos*kd), rows*kd), wantV, func(int) float64 { return 0 }); err != nil {
						return err
					}
					return compare("k cache", readHalf(kc.At(2*pos*kd), rows*kd), wantK, func(i int) float64 {
						t := e5(wantK)(i)
						return math.Exp2(-11)*(math.Abs(wantK[i])+t) + t + math.Exp2(-25)
					})
				}
		}}
}

// Rope3 is Rope with frequency j turned by component axes[j] of the 3D
// position pos.
func Rope3(x []float64, dims int, theta float64, pos [3]int, axes []int) {
	half := dims / 2
	for j := range half {
		inv := float32(math.Pow(theta, -2*float64(j)/float64(dims)))
		ang := float64(float32(pos[axes[j]]) * inv)
		cos, sin := math.Cos(ang), math.Sin(ang)
		a, b := x[j], x[j+half]
		x[j] = a*cos - b*sin
		x[j+half] = b*cos + a*sin
	}
}

// RoundHalvesF64 is v rounded to fp16, in float64.
func RoundHalvesF64(v []float32) []float64 { return widen(RoundHalves(v)) }

// mropeStepCase preps one text row at cache row 9 turning by 9 - 4 (a
// decode step after an image that moved positions back by 4).
func mropeStepCase() Case {
	return Case{Name: "mrope_prep text step", Kernels: []string{"mrope_prep_f16kv"}, seed: 66,
		setup: func(e *env) (func(gpu.CommandBuffer) error, func() error) {
			a := attnShape
			const pos, delta = 9, -4
			axes := make([]int, a.RotaryDim/2)
			for j := range axes {
				axes[j] = j % 3
			}
			hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			qg, kin, vin := e.rand(2*hd, 2), e.rand(kd, 2), e.rand(kd, 1)
			qn, kn := e.rand(a.HeadDim, 0.3), e.rand(a.HeadDim, 0.3)
			qv, gv := e.buf(4*hd), e.buf(4*hd)
			kc, vc := e.half(make([]float32, (pos+1)*kd)), e.half(make([]float32, (pos+1)*kd))
			in := []shaders.View{e.f32(qg), e.f32(kin), e.f32(vin), e.f32(qn), e.f32(kn)}
			return func(cb gpu.CommandBuffer) error {
					return e.k.MRopeStep(cb, shaders.AttnPrepIO{
						Q: qv, Gate: gv, QG: in[0], K: in[1], V: in[2], KCache: kc, VCache: vc,
						QNorm: in[3], KNorm: in[4], Shape: a, Pos: pos,
					}, delta, axes)
				}, func() error {
					p := [3]int{pos + delta, pos + delta, pos + delta}
					var wantQ, wantK []float64
					for h := range a.Heads {
						q := RMSNorm(qg[h*2*a.HeadDim:][:a.HeadDim], qn, a.Eps)
						Rope3(q, a.RotaryDim, a.Theta, p, axes)
						wantQ = append(wantQ, q...)
					}
					for h := range a.KVHeads {
						k := RMSNorm(kin[h*a.HeadDim:][:a.HeadDim], kn, a.Eps)
						Rope3(k, a.RotaryDim, a.Theta, p, axes)
						wantK = append(wantK, k...)
					}
					e5 := func(w []float64) func(int) float64 {
						return func(i int) float64 { return 1e-5*ropePair(w, i, a) + 1e-7 }
					}
					if err := compare("q", readF32(qv, hd), wantQ, e5(wantQ)); err != nil {
						return err
					}
					return compare("k cache", readHalf(kc.At(2*pos*kd), kd), wantK, func(i int) float64 {
						t := e5(wantK)(i)
						return math.Exp2(-11)*(math.Abs(wantK[i])+t) + t + math.Exp2(-25)
					})
				}
		}}
}
