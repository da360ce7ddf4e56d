package shaders_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"petal/gpu"
	"petal/shaders"
	"petal/shaders/selftest"
)

// AttnPrefill against the float64 causal attention, row by row: chunks
// from the start of the cache and after cached positions, past a 32-token
// tile and the decode route's block size, and the model's head shape.
// Positions past the chunk hold huge values, so attending one too many
// shows.
func TestAttnPrefill(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	cases := []struct {
		a            shaders.AttnShape
		pos0, tokens int
		race         bool
	}{
		{shaders.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64}, 0, 33, true},     // a partial token block
		{shaders.AttnShape{Heads: 8, KVHeads: 1, HeadDim: 256}, 250, 9, false},  // crosses position 256
		{shaders.AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256}, 3, 2, false},   // the model's heads
		{shaders.AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256}, 13, 70, false}, // several threadgroups, positions not block-aligned
		{shaders.AttnShape{Heads: 2, KVHeads: 2, HeadDim: 32}, 0, 1, true},      // one token, no GQA
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("heads=%d/kv=%d/dim=%d/pos0=%d/tokens=%d", c.a.Heads, c.a.KVHeads, c.a.HeadDim, c.pos0, c.tokens), func(t *testing.T) {
			d, k := mixerKernels(t, !c.race)
			a := c.a
			hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			n := c.pos0 + c.tokens
			capacity := n + 3
			q := randFloats(rng, c.tokens*hd, 2/math.Sqrt(math.Sqrt(float64(a.HeadDim))))
			// fp16 caches: the reference attends the same rounded values.
			kc := selftest.RoundHalves(randFloats(rng, capacity*kd, 1/math.Sqrt(math.Sqrt(float64(a.HeadDim)))))
			vc := selftest.RoundHalves(randFloats(rng, capacity*kd, 1))
			gate := randFloats(rng, c.tokens*hd, 2)
			for p := n * kd; p < capacity*kd; p++ {
				kc[p], vc[p] = 1e4, 1e4
			}
			// q's rows past the chunk (up to a whole token block) hold
			// NaN and o's garbage: neither may reach a real row.
			rows := shaders.AttnPrefillRows(c.tokens)
			qp := append(slices.Clone(q), make([]float32, (rows-c.tokens)*hd)...)
			for i := c.tokens * hd; i < len(qp); i++ {
				qp[i] = float32(math.NaN())
			}
			ob := floats(t, d, randFloats(rng, rows*hd, 1e30))
			tr, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
				return k.AttnPrefill(cb, shaders.AttnPrefillIO{AttnIO: shaders.AttnIO{O: view(ob), Q: view(floats(t, d, qp)), Gate: view(floats(t, d, gate)), KCache: view(halves(t, d, kc)), VCache: view(halves(t, d, vc)), Shape: a}, Pos0: c.pos0, Tokens: c.tokens})
			})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Dispatches() != 1 {
				t.Errorf("%d dispatches", tr.Dispatches())
			}
			got := readFloats(ob, c.tokens*hd)
			for tok := range c.tokens {
				for h := range a.Heads {
					want := selftest.Attend(q[tok*hd:], gate[tok*hd:], kc, vc, a, h, c.pos0+tok+1)
					for i, w := range want {
						// attnTol as for AttnDecode: the same fp32 dot
						// products and online softmax.
						if g := float64(got[tok*hd+h*a.HeadDim+i]); !within(g, w, attnTol*(1+math.Abs(w))) {
							t.Fatalf("token %d: o[%d][%d] = %v, want %v", tok, h, i, g, w)
						}
					}
				}
			}
		})
	}
	_, k := mixerKernels(t, true)
	a := shaders.AttnShape{Heads: 2, KVHeads: 2, HeadDim: 32}
	b := floats(t, k.Device(), make([]float32, shaders.AttnPrefillTokens*a.Heads*a.HeadDim))
	row := halves(t, k.Device(), make([]float32, a.KVHeads*a.HeadDim)) // one position
	cb, _ := k.Device().NewCommandBuffer()
	if err := k.AttnPrefill(cb, shaders.AttnPrefillIO{AttnIO: shaders.AttnIO{O: view(b), Q: view(b), Gate: view(b), KCache: view(row), VCache: view(row), Shape: a}, Pos0: 0, Tokens: 2}); err == nil {
		t.Error("accepted caches too short for the chunk")
	}
	if err := k.AttnPrefill(cb, shaders.AttnPrefillIO{AttnIO: shaders.AttnIO{O: view(b), Q: view(b), Gate: view(b), KCache: view(row), VCache: view(row), Shape: a}, Pos0: -1, Tokens: 1}); err == nil {
		t.Error("accepted a negative position")
	}
	if err := k.AttnPrefill(cb, shaders.AttnPrefillIO{AttnIO: shaders.AttnIO{O: view(b), Q: view(b), Gate: view(b), KCache: view(row).At(1), VCache: view(row), Shape: a}, Pos0: 0, Tokens: 1}); err == nil {
		t.Error("accepted a misaligned cache")
	}
	short := floats(t, k.Device(), make([]float32, 3*a.Heads*a.HeadDim)) // 3 rows, not a whole block
	if err := k.AttnPrefill(cb, shaders.AttnPrefillIO{AttnIO: shaders.AttnIO{O: view(b), Q: view(short), Gate: view(b), KCache: view(row), VCache: view(row), Shape: a}, Pos0: 0, Tokens: 1}); err == nil {
		t.Error("accepted a q view without a whole token block")
	}
}
