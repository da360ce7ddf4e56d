package shaders_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/shaders"
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
					acc := refConv(hist, w, ch, c.kern, us[s*c.c+ch])
					// As TestDeltaConv: kern fp32 products.
					if g := float64(got[s*c.c+ch]); !within(g, refSilu(acc), 1e-6*(1+math.Abs(acc))) {
						t.Fatalf("token %d: out[%d] = %v, want %v", s, ch, g, refSilu(acc))
					}
				}
			}
			if gotHist := readFloats(sb, len(hist)); fmt.Sprint(gotHist) != fmt.Sprint(hist) {
				t.Fatalf("state after %d tokens = %v, want %v", c.tokens, gotHist, hist)
			}
		})
	}
}

// The chunk scan against the float64 recurrence, and against DeltaStep run
// token by token on the same inputs: the same arithmetic, so the outputs
// and the final state must be identical.
func TestDeltaScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	cases := []struct {
		d      shaders.DeltaShape
		tokens int
		race   bool
	}{
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 16, ValueDim: 16, Eps: 1e-6}, 3, true},
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 32, Eps: 1e-6}, 70, false},  // past a 64-token chunk
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 2, KeyDim: 64, ValueDim: 48, Eps: 1e-5}, 5, true},    // row slices, ragged simd-groups
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, Eps: 1e-6}, 4, false}, // the model's head dims
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/tokens=%d", c.d.KeyHeads, c.d.ValueHeads, c.d.KeyDim, c.d.ValueDim, c.tokens), func(t *testing.T) {
			dev, k := mixerKernels(t, !c.race)
			d, n := c.d, c.tokens
			hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
			in := newDeltaInputs(rng, d, n)
			qkv, z, bs, as, state, ref := in.qkv, in.z, in.b, in.a, in.state, in.ref
			b := in.upload(t, dev)
			scanState, stepState := floats(t, dev, state), floats(t, dev, state)
			scanOut, stepOut := floats(t, dev, make([]float32, n*hv)), floats(t, dev, make([]float32, n*hv))
			tr, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
				if err := k.DeltaScan(cb, view(scanOut), view(b.qkv), view(b.z), view(b.b), view(b.a), view(scanState), view(b.negA), view(b.dtBias), view(b.norm), d, n); err != nil {
					return err
				}
				return b.steps(cb, k, d, stepOut, stepState, n)
			})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Dispatches() != n+1 {
				t.Errorf("%d dispatches", tr.Dispatches())
			}
			got, step := readFloats(scanOut, n*hv), readFloats(stepOut, n*hv)
			for s := range n {
				want := ref.step(qkv[s*ch:], z[s*hv:], bs[s*d.ValueHeads:], as[s*d.ValueHeads:])
				for i, w := range want {
					g := got[s*hv+i]
					if g != step[s*hv+i] {
						t.Fatalf("token %d: o[%d] = %v, DeltaStep gives %v", s, i, g, step[s*hv+i])
					}
					// TestDeltaStep's tolerance, with the error growing
					// with the tokens the state has seen.
					if !within(float64(g), w, 5e-5*float64(1+s/8)*(1+math.Abs(w))) {
						t.Fatalf("token %d: o[%d][%d] = %v, want %v", s, i/d.ValueDim, i%d.ValueDim, g, w)
					}
				}
			}
			sc, st := readFloats(scanState, len(state)), readFloats(stepState, len(state))
			for i := range sc {
				if sc[i] != st[i] {
					t.Fatalf("state[%d] = %v after the scan, %v after the steps", i, sc[i], st[i])
				}
			}
		})
	}
}
