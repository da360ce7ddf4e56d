package cpu

import (
	"cmp"
	"math"
	"slices"
)

// use is one routed token of an expert.
type use struct {
	expert, tok int
	w           float32
}

// moe runs the sparse MoE block for t tokens (rows of xn) into out: each
// token's top-k routed experts weighted by their renormalised router
// probabilities, plus the sigmoid-gated shared expert.
func (s *Sequence) moe(sc *scratch, b *moe, xn []float32, t int, out []float32) {
	c := s.m.cfg
	h, ne, inter := c.Hidden, c.Experts, c.ExpertIntermediate
	logits := take(&sc.logits, t*ne)
	b.router.mul(sc, 0, xn, t, logits)

	// Route: uses lists (expert, token, weight) for every token's top k.
	uses := sc.uses[:0]
	idx := take(&sc.idx, ne)
	for i := 0; i < t; i++ {
		lg := logits[i*ne : (i+1)*ne]
		for e := range idx {
			idx[e] = e
		}
		// Descending; stable, so ties keep the lower expert first.
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case lg[a] > lg[b]:
				return -1
			case lg[a] < lg[b]:
				return 1
			}
			return 0
		})
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
			uses = append(uses, use{e, i, float32(p)})
		}
	}
	sc.uses = uses
	// Grouped by expert, each expert's tokens in order.
	slices.SortStableFunc(uses, func(a, b use) int { return cmp.Compare(a.expert, b.expert) })

	clear(out[:t*h])
	for len(uses) > 0 {
		e, n := uses[0].expert, 1
		for n < len(uses) && uses[n].expert == e {
			n++
		}
		us := uses[:n]
		uses = uses[n:]
		xe := take(&sc.xe, n*h)
		for j, u := range us {
			copy(xe[j*h:(j+1)*h], xn[u.tok*h:(u.tok+1)*h])
		}
		g := take(&sc.g, n*inter)
		up := take(&sc.up, n*inter)
		b.gate.mul(sc, e, xe, n, g)
		b.up.mul(sc, e, xe, n, up)
		siluMul(g, up, take(&sc.act, n*inter))
		y := take(&sc.y, n*h)
		b.down.mul(sc, e, g, n, y)
		for j, u := range us {
			dst := out[u.tok*h : (u.tok+1)*h]
			for k, v := range y[j*h : (j+1)*h] {
				dst[k] += u.w * v
			}
		}
	}

	si := c.SharedIntermediate
	g := take(&sc.g, t*si)
	up := take(&sc.up, t*si)
	b.sharedGate.mul(sc, 0, xn, t, g)
	b.sharedUp.mul(sc, 0, xn, t, up)
	siluMul(g, up, take(&sc.act, t*si))
	y := take(&sc.y, t*h)
	b.shDown.mul(sc, 0, g, t, y)
	sg := take(&sc.sgate, t)
	b.sharedExpertGate.mul(sc, 0, xn, t, sg)
	for i := 0; i < t; i++ {
		w := sigmoid(sg[i])
		dst := out[i*h : (i+1)*h]
		for k, v := range y[i*h : (i+1)*h] {
			dst[k] += w * v
		}
	}
}
