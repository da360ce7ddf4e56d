package cpu

import (
	"fmt"

	"petal/engine"
	"petal/engine/checkpoint"
)

// mtpFlush bounds how many positions' hidden states a drafting sequence
// holds for its head between drafts: past it (a prompt's pieces, a reply
// decoded without drafts) the head runs over them in one pass, each of its
// weights read once for all of them.
const mtpFlush = 64

// mtpHead is the checkpoint's multi-token-prediction head on the CPU:
// h' = layer(fc([norm_e(embed(x_{t+1})) | norm_h(h_t)])), logits =
// lm_head(norm(h')), where h_t is the main model's final hidden state at
// position t (after its final norm, what the LM head reads: the hidden
// states vLLM's and SGLang's Qwen3-Next MTP take) and x_{t+1} the token
// after it. The layer is a gated full-attention MoE layer with its own KV
// cache, one entry per position the head has seen.
type mtpHead struct {
	normE, normH []float32
	fc           *matrix
	layer        layer
	norm         []float32
}

func newMTPHead(w *checkpoint.MTPWeights) *mtpHead {
	return &mtpHead{
		normE: vector(&w.PreNormEmbed), normH: vector(&w.PreNormHidden),
		fc: newMatrix(&w.FC), layer: newLayer(&w.Layer), norm: vector(&w.Norm),
	}
}

// draftState is a drafting sequence's share of the head: its KV cache (a
// one-layer Sequence whose position counts the entries, so its rotary
// positions count from where drafting began; attention depends only on
// their differences) and the positions the head has not yet seen: their
// final hidden states (rows of Hidden) and the tokens after each but the
// last, which are fed already.
type draftState struct {
	cache  *Sequence
	hidden []float32
	tokens []int
	// The head's activations, kept for the next call.
	in, x, xn, delta, row, e []float32
}

func (m *Model) newDraftState() *draftState {
	return &draftState{cache: &Sequence{m: m, layers: make([]layerState, 1)}}
}

// rows is how many positions wait for the head.
func (d *draftState) rows(h int) int { return len(d.hidden) / h }

// addHidden takes a pass's tokens and their residual stream after the
// last layer (x, rows of Hidden): the final norm of each waits for the
// head, and each token is the one after the position before it.
func (d *draftState) addHidden(m *Model, tokens []int, x []float32) {
	c := m.cfg
	h := c.Hidden
	if d.rows(h) > 0 {
		d.tokens = append(d.tokens, tokens...)
	} else {
		d.tokens = append(d.tokens, tokens[1:]...)
	}
	n := len(d.hidden)
	d.hidden = append(d.hidden, x...)
	rmsNormRows(d.hidden[n:], x, m.finalNorm, h, c.RMSNormEps)
}

// flushDrafts runs the head over the positions each drafting job's
// sequence holds past mtpFlush, keeping the last (its token is not yet
// picked) and those Rewind may take back.
func (m *Model) flushDrafts(sc *scratch, jobs []job) {
	h := m.cfg.Hidden
	for _, jb := range jobs {
		s := jb.s
		d := s.draft
		if d == nil || d.rows(h) <= mtpFlush {
			continue
		}
		n := d.rows(h) - 1 - s.rewindable
		m.mtp.run(m, sc, d, d.tokens[:n], d.hidden[:n*h], nil)
		d.tokens = append(d.tokens[:0], d.tokens[n:]...)
		d.hidden = append(d.hidden[:0], d.hidden[n*h:]...)
	}
}

// run appends positions to the head's cache, the hidden states hid
// (rows of Hidden) each with the token after it, and writes the head's
// logits for the token after the last into out when out is not nil.
func (p *mtpHead) run(m *Model, sc *scratch, d *draftState, tokens []int, hid []float32, out []float32) {
	c := m.cfg
	h := c.Hidden
	t := len(tokens)
	nt := tiledRows(t)
	in := take(&d.in, t*2*h)
	e := take(&d.e, h)
	for i, id := range tokens {
		m.embed.row(id, e)
		rmsNorm(in[i*2*h:i*2*h+h], e, p.normE, c.RMSNormEps)
		rmsNorm(in[i*2*h+h:(i+1)*2*h], hid[i*h:(i+1)*h], p.normH, c.RMSNormEps)
	}
	x := take(&d.x, t*h)
	p.fc.mulTiled(sc, 0, in, t, nt, x)
	xn, delta := take(&d.xn, t*h), take(&d.delta, t*h)
	segs := []seg{{s: d.cache, tokens: tokens, pos: d.cache.pos}}
	l := &p.layer
	rmsNormRows(xn, x, l.inNorm, h, c.RMSNormEps)
	m.attention(sc, l.attn, 0, segs, xn, t, nt, delta)
	add(x, delta)
	rmsNormRows(xn, x, l.postNorm, h, c.RMSNormEps)
	m.moe(sc, &l.moe, xn, t, nt, delta)
	add(x, delta)
	d.cache.pos += t
	if out == nil {
		return
	}
	row := take(&d.row, h)
	rmsNorm(row, x[(t-1)*h:], p.norm, c.RMSNormEps)
	m.lmHead.mul(sc, 0, row, 1, out)
}

var _ engine.Drafter = (*Sequence)(nil)

// SetDrafting turns the draft head on or off for the sequence (see
// engine.Drafter); false when the model has none.
func (s *Sequence) SetDrafting(on bool) bool {
	switch {
	case s.m.mtp == nil || !on:
		s.draft = nil
	case s.draft == nil:
		s.draft = s.m.newDraftState()
	}
	return s.draft != nil
}

// Draft runs the head over the positions it has not seen, the last with
// next after it, and writes its logits for the token after next.
func (s *Sequence) Draft(next int, out []float32) error {
	c := s.m.cfg
	switch {
	case s.layers == nil:
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	case s.draft == nil:
		return fmt.Errorf("cpu: draft on a sequence that is not drafting")
	case s.draft.rows(c.Hidden) == 0:
		return fmt.Errorf("cpu: draft before any token was fed")
	case len(out) != c.Vocab:
		return fmt.Errorf("cpu: draft logits buffer of %d floats, want %d", len(out), c.Vocab)
	}
	if err := engine.CheckTokens([]int{next}, c.Vocab); err != nil {
		return err
	}
	d := s.draft
	d.tokens = append(d.tokens, next)
	sc := s.m.acquire()
	defer s.m.release(sc)
	s.m.mtp.run(s.m, sc, d, d.tokens, d.hidden, out)
	d.tokens, d.hidden = d.tokens[:0], d.hidden[:0]
	s.rewindable = 0
	return nil
}

// draftBytes is what drafting holds beside the main caches: the DeltaNet
// states kept for Rewind (held from the first verify step on, reused by
// the next), the head's KV cache and the hidden states waiting for it.
// A sequence that never drafted holds none of them.
func (s *Sequence) draftBytes() int64 {
	var n int64
	for _, l := range s.layers {
		n += 4 * int64(cap(l.keptConv)+cap(l.keptState))
	}
	if d := s.draft; d != nil {
		n += d.cache.Bytes() + 4*int64(cap(d.hidden))
	}
	return n
}

// KeepForRewind makes the next Forward or Step keep the DeltaNet states
// after each of its tokens but the last.
func (s *Sequence) KeepForRewind() { s.keepNext = true }

// Rewind takes back the last n tokens of the last pass, which kept their
// states: the attention caches drop their rows, each DeltaNet layer takes
// the conv window and recurrent state it kept after the last token that
// stays, and the head forgets their hidden states. Keeping the states in
// the pass costs one write of them while they are in cache; a snapshot
// before the step would read and write them all again, and recomputing the
// accepted token would cost a whole step for every rejected draft.
func (s *Sequence) Rewind(n int) error {
	switch {
	case s.layers == nil:
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	case n < 0 || n > s.rewindable:
		return fmt.Errorf("cpu: rewind of %d tokens, %d can be taken back", n, s.rewindable)
	case n == 0:
		return nil
	}
	c := s.m.cfg
	kv := c.KVHeads * c.HeadDim
	j := s.rewindable - n // the kept states after the pass's token j
	for i := range s.layers {
		st := &s.layers[i]
		switch s.m.layers[i].kind {
		case checkpoint.Attention:
			st.k = st.k[:len(st.k)-n*kv]
			st.v = st.v[:len(st.v)-n*kv]
		case checkpoint.DeltaNet:
			copy(st.conv, st.keptConv[j*len(st.conv):(j+1)*len(st.conv)])
			copy(st.state, st.keptState[j*len(st.state):(j+1)*len(st.state)])
		}
	}
	s.pos -= n
	s.rewindable = 0
	if d := s.draft; d != nil {
		h := c.Hidden
		d.hidden = d.hidden[:len(d.hidden)-n*h]
		d.tokens = d.tokens[:len(d.tokens)-n]
	}
	return nil
}
