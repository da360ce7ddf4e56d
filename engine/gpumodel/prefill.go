package gpumodel

import (
	"errors"
	"fmt"

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
		if err := s.m.allocChunk(ca, n, n, s.alloc); err != nil {
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

// allocChunk allocates into ca the activations of runs of up to n
// tokens, the DeltaNet scan's scratch for scanTokens tokens (a batched
// step's segments each take whole blocks of it), through alloc.
func (m *Model) allocChunk(ca *chunkActs, n, scanTokens int, alloc func(bytes int) (shaders.View, error)) error {
	*ca = chunkActs{cap: n}
	c, d := m.cfg, m.delta
	var errs []error
	a := func(floats int) shaders.View {
		v, err := alloc(4 * n * floats)
		errs = append(errs, err)
		return v
	}
	h, nh, kvh, hd := c.Hidden, c.Heads, c.KVHeads, c.HeadDim
	ca.x, ca.xn, ca.delta = a(h), a(h), a(h)
	if m.hasAttention() {
		ca.qg, ca.k, ca.v = a(2*nh*hd), a(kvh*hd), a(kvh*hd)
		ca.q, ca.gate, ca.o = a(nh*hd), a(nh*hd), a(nh*hd)
	}
	if m.hasDeltaNet() {
		ch, vd := d.Channels(), d.ValueHeads*d.ValueDim
		ca.u, ca.conv, ca.z = a(ch), a(ch), a(vd)
		ca.b, ca.a, ca.dOut = a(d.ValueHeads), a(d.ValueHeads), a(vd)
		scratch, err := alloc(4 * shaders.DeltaScanScratch(d, scanTokens))
		errs = append(errs, err)
		ca.dScratch = scratch
	}
	k, ei := c.TopK, c.ExpertIntermediate
	ca.router, ca.ids, ca.weights = a(c.Experts), a(k), a(k)
	ca.mapping, ca.slotOf = a(k), a(k)
	blocks, err := alloc(16 * shaders.RouteCapacity(n*k, c.Experts))
	errs = append(errs, err)
	ca.blocks = blocks
	ca.eg, ca.eu, ca.eh, ca.ys = a(k*ei), a(k*ei), a(k*ei), a(k*h)
	si := c.SharedIntermediate
	ca.shG, ca.shU, ca.shH, ca.shOut, ca.shGate = a(si), a(si), a(si), a(h), a(1)
	return errors.Join(errs...)
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

// chunk describes one prefill chunk: n tokens read from token slots
// slot.. slot+n-1, at positions pos.. pos+n-1.
type chunk struct {
	pos, slot, n int
	logits       logitsMode
	next         *shaders.View // with lastLogits: where the argmax goes
}

// A chunk runs as pieces in order, as many to a command buffer as stay
// within the bound (Cost.M1Millis at most Model.maxMillis): whole layers
// while the context is short, and at long contexts each attention layer's
// attention cut into blocks of query rows. Cutting between layers and
// query rows keeps the chunk's length, so every weight is still read once
// per chunk (shorter chunks as the context grows would read them again for
// fewer tokens); the query blocks read the K/V rows AttnPrepRows wrote for
// the whole chunk, and write disjoint rows of o, so blocks in one command
// buffer need no barrier between them.
type pieceKind uint8

const (
	pieceEmbed   pieceKind = iota // the embedding and the first layer's norm
	pieceDelta                    // a DeltaNet layer with its MoE block
	pieceAttnIn                   // an attention layer's q, k, v products and their prep
	pieceAttn                     // the attention of the chunk's query rows t0..t1-1
	pieceAttnOut                  // an attention layer's output product and its MoE block
	pieceLogits                   // the logits the chunk asks for
)

type piece struct {
	kind   pieceKind
	layer  int
	t0, t1 int
}

// cmdBuffer is the pieces one command buffer holds and their cost.
type cmdBuffer[P any] struct {
	pieces []P
	cost   Cost
}

// fits says whether c stays within the model's command-buffer bound.
func (m *Model) fits(c Cost) bool { return c.M1Millis() <= m.maxMillis }

// splitPieces groups a pass's pieces into command buffers, in order, each
// holding as many as fit (a piece that alone does not fit goes alone;
// query blocks are sized so that none needs to): the embedding, each
// layer's (mk makes a piece of a kind and layer, attn adds an attention
// layer's query blocks, given its threadgroup's rows g), then the logits
// where logits.
func splitPieces[P any](m *Model, cost func(P) Cost, mk func(pieceKind, int) P, attn func(add func(P), layer, g int), logits bool) ([]cmdBuffer[P], error) {
	var bufs []cmdBuffer[P]
	var cur cmdBuffer[P]
	add := func(p P) {
		c := cost(p)
		if len(cur.pieces) > 0 && !m.fits(cur.cost.Plus(c)) {
			bufs = append(bufs, cur)
			cur = cmdBuffer[P]{}
		}
		cur.pieces = append(cur.pieces, p)
		cur.cost = cur.cost.Plus(c)
	}
	add(mk(pieceEmbed, 0))
	for i := range m.layers {
		if m.layers[i].kind != checkpoint.Attention {
			add(mk(pieceDelta, i))
			continue
		}
		add(mk(pieceAttnIn, i))
		g, err := m.attnGroupTokens()
		if err != nil {
			return nil, err
		}
		attn(add, i, g)
		add(mk(pieceAttnOut, i))
	}
	if logits {
		add(mk(pieceLogits, 0))
	}
	return append(bufs, cur), nil
}

// addBlocks adds the attention of rows 0..n-1 in blocks of whole runs of
// step rows (the last may be short), each as long as fits alone; block
// makes the piece of rows t0..t1-1.
func addBlocks[P any](m *Model, n, step int, block func(t0, t1 int) P, cost func(P) Cost, add func(P)) {
	for t0 := 0; t0 < n; {
		t1 := min(t0+step, n)
		for t1 < n && m.fits(cost(block(t0, min(t1+step, n)))) {
			t1 = min(t1+step, n)
		}
		add(block(t0, t1))
		t0 = t1
	}
}

// splitChunk groups ch's pieces into command buffers (splitPieces): each
// attention layer's query rows in blocks of whole threadgroups.
func (s *Sequence) splitChunk(ch chunk) ([]cmdBuffer[piece], error) {
	m := s.m
	cost := func(p piece) Cost { return s.pieceCost(ch, p) }
	mk := func(kind pieceKind, layer int) piece { return piece{kind: kind, layer: layer} }
	attn := func(add func(piece), layer, g int) {
		block := func(t0, t1 int) piece { return piece{kind: pieceAttn, layer: layer, t0: t0, t1: t1} }
		addBlocks(m, ch.n, g, block, cost, add)
	}
	return splitPieces(m, cost, mk, attn, ch.logits != noLogits)
}

// pieceCost is the cost of piece p of ch.
func (s *Sequence) pieceCost(ch chunk, p piece) Cost {
	e := enc{k: s.m.k}
	s.encodePiece(&e, ch, p)
	return e.cost
}

// encodeChunk encodes ch's command buffers and hands each, with its cost,
// to done as soon as it is encoded. The caches must hold pos+n positions.
func (s *Sequence) encodeChunk(ch chunk, done func(gpu.CommandBuffer, Cost) error) error {
	bufs, err := s.splitChunk(ch)
	if err != nil {
		return err
	}
	// Query blocks of one layer are independent.
	shareLevel := func(a, b piece) bool { return a.kind == pieceAttn && b.kind == pieceAttn }
	encode := func(e *enc, p piece) { s.encodePiece(e, ch, p) }
	return encodeBuffers(s.m, bufs, shareLevel, encode, done)
}

// encodeBuffers encodes each of bufs in a command buffer of its own and
// hands it, with its cost, to done as soon as it is encoded: a barrier
// before each piece but where shareLevel lets it run beside the piece
// before it.
func encodeBuffers[P any](m *Model, bufs []cmdBuffer[P], shareLevel func(a, b P) bool, encode func(*enc, P), done func(gpu.CommandBuffer, Cost) error) error {
	for _, b := range bufs {
		cb, err := m.k.Device().NewCommandBuffer()
		if err != nil {
			return err
		}
		e := enc{k: m.k, cb: cb}
		for i, p := range b.pieces {
			if i == 0 || !shareLevel(b.pieces[i-1], p) {
				e.barrier()
			}
			encode(&e, p)
		}
		if err := e.err(); err != nil {
			return err
		}
		if err := done(cb, e.cost); err != nil {
			return err
		}
	}
	return nil
}

// encodePiece encodes piece p of ch: every matrix product a token-tiled
// GEMM with the weights dequantized in threadgroup memory, the mixers over
// the whole chunk (attention over the chunk and the cache; the DeltaNet
// conv, then its chunked recurrence), the MoE as a grouped GEMM over a
// routing built on the GPU.
func (s *Sequence) encodePiece(e *enc, ch chunk, p piece) {
	m, ca := s.m, &s.chunk
	c := m.cfg
	h, n := c.Hidden, ch.n
	switch p.kind {
	case pieceEmbed:
		e.embedRows(ca.x, m.embed, s.slot(ch.slot), n)
		e.barrier()
		e.rmsNorm(ca.xn, ca.x, m.layers[0].inNorm, h, n, c.RMSNormEps)
	case pieceDelta:
		s.deltaNetChunk(e, &m.layers[p.layer], &s.layers[p.layer], n)
		m.layerEnd(e, ca, p.layer, n, false)
	case pieceAttnIn:
		s.attentionIn(e, &m.layers[p.layer], &s.layers[p.layer], ch)
	case pieceAttn:
		s.attentionRows(e, &s.layers[p.layer], ch, p.t0, p.t1)
	case pieceAttnOut:
		e.qmm(ca.delta, m.layers[p.layer].o, ca.o, n)
		m.layerEnd(e, ca, p.layer, n, false)
	case pieceLogits:
		switch ch.logits {
		case lastLogits:
			e.qmv(s.act.logits, m.lmHead, row(ca.xn, n-1, h))
			if ch.next != nil {
				e.barrier()
				s.pick(e, *ch.next)
			}
		case allLogits:
			e.qmm(ca.all, m.lmHead, ca.xn, n)
		}
	}
}

// layerEnd adds the mixer's output in ca.delta to the stream, runs the MoE
// block (moeRows for decode rows alone, where vec) and adds its output,
// leaving the next layer's (or the final) norm of the stream in xn.
func (m *Model) layerEnd(e *enc, ca *chunkActs, i, n int, vec bool) {
	c := m.cfg
	l, h := &m.layers[i], c.Hidden
	e.barrier()
	e.addRMSNormRows(ca.x, ca.delta, ca.xn, l.postNorm, h, n, c.RMSNormEps)
	e.barrier()
	if vec {
		m.moeRows(e, ca, l, n)
	} else {
		m.moeChunk(e, ca, l, n)
	}
	e.barrier()
	next := m.finalNorm
	if i+1 < len(m.layers) {
		next = m.layers[i+1].inNorm
	}
	e.addRMSNormRows(ca.x, ca.delta, ca.xn, next, h, n, c.RMSNormEps)
}

func (s *Sequence) attentionIn(e *enc, l *layer, ls *layerState, ch chunk) {
	ca, n := &s.chunk, ch.n
	e.qmm(ca.qg, l.q, ca.xn, n)
	e.qmm(ca.k, l.kp, ca.xn, n)
	e.qmm(ca.v, l.v, ca.xn, n)
	e.barrier()
	e.attnPrep(shaders.AttnPrepIO{
		Q: ca.q, Gate: ca.gate, QG: ca.qg, K: ca.k, V: ca.v, KCache: ls.kCache, VCache: ls.vCache,
		QNorm: l.qNorm, KNorm: l.kNorm, Shape: s.m.attn, Pos: ch.pos,
	}, n)
}

// attentionRows attends the chunk's query rows t0..t1-1 (t0 a multiple of
// shaders.AttnPrefillTokens, so that the rows the kernel writes past t1
// are its own block's).
func (s *Sequence) attentionRows(e *enc, ls *layerState, ch chunk, t0, t1 int) {
	ca, a := &s.chunk, s.m.attn
	hd := a.Heads * a.HeadDim
	g, err := s.m.attnGroupTokens()
	e.check(err)
	e.attnPrefill(shaders.AttnPrefillIO{
		AttnIO: shaders.AttnIO{
			O: row(ca.o, t0, hd), Q: row(ca.q, t0, hd), Gate: row(ca.gate, t0, hd),
			KCache: ls.kCache, VCache: ls.vCache, Shape: a,
		},
		Pos0: ch.pos + t0, Tokens: t1 - t0,
	}, g)
}

func (s *Sequence) deltaNetChunk(e *enc, l *layer, ls *layerState, n int) {
	ca, d := &s.chunk, s.m.delta
	e.qmm(ca.u, l.qkv, ca.xn, n)
	e.qmm(ca.z, l.z, ca.xn, n)
	e.qmm(ca.b, l.b, ca.xn, n)
	e.qmm(ca.a, l.a, ca.xn, n)
	e.barrier()
	e.deltaConvRows(ca.conv, ca.u, ls.conv, l.conv, d.Channels(), d.ConvKernel, n)
	e.barrier()
	e.deltaScan(shaders.DeltaScanIO{
		DeltaStepIO: shaders.DeltaStepIO{
			O: ca.dOut, QKV: ca.conv, Z: ca.z, B: ca.b, A: ca.a,
			State: ls.state, NegA: l.negA, DtBias: l.dtBias, Norm: l.gnNorm, Shape: d,
		},
		Scratch: ca.dScratch, Tokens: n,
	})
	e.barrier()
	e.qmm(ca.delta, l.out, ca.dOut, n)
}

// moeChunk writes the MoE block's output for the chunk's normalised rows
// into delta. The routing is a counting sort on the GPU whose block map
// has a capacity fixed by the shape, so nothing is read back.
func (m *Model) moeChunk(e *enc, ca *chunkActs, l *layer, n int) {
	c := m.cfg
	ex, topK, pairs := c.Experts, c.TopK, n*c.TopK
	e.qmm(ca.router, l.router, ca.xn, n)
	e.qmm(ca.shGate, l.shExpertGate, ca.xn, n)
	e.qmm(ca.shG, l.shGate, ca.xn, n)
	e.qmm(ca.shU, l.shUp, ca.xn, n)
	e.barrier()
	e.routerTopKRows(ca.ids, ca.weights, ca.router, ex, topK, c.NormTopK, n)
	e.swiGLU(ca.shH, ca.shG, ca.shU, n*c.SharedIntermediate)
	e.barrier()
	e.moeRoute(ca.mapping, ca.slotOf, ca.blocks, ca.ids, pairs, ex)
	e.qmm(ca.shOut, l.shDown, ca.shH, n)
	e.barrier()
	e.qmmExperts(ca.eg, l.gate, ca.xn, n, topK, ca.blocks, ca.mapping, pairs, ex)
	e.qmmExperts(ca.eu, l.up, ca.xn, n, topK, ca.blocks, ca.mapping, pairs, ex)
	e.barrier()
	e.swiGLU(ca.eh, ca.eg, ca.eu, pairs*c.ExpertIntermediate)
	e.barrier()
	e.qmmExperts(ca.ys, l.down, ca.eh, pairs, 0, ca.blocks, ca.mapping, pairs, ex)
	e.barrier()
	e.moeCombineRows(ca.delta, ca.ys, ca.weights, ca.slotOf, ca.shOut, ca.shGate, c.Hidden, topK, n)
}

// prefill runs the n tokens in slots from slot through the model in
// chunks, at positions from s.pos; the caches must hold them. A chunk's
// command buffers are committed as they are encoded, and waited for once
// the next chunk's are committed (the GPU runs them in order), except with
// allLogits, where each chunk's logits are copied into out before the
// buffer is reused. With lastLogits the final chunk computes the last
// position's logits (and writes their argmax to next, if set). It returns
// the final chunk's last command buffer, committed and not yet waited for,
// and its token count.
func (s *Sequence) prefill(slot, n int, mode logitsMode, out []float32, next *shaders.View) (gpu.CommandBuffer, int, error) {
	size := min(n, s.m.prefillChunk)
	if err := s.ensureChunk(size, mode == allLogits); err != nil {
		return nil, 0, err
	}
	v := s.m.cfg.Vocab
	var pending, current []gpu.CommandBuffer
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
		current = current[:0]
		err := s.encodeChunk(ch, func(cb gpu.CommandBuffer, _ Cost) error {
			if err := cb.Commit(); err != nil {
				return err
			}
			current = append(current, cb)
			return nil
		})
		if err != nil {
			s.drainChunk(pending, pendingSteps, nil)
			return nil, 0, s.drainChunk(current, 0, err)
		}
		if err := s.drainChunk(pending, pendingSteps, nil); err != nil {
			return nil, 0, s.drainChunk(current, 0, err)
		}
		pending, current, pendingSteps = current, pending, cnt
		if mode == allLogits {
			if err := s.drainChunk(pending, pendingSteps, nil); err != nil {
				return nil, 0, err
			}
			readFloats(out[i*v:(i+cnt)*v], s.chunk.all.Buf.Contents()[s.chunk.all.Off:])
			pending, pendingSteps = pending[:0], 0
		}
	}
	if len(pending) == 0 {
		return nil, 0, nil
	}
	// All but the last, whose errors would otherwise go unseen.
	last := len(pending) - 1
	if err := s.drainChunk(pending[:last], 0, nil); err != nil {
		return nil, 0, s.drainChunk(pending[last:], 0, err)
	}
	return pending[last], pendingSteps, nil
}

// drainChunk waits for a chunk's committed command buffers in order and
// advances the sequence by steps once all are done; it returns err or
// else the first error, having waited for every one, so no work of the
// sequence is left running. Each is recycled once waited for: the
// callers drop cbs after (its slots are overwritten, never read).
func (s *Sequence) drainChunk(cbs []gpu.CommandBuffer, steps int, err error) error {
	for _, cb := range cbs {
		werr := cb.Wait()
		gpu.Recycle(cb)
		if werr != nil && err == nil {
			err = fmt.Errorf("gpumodel: prefill from position %d: %w", s.pos, werr)
		}
	}
	if err == nil {
		s.pos += steps
	}
	return err
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
