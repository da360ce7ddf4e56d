package gpumodel

import (
	"errors"

	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/shaders"
)

// Prefill geometry.
const (
	// prefillMinTokens is the shortest run of tokens that takes the chunked
	// prefill; fewer take the decode kernels one token each, whose
	// matrix-vector products cost the same weight reads per token and skip
	// the routing and tiling.
	prefillMinTokens = 4
	// defaultPrefillChunk is how many tokens one prefill command buffer
	// holds: every weight is read once per chunk (the token tiles of a
	// chunk share each dequantized weight tile), and the chunk's
	// activations (about 0.34 MB per token for the 35B model, logits
	// aside; Footprint.PrefillBytes) stay small next to the weights.
	defaultPrefillChunk = 512
)

// logitsMode says which of a chunk's positions get logits.
type logitsMode int

const (
	noLogits   logitsMode = iota
	lastLogits            // the last position's, into act.logits (and the argmax, if asked)
	allLogits             // every position's, into chunkActs.all
)

// chunkActs are the prefill activations of up to cap tokens, rows of the
// decode step's vectors, allocated on the first prefill.
type chunkActs struct {
	cap                     int
	x, xn, delta            shaders.View
	qg, k, v, q, gate, o    shaders.View
	u, conv, z, b, a, dOut  shaders.View
	dScratch                shaders.View // DeltaScan's block matrices
	router, ids, weights    shaders.View
	mapping, slotOf, blocks shaders.View
	eg, eu, eh, ys          shaders.View
	shG, shU, shH, shOut    shaders.View
	shGate                  shaders.View
	all                     shaders.View // [cap][vocab], only once allLogits was asked
}

// chunkViews lists the prefill activations' views.
func (ca *chunkActs) views() []shaders.View {
	return []shaders.View{
		ca.x, ca.xn, ca.delta, ca.qg, ca.k, ca.v, ca.q, ca.gate, ca.o,
		ca.u, ca.conv, ca.z, ca.b, ca.a, ca.dOut, ca.dScratch, ca.router, ca.ids, ca.weights,
		ca.mapping, ca.slotOf, ca.blocks, ca.eg, ca.eu, ca.eh, ca.ys,
		ca.shG, ca.shU, ca.shH, ca.shOut, ca.shGate, ca.all,
	}
}

// releaseChunk frees the prefill activations; no command buffer using them
// may be in flight. A sequence at rest holds none, so a prefix cache of
// many sequences pays for them once, not per sequence.
func (s *Sequence) releaseChunk() {
	for _, v := range s.chunk.views() {
		if v.Buf != nil {
			s.free(v.Buf)
		}
	}
	s.chunk = chunkActs{}
}

// chunkCapacity is the token capacity of the prefill activations for a run
// of n tokens: the chunk, or n rounded up to a power of two, so runs of
// similar lengths reuse one allocation; whole blocks of AttnPrefill's
// tokens, whose q and o it reads and writes in full.
func (m *Model) chunkCapacity(n int) int {
	c := shaders.AttnPrefillTokens
	for c < min(n, m.prefillChunk) {
		c *= 2
	}
	return min(c, shaders.AttnPrefillRows(m.prefillChunk))
}

// ensureChunk allocates the prefill activations for runs of n tokens (and
// the every-position logits when all). No command buffer using the old
// ones may be in flight.
func (s *Sequence) ensureChunk(n int, all bool) error {
	n = s.m.chunkCapacity(n)
	ca := &s.chunk
	if n > ca.cap {
		s.releaseChunk()
		*ca = chunkActs{cap: n}
		c, d := s.m.cfg, s.m.delta
		var errs []error
		a := func(floats int) shaders.View {
			v, err := s.alloc(4 * n * floats)
			errs = append(errs, err)
			return v
		}
		h, nh, kvh, hd := c.Hidden, c.Heads, c.KVHeads, c.HeadDim
		ca.x, ca.xn, ca.delta = a(h), a(h), a(h)
		if s.m.hasAttention() {
			ca.qg, ca.k, ca.v = a(2*nh*hd), a(kvh*hd), a(kvh*hd)
			ca.q, ca.gate, ca.o = a(nh*hd), a(nh*hd), a(nh*hd)
		}
		if s.m.hasDeltaNet() {
			ch, vd := d.Channels(), d.ValueHeads*d.ValueDim
			ca.u, ca.conv, ca.z = a(ch), a(ch), a(vd)
			ca.b, ca.a, ca.dOut = a(d.ValueHeads), a(d.ValueHeads), a(vd)
			scratch, err := s.alloc(4 * shaders.DeltaScanScratch(d, n))
			errs = append(errs, err)
			ca.dScratch = scratch
		}
		k, ei := c.TopK, c.ExpertIntermediate
		ca.router, ca.ids, ca.weights = a(c.Experts), a(k), a(k)
		ca.mapping, ca.slotOf = a(k), a(k)
		blocks, err := s.alloc(16 * shaders.RouteCapacity(n*k, c.Experts))
		errs = append(errs, err)
		ca.blocks = blocks
		ca.eg, ca.eu, ca.eh, ca.ys = a(k*ei), a(k*ei), a(k*ei), a(k*h)
		si := c.SharedIntermediate
		ca.shG, ca.shU, ca.shH, ca.shOut, ca.shGate = a(si), a(si), a(si), a(h), a(1)
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	if all && ca.all.Buf == nil {
		v, err := s.alloc(4 * ca.cap * s.m.cfg.Vocab)
		if err != nil {
			return err
		}
		ca.all = v
	}
	return nil
}

// chunkBytes is the device memory of the prefill activations for a run of
// n tokens (logits of the last position only).
func (s *Sequence) chunkBytes(n int) (int64, error) {
	before := s.Bytes()
	if err := s.ensureChunk(n, false); err != nil {
		return 0, err
	}
	b := s.Bytes() - before
	s.releaseChunk()
	return b, nil
}

func (m *Model) hasAttention() bool {
	for _, l := range m.layers {
		if l.kind == checkpoint.Attention {
			return true
		}
	}
	return false
}

func (m *Model) hasDeltaNet() bool {
	for _, l := range m.layers {
		if l.kind == checkpoint.DeltaNet {
			return true
		}
	}
	return false
}

// row is row r of a chunk activation of width floats per token.
func row(v shaders.View, r, width int) shaders.View { return v.At(4 * r * width) }

// chunk describes one prefill command buffer: n tokens read from token
// slots slot.. slot+n-1, at positions pos.. pos+n-1.
type chunk struct {
	pos, slot, n int
	logits       logitsMode
	next         *shaders.View // with lastLogits: where the argmax goes
}

// encodeChunk records one prefill chunk into cb: the whole model over n
// tokens, every matrix product a token-tiled GEMM with the weights
// dequantized in threadgroup memory, the mixers over the whole chunk
// (attention over the chunk and the cache; the DeltaNet conv, then its
// chunked recurrence), the MoE as a grouped GEMM over a routing built
// on the GPU. The caches must hold pos+n positions.
func (s *Sequence) encodeChunk(cb gpu.CommandBuffer, ch chunk) error {
	m, k, ca := s.m, s.m.k, &s.chunk
	c := m.cfg
	h, n := c.Hidden, ch.n
	var errs []error
	do := func(err error) { errs = append(errs, err) }

	do(k.EmbedRows(cb, ca.x, m.embed, s.slot(ch.slot), n))
	cb.Barrier()
	do(k.RMSNorm(cb, ca.xn, ca.x, m.layers[0].inNorm, h, n, c.RMSNormEps))
	cb.Barrier()
	for i := range m.layers {
		l, ls := &m.layers[i], &s.layers[i]
		if l.kind == checkpoint.Attention {
			do(s.attentionChunk(cb, l, ls, ch))
		} else {
			do(s.deltaNetChunk(cb, l, ls, n))
		}
		cb.Barrier()
		do(k.AddRMSNormRows(cb, ca.x, ca.delta, ca.xn, l.postNorm, h, n, c.RMSNormEps))
		cb.Barrier()
		do(s.moeChunk(cb, l, n))
		cb.Barrier()
		next := m.finalNorm
		if i+1 < len(m.layers) {
			next = m.layers[i+1].inNorm
		}
		do(k.AddRMSNormRows(cb, ca.x, ca.delta, ca.xn, next, h, n, c.RMSNormEps))
		cb.Barrier()
	}
	switch ch.logits {
	case lastLogits:
		do(k.QMV(cb, s.act.logits, m.lmHead, row(ca.xn, n-1, h)))
		if ch.next != nil {
			cb.Barrier()
			do(s.pick(cb, *ch.next))
		}
	case allLogits:
		do(k.QMM(cb, ca.all, m.lmHead, ca.xn, n))
	}
	return errors.Join(errs...)
}

func (s *Sequence) attentionChunk(cb gpu.CommandBuffer, l *layer, ls *layerState, ch chunk) error {
	k, ca, a := s.m.k, &s.chunk, s.m.attn
	n := ch.n
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(k.QMM(cb, ca.qg, l.q, ca.xn, n))
	do(k.QMM(cb, ca.k, l.kp, ca.xn, n))
	do(k.QMM(cb, ca.v, l.v, ca.xn, n))
	cb.Barrier()
	do(k.AttnPrepRows(cb, shaders.AttnPrepIO{
		Q: ca.q, Gate: ca.gate, QG: ca.qg, K: ca.k, V: ca.v, KCache: ls.kCache, VCache: ls.vCache,
		QNorm: l.qNorm, KNorm: l.kNorm, Shape: a, Pos: ch.pos,
	}, n))
	cb.Barrier()
	do(k.AttnPrefill(cb, shaders.AttnPrefillIO{
		AttnIO: shaders.AttnIO{O: ca.o, Q: ca.q, Gate: ca.gate, KCache: ls.kCache, VCache: ls.vCache, Shape: a},
		Pos0:   ch.pos, Tokens: n,
	}))
	cb.Barrier()
	do(k.QMM(cb, ca.delta, l.o, ca.o, n))
	return errors.Join(errs...)
}

func (s *Sequence) deltaNetChunk(cb gpu.CommandBuffer, l *layer, ls *layerState, n int) error {
	k, ca, d := s.m.k, &s.chunk, s.m.delta
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(k.QMM(cb, ca.u, l.qkv, ca.xn, n))
	do(k.QMM(cb, ca.z, l.z, ca.xn, n))
	do(k.QMM(cb, ca.b, l.b, ca.xn, n))
	do(k.QMM(cb, ca.a, l.a, ca.xn, n))
	cb.Barrier()
	do(k.DeltaConvRows(cb, ca.conv, ca.u, ls.conv, l.conv, d.Channels(), d.ConvKernel, n))
	cb.Barrier()
	do(k.DeltaScan(cb, shaders.DeltaScanIO{
		DeltaStepIO: shaders.DeltaStepIO{
			O: ca.dOut, QKV: ca.conv, Z: ca.z, B: ca.b, A: ca.a,
			State: ls.state, NegA: l.negA, DtBias: l.dtBias, Norm: l.gnNorm, Shape: d,
		},
		Scratch: ca.dScratch, Tokens: n,
	}))
	cb.Barrier()
	do(k.QMM(cb, ca.delta, l.out, ca.dOut, n))
	return errors.Join(errs...)
}

// moeChunk writes the MoE block's output for the chunk's normalised rows
// into delta. The routing is a counting sort on the GPU whose block map
// has a capacity fixed by the shape, so nothing is read back.
func (s *Sequence) moeChunk(cb gpu.CommandBuffer, l *layer, n int) error {
	k, ca, c := s.m.k, &s.chunk, s.m.cfg
	e, topK, pairs := c.Experts, c.TopK, n*c.TopK
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	do(k.QMM(cb, ca.router, l.router, ca.xn, n))
	do(k.QMM(cb, ca.shGate, l.shExpertGate, ca.xn, n))
	do(k.QMM(cb, ca.shG, l.shGate, ca.xn, n))
	do(k.QMM(cb, ca.shU, l.shUp, ca.xn, n))
	cb.Barrier()
	do(k.RouterTopKRows(cb, ca.ids, ca.weights, ca.router, e, topK, c.NormTopK, n))
	do(k.SwiGLU(cb, ca.shH, ca.shG, ca.shU, n*c.SharedIntermediate))
	cb.Barrier()
	do(k.MoERoute(cb, ca.mapping, ca.slotOf, ca.blocks, ca.ids, pairs, e))
	do(k.QMM(cb, ca.shOut, l.shDown, ca.shH, n))
	cb.Barrier()
	do(k.QMMExperts(cb, ca.eg, l.gate, ca.xn, n, topK, ca.blocks, ca.mapping, pairs, e))
	do(k.QMMExperts(cb, ca.eu, l.up, ca.xn, n, topK, ca.blocks, ca.mapping, pairs, e))
	cb.Barrier()
	do(k.SwiGLU(cb, ca.eh, ca.eg, ca.eu, pairs*c.ExpertIntermediate))
	cb.Barrier()
	do(k.QMMExperts(cb, ca.ys, l.down, ca.eh, pairs, 0, ca.blocks, ca.mapping, pairs, e))
	cb.Barrier()
	do(k.MoECombineRows(cb, ca.delta, ca.ys, ca.weights, ca.slotOf, ca.shOut, ca.shGate, c.Hidden, topK, n))
	return errors.Join(errs...)
}

// prefill runs the n tokens in slots from slot through the model in
// chunks, at positions from s.pos; the caches must hold them. Chunks are
// committed back to back, each waited for only after the next is
// committed (the GPU runs them in order), except with allLogits, where
// each chunk's logits are copied into out before the buffer is reused.
// With lastLogits the final chunk computes the last position's logits
// (and writes their argmax to next, if set). It returns the final chunk's
// command buffer, committed and not yet waited for, and its token count.
func (s *Sequence) prefill(slot, n int, mode logitsMode, out []float32, next *shaders.View) (gpu.CommandBuffer, int, error) {
	size := min(n, s.m.prefillChunk)
	if err := s.ensureChunk(size, mode == allLogits); err != nil {
		return nil, 0, err
	}
	dev, v := s.m.k.Device(), s.m.cfg.Vocab
	var pending gpu.CommandBuffer
	pendingSteps := 0
	base := s.pos // s.pos advances as chunks complete
	for i := 0; i < n; i += size {
		cnt := min(size, n-i)
		ch := chunk{pos: base + i, slot: slot + i, n: cnt}
		if mode == allLogits {
			ch.logits = allLogits
		} else if i+cnt == n {
			ch.logits, ch.next = mode, next
		}
		cb, err := dev.NewCommandBuffer()
		if err != nil {
			return s.drain(pending, pendingSteps, err)
		}
		if err := s.encodeChunk(cb, ch); err != nil {
			return s.drain(pending, pendingSteps, err)
		}
		if err := cb.Commit(); err != nil {
			return s.drain(pending, pendingSteps, err)
		}
		if pending != nil {
			if err := s.wait(pending, pendingSteps); err != nil {
				return s.drain(cb, cnt, err)
			}
		}
		pending, pendingSteps = cb, cnt
		if mode == allLogits {
			if err := s.wait(pending, pendingSteps); err != nil {
				return nil, 0, err
			}
			readFloats(out[i*v:(i+cnt)*v], s.chunk.all.Buf.Contents()[s.chunk.all.Off:])
			pending, pendingSteps = nil, 0
		}
	}
	return pending, pendingSteps, nil
}

// drain waits for a committed command buffer before returning err, so no
// work of the sequence is left running.
func (s *Sequence) drain(pending gpu.CommandBuffer, steps int, err error) (gpu.CommandBuffer, int, error) {
	if pending != nil {
		s.wait(pending, steps)
	}
	return nil, 0, err
}

// forwardChunks is Forward for the n tokens in the slots from 0, through
// the chunked prefill: logits for every position when all, else the last
// position's when out has room for them.
func (s *Sequence) forwardChunks(n int, all bool, out []float32) error {
	defer s.releaseChunk()
	mode := noLogits
	switch {
	case all:
		mode = allLogits
	case len(out) > 0:
		mode = lastLogits
	}
	cb, steps, err := s.prefill(0, n, mode, out, nil)
	if err != nil {
		return err
	}
	if cb != nil {
		if err := s.wait(cb, steps); err != nil {
			return err
		}
	}
	if mode == lastLogits {
		readFloats(out, s.act.logitsBuf.Contents())
	}
	return nil
}
