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

	// Every expert's tokens in one block (in uses' order), each expert's
	// rows and the shared expert's in one group of products a stage.
	nu, si := len(uses), c.SharedIntermediate
	xe := take(&sc.xe, nu*h)
	for j, u := range uses {
		copy(xe[j*h:(j+1)*h], xn[u.tok*h:(u.tok+1)*h])
	}
	g, up := take(&sc.g, nu*inter), take(&sc.up, nu*inter)
	sg, sup := take(&sc.sharedG, t*si), take(&sc.sharedUp, t*si)
	gate := take(&sc.sgate, t)
	pg := sc.products()
	forExperts(uses, nt, func(e, lo, hi, nte int) {
		n := hi - lo
		pg.add(b.gate, e, xe[lo*h:hi*h], n, nte, pg.rows(g[lo*inter:hi*inter], n, inter))
		pg.add(b.up, e, xe[lo*h:hi*h], n, nte, pg.rows(up[lo*inter:hi*inter], n, inter))
	})
	pg.add(b.sharedGate, 0, xn, t, nt, pg.rows(sg, t, si))
	pg.add(b.sharedUp, 0, xn, t, nt, pg.rows(sup, t, si))
	pg.add(b.sharedExpertGate, 0, xn, t, nt, pg.rows(gate, t, 1))
	pg.compute()
	siluMul(g, up, take(&sc.act, nu*inter), inter)
	siluMul(sg, sup, take(&sc.act, t*si), si)

	y, sy := take(&sc.y, nu*h), take(&sc.sharedY, t*h)
	pg = sc.products()
	forExperts(uses, nt, func(e, lo, hi, nte int) {
		pg.add(b.down, e, g[lo*inter:hi*inter], hi-lo, nte, pg.rows(y[lo*h:hi*h], hi-lo, h))
	})
	pg.add(b.shDown, 0, sg, t, nt, pg.rows(sy, t, h))
	pg.compute()

	// Each token's experts in ascending order, then the shared expert.
	clear(out[:t*h])
	for j, u := range uses {
		dst := out[u.tok*h : (u.tok+1)*h]
		for k, v := range y[j*h : (j+1)*h] {
			dst[k] += u.w * v
		}
	}
	for i := 0; i < t; i++ {
		w := sigmoid(gate[i])
		dst := out[i*h : (i+1)*h]
		for k, v := range sy[i*h : (i+1)*h] {
			dst[k] += w * v
		}
	}
}

// forExperts calls f for each expert's run of uses (grouped by expert,
// each expert's tokens in order): the expert, the run [lo, hi) and how
// many of its first tokens are among the first nt rows, which take the
// tiles.
func forExperts(uses []use, nt int, f func(e, lo, hi, nte int)) {
	for lo := 0; lo < len(uses); {
		e, hi, nte := uses[lo].expert, lo, 0
		for hi < len(uses) && uses[hi].expert == e {
			if uses[hi].tok < nt {
				nte = hi - lo + 1
			}
			hi++
		}
		f(e, lo, hi, nte)
		lo = hi
	}
}
