package shaders_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/shaders"
	"petal/shaders/selftest"
)

// The chunk conv against the float64 reference over more tokens than the
// window, the history read at the start and stored at the end.
func TestDeltaConvRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	cases := []struct {
		c, kern, tokens int
		race            bool
	}{
		{1, 4, 1, true},
		{257, 4, 70, true}, // past a threadgroup, past a 64-token chunk
		{300, 2, 5, false},
		{100, shaders.DeltaMaxTaps, 9, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("c=%d/kern=%d/tokens=%d", c.c, c.kern, c.tokens), func(t *testing.T) {
			d, k := mixerKernels(t, !c.race)
			us := randFloats(rng, c.tokens*c.c, 1)
			w := randFloats(rng, c.c*c.kern, 0.5)
			hist := randFloats(rng, c.c*(c.kern-1), 1)
			ub, wb, sb := floats(t, d, us), floats(t, d, w), floats(t, d, hist)
			outb := floats(t, d, make([]float32, c.tokens*c.c))
			if _, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
				return k.DeltaConvRows(cb, view(outb), view(ub), view(sb), view(wb), c.c, c.kern, c.tokens)
			}); err != nil {
				t.Fatal(err)
			}
			got := readFloats(outb, c.tokens*c.c)
			for s := range c.tokens {
				for ch := range c.c {
					acc := selftest.Conv(hist, w, ch, c.kern, us[s*c.c+ch])
					// A sum of kern fp32 products: kern * 2^-24 relative to
					// the sum of their magnitudes (< 10 here).
					if g := float64(got[s*c.c+ch]); !within(g, selftest.Silu(acc), 1e-6*(1+math.Abs(acc))) {
						t.Fatalf("token %d: out[%d] = %v, want %v", s, ch, g, selftest.Silu(acc))
					}
				}
			}
			if gotHist := readFloats(sb, len(hist)); fmt.Sprint(gotHist) != fmt.Sprint(hist) {
				t.Fatalf("state after %d tokens = %v, want %v", c.tokens, gotHist, hist)
			}
		})
	}
}

// The chunked scan against the float64 token recurrence on the same
// inputs, over runs that end inside a block, fill one exactly and cross
// several; the final state too. The block form sums in another order than
// the recurrence, so the match is within rounding.
func TestDeltaScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	cases := []struct {
		d      shaders.DeltaShape
		tokens int
		race   bool
	}{
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 16, ValueDim: 16, Eps: 1e-6}, 3, true},
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 64, ValueDim: 32, Eps: 1e-6}, 70, true},     // past a block, two staging steps
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 2, KeyDim: 24, ValueDim: 48, Eps: 1e-5}, 64, true},     // a block exactly, ragged staging, 2 simd-groups
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, Eps: 1e-6}, 131, false}, // the model's head dims, three blocks
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 3, KeyDim: 8, ValueDim: 8, Eps: 1e-6}, 200, false},     // one simd-group per head
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/tokens=%d", c.d.KeyHeads, c.d.ValueHeads, c.d.KeyDim, c.d.ValueDim, c.tokens), func(t *testing.T) {
			dev, k := mixerKernels(t, !c.race)
			d, n := c.d, c.tokens
			hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
			in := newDeltaInputs(rng, d, n)
			qkv, z, bs, as, state, ref := in.qkv, in.z, in.b, in.a, in.state, in.ref
			b := in.upload(t, dev)
			scanState := floats(t, dev, state)
			scanOut := floats(t, dev, make([]float32, n*hv))
			scratch := floats(t, dev, make([]float32, shaders.DeltaScanScratch(d, n)))
			tr, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
				return k.DeltaScan(cb, shaders.DeltaScanIO{DeltaStepIO: shaders.DeltaStepIO{O: view(scanOut), QKV: view(b.qkv), Z: view(b.z), B: view(b.b), A: view(b.a), State: view(scanState), NegA: view(b.negA), DtBias: view(b.dtBias), Norm: view(b.norm), Shape: d}, Scratch: view(scratch), Tokens: n})
			})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Dispatches() != 3 {
				t.Errorf("%d dispatches", tr.Dispatches())
			}
			got := readFloats(scanOut, n*hv)
			var worst float64
			for s := range n {
				want := ref.Step(qkv[s*ch:], z[s*hv:], bs[s*d.ValueHeads:], as[s*d.ValueHeads:])
				for i, w := range want {
					g := float64(got[s*hv+i])
					// TestDeltaStepConv's tolerance, with the error
					// growing with the tokens the state has seen.
					tol := 5e-5 * float64(1+s/8) * (1 + math.Abs(w))
					if !within(g, w, tol) {
						t.Fatalf("token %d: o[%d][%d] = %v, want %v", s, i/d.ValueDim, i%d.ValueDim, g, w)
					}
					worst = max(worst, math.Abs(g-w)/(1+math.Abs(w)))
				}
			}
			for i, sc := range readFloats(scanState, len(state)) {
				w := ref.State[i]
				if tol := 5e-5 * float64(1+n/8) * (1 + math.Abs(w)); !within(float64(sc), w, tol) {
					t.Fatalf("state[%d] = %v after the scan, want %v", i, sc, w)
				}
			}
			t.Logf("largest relative output error %.2g", worst)
		})
	}
}

// DeltaScan refuses shapes its tiles cannot take and short views, and
// encodes nothing then.
func TestDeltaScanRefuses(t *testing.T) {
	dev, k := mixerKernels(t, true)
	good := shaders.DeltaShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 16, ValueDim: 16, Eps: 1e-6}
	big := floats(t, dev, make([]float32, 1<<16))
	v := view(big)
	cb, err := dev.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	scan := func(d shaders.DeltaShape, tokens int, scratch shaders.View) error {
		return k.DeltaScan(cb, shaders.DeltaScanIO{DeltaStepIO: shaders.DeltaStepIO{O: v, QKV: v, Z: v, B: v, A: v, State: v, NegA: v, DtBias: v, Norm: v, Shape: d}, Scratch: scratch, Tokens: tokens})
	}
	short := floats(t, dev, make([]float32, shaders.DeltaScanScratch(good, 65)-1))
	for name, err := range map[string]error{
		"key dim 12":    scan(shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 12, ValueDim: 16}, 4, v),
		"key dim 256":   scan(shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 256, ValueDim: 16}, 1, v),
		"value dim 20":  scan(shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 16, ValueDim: 20}, 4, v),
		"uneven heads":  scan(shaders.DeltaShape{KeyHeads: 2, ValueHeads: 3, KeyDim: 16, ValueDim: 16}, 4, v),
		"no tokens":     scan(good, 0, v),
		"NaN eps":       scan(shaders.DeltaShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 16, ValueDim: 16, Eps: float32(math.NaN())}, 4, v),
		"short scratch": scan(good, 65, view(short)),
	} {
		if !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := cb.Trace().Dispatches(); n != 0 {
		t.Errorf("%d dispatches encoded from bad input", n)
	}
}
