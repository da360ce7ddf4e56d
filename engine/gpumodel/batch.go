package gpumodel

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"petal/engine"
	"petal/gpu"
	"petal/shaders"
)

// batchActs are the activations of a batched step: the model's, since the
// rows' sequences are many and a step holds them all; Step holds mu while
// it uses them. They grow to the largest pass so far and are kept, so a
// decode loop's steps allocate nothing.
type batchActs struct {
	mu sync.Mutex
	ca chunkActs
	// scanTokens is the DeltaNet scan scratch ca holds, in tokens of
	// whole shaders.DeltaChunk blocks.
	scanTokens int
	caBufs     []gpu.Buffer
	tokens     gpu.Buffer // u32 token ids of a pass, in its rows' order (one of caBufs)
	logits     gpu.Buffer // [rows][vocab]: the logits a pass computes
}

func (b *batchActs) release() {
	b.releaseActs()
	if b.logits != nil {
		b.logits.Release()
		b.logits = nil
	}
}

// releaseActs frees the activations and token ids, not the logits.
func (b *batchActs) releaseActs() {
	for _, x := range b.caBufs {
		x.Release()
	}
	b.ca, b.scanTokens, b.caBufs, b.tokens = chunkActs{}, 0, nil, nil
}

// segment is one row's tokens within a pass: a decode step (one token) or
// a run of them (a prompt piece, draft tokens), at activation rows
// row.. row+len(tokens)-1.
type segment struct {
	s      *Sequence
	tokens []int
	pos    int // the position of its first token
	row    int
	// out receives its logits: none, the last token's (vocab) or every
	// token's (all), from logits row logit on.
	out   []float32
	all   bool
	logit int
}

func (sg *segment) n() int { return len(sg.tokens) }

// pass is one run through the layers over the tokens of its segments:
// the single-token segments first, then the runs (see layout).
type pass struct {
	segs []segment
	// tokens is the pass's token count; decode the single-token segments
	// (rows 0..decode-1); logitRows the logits rows it writes.
	tokens, decode, logitRows int
	// decodeLogits says whether the lm_head product covers rows
	// 0..decode-1 (some decode segment wants logits).
	decodeLogits bool
	// scanTokens is the DeltaNet scan scratch of the runs, in tokens of
	// whole blocks: each run takes its own.
	scanTokens int
	// vec says the pass is decode rows alone, at most
	// shaders.QMVRowsMaxTokens, whose products run as multi-row
	// matrix-vector products (shaders.QMVRows) and whose MoE blocks route
	// each row's experts directly (moeRows), instead of the GEMMs.
	vec bool
}

// Step runs rows as one step (engine.Stepper): every weight is read once
// for the pass's tokens (the products as token-tiled GEMMs, the MoE as a
// grouped GEMM over the GPU's routing of every row's tokens), while each
// row's attention and DeltaNet run over its own sequence's caches and
// state: a decode row through the decode kernels, a run of tokens through
// the prefill's. Rows of more than the prefill chunk's tokens in all take
// several passes, a row's tokens carried on in the next. One row is that
// sequence's Forward, whose kernels suit one sequence best. Up to
// shaders.QMVRowsMaxTokens rows of one token each run as a pass of the
// multi-row matrix-vector products (decodePath says why).
func (m *Model) Step(rows []engine.Row) error {
	return m.step(rows, viaAuto)
}

// step is Step with decode rows run as via says (the benchmark compares
// the ways).
func (m *Model) step(rows []engine.Row, via stepVia) error {
	v := m.cfg.Vocab
	if err := engine.CheckRows(rows, v); err != nil {
		return err
	}
	seqs := make([]*Sequence, len(rows))
	for i, r := range rows {
		s, ok := r.Seq.(*Sequence)
		if !ok || s.m != m {
			return fmt.Errorf("%w: row %d's sequence is not this model's", engine.ErrStepRows, i)
		}
		if s.closed {
			return fmt.Errorf("gpumodel: row %d: %w", i, engine.ErrClosed)
		}
		seqs[i] = s
	}
	if rest, err := stepImageRows(rows, seqs); err != nil || len(rest) < len(rows) {
		if err != nil || len(rest) == 0 {
			return err
		}
		return m.step(rest, via)
	}
	if len(rows) == 1 {
		return rows[0].Seq.Forward(rows[0].Tokens, rows[0].Out)
	}
	for i, s := range seqs {
		if err := s.ensureCapacity(s.pos + len(rows[i].Tokens)); err != nil {
			return fmt.Errorf("gpumodel: row %d: %w", i, err)
		}
	}
	path := decodePath(rows, via)
	if path == viaSideBySide {
		return m.stepDecodeRows(rows, seqs)
	}
	passes, err := m.passes(rows, seqs, path == viaRows)
	if err != nil {
		return err
	}
	b := &m.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range passes {
		if err := m.runPass(&passes[i]); err != nil {
			return err
		}
	}
	return nil
}

// passes cuts rows into passes of at most the prefill chunk's tokens, in
// order, a row that does not fit whole continuing in the next pass (so a
// sequence appears at most once in a pass, and its pieces run in order).
// With vec a pass of decode rows alone runs the multi-row products.
func (m *Model) passes(rows []engine.Row, seqs []*Sequence, vec bool) ([]pass, error) {
	v, limit := m.cfg.Vocab, m.prefillChunk
	var passes []pass
	var cur pass
	for i, r := range rows {
		all, err := engine.CheckOut(r.Out, len(r.Tokens), v)
		if err != nil {
			return nil, err
		}
		for off := 0; off < len(r.Tokens); {
			if cur.tokens == limit {
				passes = append(passes, cur)
				cur = pass{}
			}
			k := min(len(r.Tokens)-off, limit-cur.tokens)
			sg := segment{s: seqs[i], tokens: r.Tokens[off : off+k], pos: seqs[i].pos + off}
			switch {
			case all:
				sg.out, sg.all = r.Out[off*v:(off+k)*v], true
			case len(r.Out) > 0 && off+k == len(r.Tokens):
				sg.out = r.Out
			}
			cur.segs = append(cur.segs, sg)
			cur.tokens += k
			off += k
		}
	}
	passes = append(passes, cur)
	for i := range passes {
		p := &passes[i]
		p.layout()
		p.vec = vec && p.decode == len(p.segs) && p.tokens <= shaders.QMVRowsMaxTokens
	}
	return passes, nil
}

// layout places the single-token segments first, so that their rows are
// contiguous for the lm_head product and lie before every run: a run's
// attention (shaders.AttnPrefill) overwrites rows of o past its end up to
// a whole block of shaders.AttnPrefillTokens, which only the runs after
// it own, and those are attended after it (encodeBatch's barriers).
func (p *pass) layout() {
	slices.SortStableFunc(p.segs, func(a, b segment) int {
		return min(a.n(), 2) - min(b.n(), 2)
	})
	row := 0
	for i := range p.segs {
		sg := &p.segs[i]
		sg.row = row
		row += sg.n()
		if sg.n() == 1 {
			p.decode++
			p.decodeLogits = p.decodeLogits || len(sg.out) > 0
		} else {
			p.scanTokens += (sg.n() + shaders.DeltaChunk - 1) / shaders.DeltaChunk * shaders.DeltaChunk
		}
	}
	if p.decodeLogits {
		p.logitRows = p.decode
	}
	for i := range p.segs {
		sg := &p.segs[i]
		switch {
		case sg.n() == 1:
			sg.logit = sg.row
		case sg.all:
			sg.logit = p.logitRows
			p.logitRows += sg.n()
		case len(sg.out) > 0:
			sg.logit = p.logitRows
			p.logitRows++
		}
	}
}

// batchRows is the activation rows a pass of n tokens needs: its last run
// may write o, and read q, up to a whole block of AttnPrefillTokens past
// its end. A power of two, so passes of similar sizes share them.
func batchRows(n int) int {
	r := shaders.AttnPrefillTokens
	for r < n+shaders.AttnPrefillTokens-1 {
		r *= 2
	}
	return r
}

// ensureBatch grows the batch activations for p; no command buffer using
// them may be in flight.
func (m *Model) ensureBatch(p *pass) error {
	b := &m.batch
	dev := m.k.Device()
	alloc := func(n int) (shaders.View, error) {
		buf, err := dev.NewBuffer(max(n, 16))
		if err != nil {
			return shaders.View{}, err
		}
		b.caBufs = append(b.caBufs, buf)
		return shaders.View{Buf: buf}, nil
	}
	if rows := batchRows(p.tokens); rows > b.ca.cap || p.scanTokens > b.scanTokens {
		rows = max(rows, b.ca.cap)
		scan := max(p.scanTokens, b.scanTokens, shaders.DeltaChunk)
		b.releaseActs()
		ids, err := alloc(4 * rows)
		if err == nil {
			err = m.allocChunk(&b.ca, rows, scan, alloc)
		}
		if err != nil {
			b.releaseActs() // no half-made activations stay
			return err
		}
		b.tokens, b.scanTokens = ids.Buf, scan
	}
	need := 4 * p.logitRows * m.cfg.Vocab
	if need > 0 && (b.logits == nil || b.logits.Len() < need) {
		if b.logits != nil {
			b.logits.Release()
		}
		var err error
		if b.logits, err = dev.NewBuffer(need); err != nil {
			return err
		}
	}
	return nil
}

// commitAll commits each command buffer encode hands to done as it is
// encoded, then waits for every committed one and recycles it, so no work
// is left running. It returns encode's error (or a failed commit's) and
// the first Wait's apart, for the caller to say what failed.
func commitAll(encode func(done func(gpu.CommandBuffer, Cost) error) error) (err, waitErr error) {
	var cbs []gpu.CommandBuffer
	err = encode(func(cb gpu.CommandBuffer, _ Cost) error {
		if err := cb.Commit(); err != nil {
			gpu.Recycle(cb)
			return err
		}
		cbs = append(cbs, cb)
		return nil
	})
	for _, cb := range cbs {
		werr := cb.Wait()
		gpu.Recycle(cb)
		if werr != nil && waitErr == nil {
			waitErr = werr
		}
	}
	return err, waitErr
}

// runPass runs p: its command buffers committed as they are encoded and
// all waited for, then every segment's sequence advanced and its logits
// copied out.
func (m *Model) runPass(p *pass) error {
	if err := m.ensureBatch(p); err != nil {
		return err
	}
	ids := m.batch.tokens.Contents()
	for _, sg := range p.segs {
		for j, t := range sg.tokens {
			binary.LittleEndian.PutUint32(ids[4*(sg.row+j):], uint32(t))
		}
	}
	err, werr := commitAll(func(done func(gpu.CommandBuffer, Cost) error) error {
		return m.encodeBatch(p, done)
	})
	if err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("gpumodel: a batched step of %d tokens: %w", p.tokens, werr)
	}
	v := m.cfg.Vocab
	for _, sg := range p.segs {
		sg.s.pos += sg.n()
		if len(sg.out) > 0 {
			readFloats(sg.out, m.batch.logits.Contents()[4*sg.logit*v:])
		}
	}
	return nil
}

// batchPiece is one piece of a pass (see pieceKind); an attention piece
// attends segment seg's rows t0..t1-1 (relative to it), or with seg
// decodeSegs the decode segments t0..t1-1.
type batchPiece struct {
	kind   pieceKind
	layer  int
	seg    int
	t0, t1 int
}

// decodeSegs is batchPiece.seg for the decode segments' attention.
const decodeSegs = -1

// splitBatch groups p's pieces into command buffers as splitChunk does
// (splitPieces): the decode segments' attention, and each run's, in
// pieces as long as fits alone.
func (m *Model) splitBatch(p *pass) ([]cmdBuffer[batchPiece], error) {
	cost := func(bp batchPiece) Cost { return m.batchPieceCost(p, bp) }
	mk := func(kind pieceKind, layer int) batchPiece { return batchPiece{kind: kind, layer: layer} }
	attn := func(add func(batchPiece), layer, g int) {
		// The decode steps' attention in runs of them that fit alone.
		decode := func(t0, t1 int) batchPiece {
			return batchPiece{kind: pieceAttn, layer: layer, seg: decodeSegs, t0: t0, t1: t1}
		}
		addBlocks(m, p.decode, 1, decode, cost, add)
		for j := p.decode; j < len(p.segs); j++ {
			run := func(t0, t1 int) batchPiece {
				return batchPiece{kind: pieceAttn, layer: layer, seg: j, t0: t0, t1: t1}
			}
			addBlocks(m, p.segs[j].n(), g, run, cost, add)
		}
	}
	return splitPieces(m, cost, mk, attn, p.logitRows > 0)
}

func (m *Model) batchPieceCost(p *pass, bp batchPiece) Cost {
	e := enc{k: m.k}
	m.encodeBatchPiece(&e, p, bp)
	return e.cost
}

// encodeBatch encodes p's command buffers and hands each, with its cost,
// to done as soon as it is encoded. Attention pieces share a level but
// where one run's follows another's: the later one's rows must be written
// after the earlier one's overrun (layout).
func (m *Model) encodeBatch(p *pass, done func(gpu.CommandBuffer, Cost) error) error {
	bufs, err := m.splitBatch(p)
	if err != nil {
		return err
	}
	shareLevel := func(a, b batchPiece) bool { return m.attnShareLevel(p, a, b) }
	encode := func(e *enc, bp batchPiece) { m.encodeBatchPiece(e, p, bp) }
	return encodeBuffers(m, bufs, shareLevel, encode, done)
}

// attnShareLevel says whether attention piece b may run beside a, the
// piece before it: pieces of one segment, or of two where either is a
// decode step, touch disjoint rows.
func (m *Model) attnShareLevel(p *pass, a, b batchPiece) bool {
	if a.kind != pieceAttn || b.kind != pieceAttn {
		return false
	}
	return a.seg == b.seg || a.seg == decodeSegs || b.seg == decodeSegs
}

// encodeBatchPiece encodes piece bp of p over the batch activations.
func (m *Model) encodeBatchPiece(e *enc, p *pass, bp batchPiece) {
	ca, c := &m.batch.ca, m.cfg
	h, n := c.Hidden, p.tokens
	switch bp.kind {
	case pieceEmbed:
		e.embedRows(ca.x, m.embed, shaders.View{Buf: m.batch.tokens}, n)
		e.barrier()
		e.rmsNorm(ca.xn, ca.x, m.layers[0].inNorm, h, n, c.RMSNormEps)
	case pieceDelta:
		m.batchDeltaNet(e, p, bp.layer)
		m.layerEnd(e, ca, bp.layer, n, p.vec)
	case pieceAttnIn:
		m.batchAttentionIn(e, p, bp.layer)
	case pieceAttn:
		if bp.seg == decodeSegs {
			m.batchAttentionDecode(e, p, bp)
		} else {
			m.batchAttention(e, &p.segs[bp.seg], bp)
		}
	case pieceAttnOut:
		p.product(e, ca.delta, m.layers[bp.layer].o, ca.o, n)
		m.layerEnd(e, ca, bp.layer, n, p.vec)
	case pieceLogits:
		logits := shaders.View{Buf: m.batch.logits}
		v := c.Vocab
		if p.decodeLogits {
			p.product(e, logits, m.lmHead, ca.xn, p.decode)
		}
		for _, sg := range p.segs[p.decode:] {
			switch {
			case sg.all:
				e.qmm(row(logits, sg.logit, v), m.lmHead, row(ca.xn, sg.row, h), sg.n())
			case len(sg.out) > 0:
				e.qmv(row(logits, sg.logit, v), m.lmHead, row(ca.xn, sg.row+sg.n()-1, h))
			}
		}
	}
}

// batchAttentionIn is the q, k and v products over the pass and each
// segment's prep (norms, rotary, its cache rows) at its positions.
func (m *Model) batchAttentionIn(e *enc, p *pass, i int) {
	ca, l, a := &m.batch.ca, &m.layers[i], m.attn
	hd, kvd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	p.product(e, ca.qg, l.q, ca.xn, p.tokens)
	p.product(e, ca.k, l.kp, ca.xn, p.tokens)
	p.product(e, ca.v, l.v, ca.xn, p.tokens)
	e.barrier()
	for _, sg := range p.segs {
		ls := &sg.s.layers[i]
		e.attnPrep(shaders.AttnPrepIO{
			Q: row(ca.q, sg.row, hd), Gate: row(ca.gate, sg.row, hd), QG: row(ca.qg, sg.row, 2*hd),
			K: row(ca.k, sg.row, kvd), V: row(ca.v, sg.row, kvd), KCache: ls.kCache, VCache: ls.vCache,
			QNorm: l.qNorm, KNorm: l.kNorm, Shape: a, Pos: sg.pos,
		}, sg.n())
	}
}

// batchAttentionDecode attends decode segments bp.t0..bp.t1-1 (rows
// t0..t1-1), each over its sequence's cache through the decode kernel and
// its sequence's scratch.
func (m *Model) batchAttentionDecode(e *enc, p *pass, bp batchPiece) {
	ca, a := &m.batch.ca, m.attn
	hd := a.Heads * a.HeadDim
	ios := make([]shaders.AttnDecodeIO, 0, bp.t1-bp.t0)
	for _, sg := range p.segs[bp.t0:bp.t1] {
		ls := &sg.s.layers[bp.layer]
		ios = append(ios, shaders.AttnDecodeIO{
			AttnIO: shaders.AttnIO{
				O: row(ca.o, sg.row, hd), Q: row(ca.q, sg.row, hd), Gate: row(ca.gate, sg.row, hd),
				KCache: ls.kCache, VCache: ls.vCache, Shape: a,
			},
			Scratch: sg.s.act.attnScratch, N: sg.pos + 1,
		})
	}
	e.attnDecodeRows(ios)
}

// batchAttention attends run sg's query rows bp.t0..bp.t1-1 over its
// sequence's cache through the prefill's kernel.
func (m *Model) batchAttention(e *enc, sg *segment, bp batchPiece) {
	ca, a := &m.batch.ca, m.attn
	hd := a.Heads * a.HeadDim
	ls := &sg.s.layers[bp.layer]
	g, err := m.attnGroupTokens()
	e.check(err)
	e.attnPrefill(shaders.AttnPrefillIO{
		AttnIO: shaders.AttnIO{
			O: row(ca.o, sg.row+bp.t0, hd), Q: row(ca.q, sg.row+bp.t0, hd), Gate: row(ca.gate, sg.row+bp.t0, hd),
			KCache: ls.kCache, VCache: ls.vCache, Shape: a,
		},
		Pos0: sg.pos + bp.t0, Tokens: bp.t1 - bp.t0,
	}, g)
}

// batchDeltaNet is a DeltaNet layer over the pass: its products over
// every row, then each segment's conv and recurrence over its sequence's
// state (a decode step's fused step and conv, then the shift of its
// input into the conv window; a run's conv rows, then its chunked scan in
// its own share of the scratch), and the output product.
func (m *Model) batchDeltaNet(e *enc, p *pass, i int) {
	ca, l, d := &m.batch.ca, &m.layers[i], m.delta
	n := p.tokens
	ch, vd, vh := d.Channels(), d.ValueHeads*d.ValueDim, d.ValueHeads
	p.product(e, ca.u, l.qkv, ca.xn, n)
	p.product(e, ca.z, l.z, ca.xn, n)
	p.product(e, ca.b, l.b, ca.xn, n)
	p.product(e, ca.a, l.a, ca.xn, n)
	e.barrier()
	stepIO := func(sg *segment, qkv shaders.View) shaders.DeltaStepIO {
		ls := &sg.s.layers[i]
		return shaders.DeltaStepIO{
			O: row(ca.dOut, sg.row, vd), QKV: row(qkv, sg.row, ch), Z: row(ca.z, sg.row, vd),
			B: row(ca.b, sg.row, vh), A: row(ca.a, sg.row, vh),
			State: ls.state, NegA: l.negA, DtBias: l.dtBias, Norm: l.gnNorm, Shape: d,
		}
	}
	for j := range p.segs {
		sg := &p.segs[j]
		ls := &sg.s.layers[i]
		if sg.n() == 1 {
			e.deltaStepConv(shaders.DeltaStepConvIO{DeltaStepIO: stepIO(sg, ca.u), ConvState: ls.conv, ConvW: l.conv})
		} else {
			e.deltaConvRows(row(ca.conv, sg.row, ch), row(ca.u, sg.row, ch), ls.conv, l.conv, ch, d.ConvKernel, sg.n())
		}
	}
	e.barrier()
	if p.vec {
		// Decode rows alone: the shifts and the output product read
		// apart from each other what the steps wrote, so they share a
		// level.
		for j := range p.segs {
			sg := &p.segs[j]
			e.deltaConvShift(row(ca.u, sg.row, ch), sg.s.layers[i].conv, ch, d.ConvKernel)
		}
		e.qmvRows(ca.delta, l.out, ca.dOut, n)
		return
	}
	scratch := 0
	for j := range p.segs {
		sg := &p.segs[j]
		if sg.n() == 1 {
			// The step read the conv window; only now may its token
			// shift in.
			e.deltaConvShift(row(ca.u, sg.row, ch), sg.s.layers[i].conv, ch, d.ConvKernel)
			continue
		}
		e.deltaScan(shaders.DeltaScanIO{DeltaStepIO: stepIO(sg, ca.conv), Scratch: ca.dScratch.At(4 * scratch), Tokens: sg.n()})
		scratch += shaders.DeltaScanScratch(d, sg.n())
	}
	e.barrier()
	e.qmm(ca.delta, l.out, ca.dOut, n)
}

// product writes out = m · x for the pass's first n activation rows: a
// multi-row matrix-vector product on a pass of decode rows alone (vec),
// else a token-tiled GEMM.
func (p *pass) product(e *enc, out shaders.View, m shaders.QMatrix, x shaders.View, n int) {
	if p.vec {
		e.qmvRows(out, m, x, n)
	} else {
		e.qmm(out, m, x, n)
	}
}

var _ engine.Stepper = (*Model)(nil)
