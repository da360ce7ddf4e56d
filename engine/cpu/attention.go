package cpu

import (
	"math"

	"petal/engine/checkpoint"
)

// attention runs gated causal attention for the t new tokens of segs
// (rows of xn), appending each piece's keys and values to its sequence's
// layer li, and writes o_proj's output to out; the first nt rows take the
// products' tiles.
func (m *Model) attention(sc *scratch, a *attention, li int, segs []seg, xn []float32, t, nt int, out []float32) {
	c := m.cfg
	nh, kvh, d := c.Heads, c.KVHeads, c.HeadDim
	qg := take(&sc.qg, t*nh*2*d)
	k := take(&sc.k, t*kvh*d)
	v := take(&sc.v, t*kvh*d)
	pg := sc.products()
	pg.add(a.q, 0, xn, t, nt, pg.rows(qg, t, nh*2*d))
	pg.add(a.k, 0, xn, t, nt, pg.rows(k, t, kvh*d))
	pg.add(a.v, 0, xn, t, nt, pg.rows(v, t, kvh*d))
	pg.compute()

	q := take(&sc.q, t*nh*d)
	gate := take(&sc.gate, t*nh*d)
	for _, g := range segs {
		for j := range g.tokens {
			i, pos := g.at+j, g.ropePos(j)
			for h := 0; h < nh; h++ {
				src := qg[(i*nh+h)*2*d:]
				dq := q[(i*nh+h)*d : (i*nh+h+1)*d]
				rmsNorm(dq, src[:d], a.qNorm, c.RMSNormEps)
				m.rope.apply(dq, pos)
				copy(gate[(i*nh+h)*d:(i*nh+h+1)*d], src[d:2*d])
			}
			for h := 0; h < kvh; h++ {
				dk := k[(i*kvh+h)*d : (i*kvh+h+1)*d]
				rmsNorm(dk, dk, a.kNorm, c.RMSNormEps)
				m.rope.apply(dk, pos)
			}
		}
	}
	if m.halfKV {
		roundHalves(k)
		roundHalves(v)
	}
	sigmoidRows(gate, nh*d)
	o := take(&sc.o, t*nh*d)
	heads := sc.heads[:0]
	jobs := 0
	for _, g := range segs {
		st := &g.s.layers[li]
		lo, hi := g.at, g.at+len(g.tokens)
		st.k = append(st.k, k[lo*kvh*d:hi*kvh*d]...)
		st.v = append(st.v, v[lo*kvh*d:hi*kvh*d]...)
		heads = append(heads, attnHeads{
			c: c, st: st, pos: g.pos, t: hi - lo,
			q: q[lo*nh*d : hi*nh*d], gate: gate[lo*nh*d : hi*nh*d], o: o[lo*nh*d : hi*nh*d],
		})
		jobs += heads[len(heads)-1].jobs()
	}
	sc.heads = heads
	sc.attn = attnBatch{heads}
	sc.parallelFor(jobs, 1, &sc.attn)
	a.o.mulTiled(sc, 0, o, t, nt, out)
}

// attnBatch is the task of attention proper over several pieces: job j
// of piece i is number j past the jobs of the pieces before.
type attnBatch struct{ heads []attnHeads }

func (b *attnBatch) run(pt *part, lo, hi int) {
	first := 0
	for i := range b.heads {
		a := &b.heads[i]
		n := a.jobs()
		if lo < first+n && hi > first {
			a.run(pt, max(lo, first)-first, min(hi, first+n)-first)
		}
		first += n
	}
}

// attnBlock is how many of a chunk's tokens a job of attnHeads takes: each
// block of keys and values read serves them all (one query at a time
// streamed the whole cache per query, 5 MB a head at 10k positions).
const attnBlock = 16

// attnHeads is the task of attention proper, one job per head and block
// of attnBlock tokens.
type attnHeads struct {
	c          *checkpoint.Config
	st         *layerState
	q, gate, o []float32 // gate holds the sigmoids of the gate
	pos        int       // of the first new token
	t          int       // new tokens
}

// jobs is how many jobs a's piece makes: one per head and block.
func (a *attnHeads) jobs() int { return a.c.Heads * ((a.t + attnBlock - 1) / attnBlock) }

func (a *attnHeads) run(pt *part, lo, hi int) {
	c, st := a.c, a.st
	nh, kvh, d := c.Heads, c.KVHeads, c.HeadDim
	scale := float32(1 / math.Sqrt(float64(d)))
	group := nh / kvh
	blocks := (a.t + attnBlock - 1) / attnBlock
	var four [4]float32
	var twelve [12]float32
	var invs [attnBlock]float32 // 1 / each query's softmax denominator
	stride := kvh * d
	for job := lo; job < hi; job++ {
		h, b := job/blocks, job%blocks
		i0, i1 := b*attnBlock, min((b+1)*attnBlock, a.t)
		kh := h / group
		keys, values := st.k[kh*d:], st.v[kh*d:]
		// Query i sees positions [0, pos+i] (causal), its scores at
		// scores[(i-i0)*span:].
		span := a.pos + i1
		scores := grow(&pt.scores, (i1-i0)*span)
		for p := 0; p < span; p += 4 {
			// Queries before p-pos do not see position p. Three queries
			// at a time take a block of 4 keys in one kernel call (the
			// scores past a query's last position are written and never
			// read).
			i := max(i0, p-a.pos)
			for ; p+4 <= span && i+3 <= i1; i += 3 {
				if !dot4x3Vec(keys[p*stride:], stride, a.q[(i*nh+h)*d:], nh*d, d, &twelve) {
					break
				}
				for j := range 3 {
					copy(scores[(i+j-i0)*span+p:][:4], twelve[4*j:4*j+4])
				}
			}
			for ; i < i1; i++ {
				n := a.pos + i + 1
				qi := a.q[(i*nh+h)*d : (i*nh+h+1)*d]
				s := scores[(i-i0)*span : (i-i0)*span+n]
				if p+4 <= span && dot4RowsVec(keys[p*stride:], stride, qi, d, &four) {
					copy(s[p:min(p+4, n)], four[:])
					continue
				}
				for q := p; q < min(p+4, n); q++ {
					s[q] = dot(qi, keys[q*stride:q*stride+d])
				}
			}
		}
		for i := i0; i < i1; i++ {
			s := scores[(i-i0)*span : (i-i0)*span+a.pos+i+1]
			maxS := float32(math.Inf(-1))
			for p := range s {
				s[p] *= scale
				maxS = max(maxS, s[p])
			}
			invs[i-i0] = 1 / expShift(s, maxS)
		}
		for p0 := 0; p0 < span; p0 += 64 {
			// Three queries that see all 64 positions of the block share
			// each value row read; the others take what they see alone.
			i := max(i0, p0-a.pos)
			for ; p0+64 <= a.pos+i+1 && i+3 <= i1; i += 3 {
				axpyRows3(values[p0*stride:], stride, scores[(i-i0)*span+p0:], span, 64, a.o[(i*nh+h)*d:], nh*d, d)
			}
			for ; i < i1; i++ {
				s := scores[(i-i0)*span : (i-i0)*span+a.pos+i+1]
				axpyRows(values[p0*stride:], stride, s[p0:min(p0+64, len(s))], a.o[(i*nh+h)*d:(i*nh+h+1)*d])
			}
		}
		for i := i0; i < i1; i++ {
			inv := invs[i-i0]
			oi := a.o[(i*nh+h)*d : (i*nh+h+1)*d]
			gi := a.gate[(i*nh+h)*d : (i*nh+h+1)*d]
			for j := range oi {
				oi[j] *= inv * gi[j]
			}
		}
	}
}

// rope rotates the first dims values of a head in rotate-half pairs
// (j, j+dims/2) by position*theta^(-2j/dims), the position of pair j
// being component axes[j] of a 3D (mRoPE) position; a text token's three
// are equal.
type rope struct {
	dims    int
	invFreq []float64
	axes    []uint8
}

func newRope(c *checkpoint.Config) rope {
	dims := c.RotaryDim
	r := rope{dims: dims, invFreq: make([]float64, dims/2), axes: ropeAxes(c)}
	for j := range r.invFreq {
		r.invFreq[j] = math.Pow(c.RopeTheta, -2*float64(j)/float64(dims))
	}
	return r
}

func (r rope) apply(x []float32, p [3]int) {
	half := r.dims / 2
	for j := 0; j < half; j++ {
		// The angle is rounded to fp32 first, as transformers computes it.
		pos := p[r.axes[j]]
		ang := float64(float32(float64(pos) * float64(float32(r.invFreq[j]))))
		cos, sin := float32(math.Cos(ang)), float32(math.Sin(ang))
		a, b := x[j], x[j+half]
		x[j] = a*cos - b*sin
		x[j+half] = b*cos + a*sin
	}
}

// roundHalves rounds every value to the nearest IEEE binary16 (ties to
// even) and widens it back, as a KV cache stored in half precision does.
func roundHalves(v []float32) {
	for i, f := range v {
		v[i] = roundHalf(f)
	}
}

func roundHalf(f float32) float32 {
	const (
		overflow = 0x477ff000 // 65520: rounds past the largest half, 65504
		tiny     = 0x33000000 // 2^-25: at or below it rounds to zero
	)
	b := math.Float32bits(f)
	sign, abs := b&0x80000000, b&0x7fffffff
	switch {
	case abs >= 0x7f800000:
		return f
	case abs >= overflow:
		return math.Float32frombits(sign | 0x7f800000)
	case abs < tiny:
		return math.Float32frombits(sign)
	}
	// The step between halves near f: 2^(e-10), or 2^-24 below the normal
	// range; scaling by a power of two keeps the rounding exact.
	step := max(int(abs>>23)-127-10, -24)
	x := math.Ldexp(float64(math.Float32frombits(abs)), -step)
	r := float32(math.Ldexp(math.RoundToEven(x), step))
	return math.Float32frombits(sign | math.Float32bits(r))
}
