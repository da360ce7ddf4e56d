package cpu

import (
	"math"
	"sort"
)

// moe runs the sparse MoE block for t tokens (rows of xn) into out: each
// token's top-k routed experts weighted by their renormalised router
// probabilities, plus the sigmoid-gated shared expert.
func (s *Sequence) moe(b *moe, xn []float32, t int, out []float32) {
	c := s.m.cfg
	h, ne, inter := c.Hidden, c.Experts, c.ExpertIntermediate
	logits := make([]float32, t*ne)
	b.router.mul(0, xn, t, logits)

	// Route: tokens[e] lists (token, weight) pairs for expert e.
	type use struct {
		tok int
		w   float32
	}
	tokens := make([][]use, ne)
	idx := make([]int, ne)
	for i := 0; i < t; i++ {
		lg := logits[i*ne : (i+1)*ne]
		for e := range idx {
			idx[e] = e
		}
		sort.SliceStable(idx, func(a, b int) bool { return lg[idx[a]] > lg[idx[b]] })
		top := idx[:c.TopK]
		// softmax over all experts, then renormalise over the top k.
		maxL := lg[top[0]]
		var all, sel float64
		for _, v := range lg {
			all += math.Exp(float64(v - maxL))
		}
		for _, e := range top {
			sel += math.Exp(float64(lg[e] - maxL))
		}
		for _, e := range top {
			p := math.Exp(float64(lg[e]-maxL)) / all
			if c.NormTopK {
				p = math.Exp(float64(lg[e]-maxL)) / sel
			}
			tokens[e] = append(tokens[e], use{i, float32(p)})
		}
	}

	clear(out[:t*h])
	for e, us := range tokens {
		if len(us) == 0 {
			continue
		}
		n := len(us)
		xe := make([]float32, n*h)
		for j, u := range us {
			copy(xe[j*h:(j+1)*h], xn[u.tok*h:(u.tok+1)*h])
		}
		g := make([]float32, n*inter)
		up := make([]float32, n*inter)
		b.gate.mul(e, xe, n, g)
		b.up.mul(e, xe, n, up)
		for j := range g {
			g[j] = silu(g[j]) * up[j]
		}
		y := make([]float32, n*h)
		b.down.mul(e, g, n, y)
		for j, u := range us {
			dst := out[u.tok*h : (u.tok+1)*h]
			for k, v := range y[j*h : (j+1)*h] {
				dst[k] += u.w * v
			}
		}
	}

	si := c.SharedIntermediate
	g := make([]float32, t*si)
	up := make([]float32, t*si)
	b.sharedGate.mul(0, xn, t, g)
	b.sharedUp.mul(0, xn, t, up)
	for j := range g {
		g[j] = silu(g[j]) * up[j]
	}
	y := make([]float32, t*h)
	b.shDown.mul(0, g, t, y)
	sg := make([]float32, t)
	b.sharedExpertGate.mul(0, xn, t, sg)
	for i := 0; i < t; i++ {
		w := sigmoid(sg[i])
		dst := out[i*h : (i+1)*h]
		for k, v := range y[i*h : (i+1)*h] {
			dst[k] += w * v
		}
	}
}
