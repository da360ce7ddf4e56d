package cpu

import (
	"math"

	"petal/engine/checkpoint"
)

// deltaNet runs the Gated DeltaNet mixer for the t new tokens of segs
// (rows of xn), advancing the conv window and recurrent state of each
// piece's sequence at layer li, and writes out_proj's output to out; the
// first nt rows take the products' tiles. It uses the recurrent form
// token by token, which the chunked form of prefill equals up to rounding.
func (m *Model) deltaNet(sc *scratch, dn *deltaNet, li int, segs []seg, xn []float32, t, nt int, out []float32) {
	c := m.cfg
	ch, hk, hv, dk, dv := c.ConvChannels(), c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim
	u := take(&sc.u, t*ch)
	z := take(&sc.z, t*hv*dv)
	bb := take(&sc.beta, t*hv)
	aa := take(&sc.alpha, t*hv)
	pg := sc.products()
	pg.add(dn.qkv, 0, xn, t, nt, pg.rows(u, t, ch))
	pg.add(dn.z, 0, xn, t, nt, pg.rows(z, t, hv*dv))
	pg.add(dn.b, 0, xn, t, nt, pg.rows(bb, t, hv))
	pg.add(dn.a, 0, xn, t, nt, pg.rows(aa, t, hv))
	pg.compute()

	o := take(&sc.o, t*hv*dv)
	steps := sc.steps[:0]
	for _, g := range segs {
		lo, hi := g.at, g.at+len(g.tokens)
		st := &g.s.layers[li]
		if g.keep > 0 {
			st.keptConv = grow(&st.keptConv, g.keep*len(st.conv))
			st.keptState = grow(&st.keptState, g.keep*len(st.state))
		}
		steps = append(steps, deltaStep{
			c: c, dn: dn, st: st, t: hi - lo, keep: g.keep,
			u: u[lo*ch : hi*ch], bb: bb[lo*hv : hi*hv], aa: aa[lo*hv : hi*hv], o: o[lo*hv*dv : hi*hv*dv],
		})
	}
	sc.steps = steps
	sc.deltas = deltaBatch{steps: steps, per: ch}
	sc.parallelFor(len(steps)*ch, 64, &sc.deltas)
	siluMul(u, nil, take(&sc.act, t*ch), ch)

	qScale := float32(1 / math.Sqrt(float64(dk)))
	for i := 0; i < t; i++ {
		row := u[i*ch : (i+1)*ch]
		for h := 0; h < hk; h++ {
			l2norm(row[h*dk:(h+1)*dk], qScale)
			l2norm(row[(hk+h)*dk:(hk+h+1)*dk], 1)
		}
	}

	sc.deltas = deltaBatch{steps: steps, per: hv, heads: true}
	sc.parallelFor(len(steps)*hv, 1, &sc.deltas)

	// Gated RMSNorm per value head: norm(o) * w * silu(z).
	for i := 0; i < t*hv; i++ {
		oh := o[i*dv : (i+1)*dv]
		rmsNorm(oh, oh, dn.norm, c.RMSNormEps)
	}
	siluMul(z, nil, take(&sc.act, t*hv*dv), hv*dv)
	for i, g := range z {
		o[i] *= g
	}
	dn.out.mulTiled(sc, 0, o, t, nt, out)
}

// deltaStep holds the operands of one piece's DeltaNet step for its two
// parallel loops, each a task wrapping a pointer to it (which an
// interface holds without allocating).
type deltaStep struct {
	c            *checkpoint.Config
	dn           *deltaNet
	st           *layerState
	u, bb, aa, o []float32
	t            int
	keep         int // states kept after the first keep tokens (seg.keep)
}

// deltaBatch runs one of the two loops (deltaConv, or deltaHeads where
// heads) over several pieces: unit j of piece i, a channel or a value
// head, is number i*per+j.
type deltaBatch struct {
	steps []deltaStep
	per   int
	heads bool
}

func (b *deltaBatch) run(pt *part, lo, hi int) {
	for i := lo / b.per; i < len(b.steps) && i*b.per < hi; i++ {
		first := i * b.per
		a, z := max(lo, first)-first, min(hi, first+b.per)-first
		if b.heads {
			deltaHeads{&b.steps[i]}.run(pt, a, z)
		} else {
			deltaConv{&b.steps[i]}.run(pt, a, z)
		}
	}
}

type deltaConv struct{ *deltaStep }

// run applies the causal depthwise conv over time in place in u, to
// channels [lo, hi) (SiLU follows over all of u at once). Tokens go last
// to first, each a contiguous run of channels, so that an output
// overwrites an input no later token needs; the window (the last
// kernel-1 inputs of each channel) is kept first and replaced last.
func (d deltaConv) run(pt *part, lo, hi int) {
	ch, kern, t := d.c.ConvChannels(), d.c.ConvKernel, d.t
	h := kern - 1
	hist := d.st.conv
	// input(j, c) is channel c's input at token j, j < 0 the window's.
	input := func(j, c int) float32 {
		if j >= 0 {
			return d.u[j*ch+c]
		}
		return hist[c*h+h+j]
	}
	next := take(&pt.window, (hi-lo)*h)
	for c := lo; c < hi; c++ {
		for k := range h {
			next[(c-lo)*h+k] = input(t-h+k, c)
		}
	}
	// The window after each kept token, read before the outputs
	// overwrite the inputs.
	for j := range d.keep {
		kept := d.st.keptConv[j*ch*h:]
		for c := lo; c < hi; c++ {
			for k := range h {
				kept[c*h+k] = input(j+1-h+k, c)
			}
		}
	}
	for i := t - 1; i >= 0; i-- {
		ui := d.u[i*ch : (i+1)*ch]
		for c := lo; c < hi; c++ {
			w := d.dn.conv[c*kern : (c+1)*kern]
			acc := w[h] * ui[c]
			if i >= h {
				for k := range h {
					acc += w[k] * d.u[(i-h+k)*ch+c]
				}
			} else {
				for k := range h {
					acc += w[k] * input(i-h+k, c)
				}
			}
			ui[c] = acc
		}
	}
	copy(hist[lo*h:hi*h], next)
}

type deltaHeads struct{ *deltaStep }

// run advances the recurrent state of value heads [lo, hi) over the tokens.
func (d deltaHeads) run(pt *part, lo, hi int) {
	c := d.c
	ch, hk, hv, dk, dv := c.ConvChannels(), c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim
	ratio := hv / hk
	kv := take(&pt.kv, dv)
	ka := take(&pt.ka, dk)
	for h := lo; h < hi; h++ {
		S := d.st.state[h*dk*dv : (h+1)*dk*dv]
		kh := h / ratio
		for i := 0; i < d.t; i++ {
			row := d.u[i*ch : (i+1)*ch]
			q := row[kh*dk : (kh+1)*dk]
			k := row[(hk+kh)*dk : (hk+kh+1)*dk]
			v := row[2*hk*dk+h*dv : 2*hk*dk+(h+1)*dv]
			beta := sigmoid(d.bb[i*hv+h])
			alpha := float32(math.Exp(float64(d.dn.negA[h] * softplus(d.aa[i*hv+h]+d.dn.dtBias[h]))))
			// kv = (alpha*S)^T k, the memory's prediction for k.
			for a, v := range k {
				ka[a] = v * alpha
			}
			clear(kv)
			axpyRows(S, dv, ka, kv)
			for j := range kv {
				kv[j] = beta * (v[j] - kv[j])
			}
			deltaRows(S, k, q, alpha, kv, d.o[(i*hv+h)*dv:(i*hv+h+1)*dv])
			if i < d.keep {
				// Copied while the head's state is in cache: a rejected
				// draft costs no recompute, a verify step one write of
				// the states (see Sequence.Rewind).
				copy(d.st.keptState[(i*hv+h)*dk*dv:(i*hv+h+1)*dk*dv], S)
			}
		}
	}
}

// deltaRows sets each row a of the state S (len(kv) columns) to
// alpha*row + k[a]*kv and adds the new row times q[a] to o: the state's
// update and the query's read of it in one pass, 32 columns at a time by
// the vector kernel.
func deltaRows(S, k, q []float32, alpha float32, kv, o []float32) {
	dv := len(kv)
	if len(k) == 0 {
		return
	}
	c := 0
	for ; c+32 <= dv; c += 32 {
		if !deltaRows32Vec(S[c:], dv, k, q, alpha, kv[c:c+32], o[c:c+32]) {
			break
		}
	}
	if c == dv {
		return
	}
	kv, o = kv[c:], o[c:dv]
	for a, ka := range k {
		qa := q[a]
		sr := S[a*dv+c : (a+1)*dv]
		for j := range sr {
			sv := alpha*sr[j] + ka*kv[j]
			sr[j] = sv
			o[j] += sv * qa
		}
	}
}

// l2norm scales x to unit length (eps 1e-6 inside the root), times scale.
func l2norm(x []float32, scale float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1/math.Sqrt(ss+1e-6)) * scale
	for i := range x {
		x[i] *= inv
	}
}
