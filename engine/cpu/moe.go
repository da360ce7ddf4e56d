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
// probabilities, plus the sigmoid-gated shared expert. The first nt rows
// take the products' tiles, in an expert's product as in the others: its
// tokens are in order, so those rows come first there too. Tokens of
// several sequences that share an expert share one read of it.
func (m *Model) moe(sc *scratch, b *moe, xn []float32, t, nt int, out []float32) {
	c := m.cfg
	h, ne, inter := c.Hidden, c.Experts, c.ExpertIntermediate
	logits := take(&sc.logits, t*ne)
	b.router.mulTiled(sc, 0, xn, t, nt, logits)

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
		nte := 0
		for j, u := range us {
			copy(xe[j*h:(j+1)*h], xn[u.tok*h:(u.tok+1)*h])
			if u.tok < nt {
				nte = j + 1
			}
		}
		g := take(&sc.g, n*inter)
		up := take(&sc.up, n*inter)
		b.gate.mulTiled(sc, e, xe, n, nte, g)
		b.up.mulTiled(sc, e, xe, n, nte, up)
		siluMul(g, up, take(&sc.act, n*inter), inter)
		y := take(&sc.y, n*h)
		b.down.mulTiled(sc, e, g, n, nte, y)
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
	b.sharedGate.mulTiled(sc, 0, xn, t, nt, g)
	b.sharedUp.mulTiled(sc, 0, xn, t, nt, up)
	siluMul(g, up, take(&sc.act, t*si), si)
	y := take(&sc.y, t*h)
	b.shDown.mulTiled(sc, 0, g, t, nt, y)
	sg := take(&sc.sgate, t)
	b.sharedExpertGate.mulTiled(sc, 0, xn, t, nt, sg)
	for i := 0; i < t; i++ {
		w := sigmoid(sg[i])
		dst := out[i*h : (i+1)*h]
		for k, v := range y[i*h : (i+1)*h] {
			dst[k] += w * v
		}
	}
}
