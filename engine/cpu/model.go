package cpu

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"petal/engine"
	"petal/engine/checkpoint"
)

// maxChunk bounds how many tokens one pass of Forward processes, which
// bounds the activations held at once during a long prefill.
const maxChunk = 256

// Model is a checkpoint prepared for the CPU backend.
type Model struct {
	ckpt      *checkpoint.Model
	cfg       *checkpoint.Config
	embed     *matrix
	lmHead    *matrix
	finalNorm []float32
	layers    []layer
	rope      rope
	halfKV    bool
	mtp       *mtpHead // the draft head; nil without one

	tower visionTower // widened on the first image

	mu   sync.Mutex
	idle []*scratch
}

// Options change how the CPU backend computes.
type Options struct {
	// HalfKV stores the attention KV cache rounded to half precision, as
	// the GPU backend does, so the two can be compared closely.
	HalfKV bool
}

type layer struct {
	kind     checkpoint.LayerKind
	inNorm   []float32
	postNorm []float32
	attn     *attention
	delta    *deltaNet
	moe      moe
}

type attention struct {
	q, k, v, o   *matrix
	qNorm, kNorm []float32
}

type deltaNet struct {
	qkv, z, b, a, out *matrix
	conv              []float32 // [channels][kernel]
	dtBias, negA      []float32 // negA = -exp(A_log)
	norm              []float32
}

type moe struct {
	router, gate, up, down       *matrix
	sharedGate, sharedUp, shDown *matrix
	sharedExpertGate             *matrix
}

// New prepares an opened checkpoint. The Model borrows ckpt's mappings:
// closing the Model closes the checkpoint.
func New(ckpt *checkpoint.Model) *Model {
	m := &Model{
		ckpt:      ckpt,
		cfg:       ckpt.Config,
		embed:     newMatrix(&ckpt.Embed),
		lmHead:    newMatrix(&ckpt.LMHead),
		finalNorm: vector(&ckpt.FinalNorm),
		layers:    make([]layer, len(ckpt.Layers)),
		rope:      newRope(ckpt.Config),
	}
	for i := range ckpt.Layers {
		m.layers[i] = newLayer(&ckpt.Layers[i])
	}
	if ckpt.MTP != nil {
		m.mtp = newMTPHead(ckpt.MTP)
	}
	return m
}

// newLayer prepares a decoder layer's weights.
func newLayer(src *checkpoint.Layer) layer {
	l := layer{kind: src.Kind, inNorm: vector(&src.InputNorm), postNorm: vector(&src.PostNorm)}
	if a := src.Attn; a != nil {
		l.attn = &attention{
			q: newMatrix(&a.Q), k: newMatrix(&a.K), v: newMatrix(&a.V), o: newMatrix(&a.O),
			qNorm: vector(&a.QNorm), kNorm: vector(&a.KNorm),
		}
	}
	if d := src.Delta; d != nil {
		aLog := vector(&d.ALog)
		negA := make([]float32, len(aLog))
		for j, v := range aLog {
			negA[j] = -float32(math.Exp(float64(v)))
		}
		l.delta = &deltaNet{
			qkv: newMatrix(&d.QKV), z: newMatrix(&d.Z), b: newMatrix(&d.B), a: newMatrix(&d.A), out: newMatrix(&d.Out),
			conv: vector(&d.Conv), dtBias: vector(&d.DtBias), negA: negA, norm: vector(&d.Norm),
		}
	}
	e := &src.MoE
	l.moe = moe{
		router: newMatrix(&e.Router), gate: newMatrix(&e.Gate), up: newMatrix(&e.Up), down: newMatrix(&e.Down),
		sharedGate: newMatrix(&e.SharedGate), sharedUp: newMatrix(&e.SharedUp), shDown: newMatrix(&e.SharedDown),
		sharedExpertGate: newMatrix(&e.SharedExpertGate),
	}
	return l
}

// Open opens the checkpoint in dir for the CPU backend.
func Open(dir string) (*Model, error) { return OpenWith(dir, Options{}) }

// OpenWith opens the checkpoint in dir with opts.
func OpenWith(dir string, opts Options) (*Model, error) {
	ckpt, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	m := New(ckpt)
	m.halfKV = opts.HalfKV
	return m, nil
}

// Config is the checkpoint's configuration.
func (m *Model) Config() *checkpoint.Config { return m.cfg }

// Close releases the checkpoint's mappings.
func (m *Model) Close() error { return m.ckpt.Close() }

// NewSequence starts an empty sequence.
func (m *Model) NewSequence() (engine.Sequence, error) {
	s := &Sequence{m: m, layers: make([]layerState, len(m.layers))}
	c := m.cfg
	for i, l := range m.layers {
		if l.kind == checkpoint.DeltaNet {
			s.layers[i].conv = make([]float32, c.ConvChannels()*(c.ConvKernel-1))
			s.layers[i].state = make([]float32, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		}
	}
	return s, nil
}

// Sequence is one token sequence's caches on the CPU.
type Sequence struct {
	m      *Model
	pos    int
	layers []layerState
	// ropeDelta is what the images before moved the text's rotary
	// positions by (transformers' rope_deltas); pending are the images
	// placed whose tokens are to come, and images says there were some
	// (vision_prefill.go).
	ropeDelta int
	pending   []placed
	images    bool
	// draft is the draft head's state while the sequence drafts (mtp.go).
	draft *draftState
	// keepNext asks the next pass to keep what Rewind needs; rewindable
	// is how many of the last pass's tokens Rewind may take back.
	keepNext   bool
	rewindable int
}

type layerState struct {
	// attention: keys and values of every past position, [pos][kvHeads][headDim]
	k, v []float32
	// DeltaNet: the last kernel-1 conv inputs per channel, [channels][kernel-1],
	// and the recurrent state per value head, [heads][keyDim][valueDim]
	conv, state []float32
	// keptConv and keptState are conv and state after each of a
	// keeping pass's tokens but its last, for Rewind.
	keptConv, keptState []float32
}

// Len is the number of tokens processed.
func (s *Sequence) Len() int { return s.pos }

// Fork copies the sequence and its caches. It keeps only the placed images
// whose tokens it has begun to feed: one placed past its end belongs to
// the request that placed it, not to the prefix the fork holds (a prefix
// cache snapshot at a system turn's end would hand the image to a later
// request that places its own there).
func (s *Sequence) Fork() (engine.Sequence, error) {
	if s.layers == nil {
		return nil, fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	fed := slices.IndexFunc(s.pending, func(p placed) bool { return p.At >= s.pos })
	if fed < 0 {
		fed = len(s.pending)
	}
	f := &Sequence{m: s.m, pos: s.pos, layers: make([]layerState, len(s.layers)), ropeDelta: s.ropeDelta, pending: slices.Clone(s.pending[:fed]), images: s.images}
	for i, l := range s.layers {
		f.layers[i] = layerState{
			k: slices.Clone(l.k), v: slices.Clone(l.v),
			conv: slices.Clone(l.conv), state: slices.Clone(l.state),
		}
	}
	return f, nil
}

// Bytes is the size of the caches, drafting's included.
func (s *Sequence) Bytes() int64 {
	var n int64
	for _, l := range s.layers {
		n += 4 * int64(cap(l.k)+cap(l.v)+len(l.conv)+len(l.state))
	}
	return n + s.draftBytes()
}

// Close drops the caches.
func (s *Sequence) Close() error {
	s.layers = nil
	return nil
}

// Forward appends tokens and writes their logits (see engine.Sequence):
// the one-row case of Step.
func (s *Sequence) Forward(tokens []int, out []float32) error {
	if s.layers == nil {
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	c := s.m.cfg
	if err := engine.CheckTokens(tokens, c.Vocab); err != nil {
		return err
	}
	all, err := engine.CheckOut(out, len(tokens), c.Vocab)
	if err != nil {
		return err
	}
	if err := s.checkPositions(len(tokens)); err != nil {
		return err
	}
	sc := s.m.acquire()
	defer s.m.release(sc)
	// A copy: the jobs are kept in sc, and tokens kept there would be
	// moved to the heap, a caller's []int{next} allocated at every step.
	sc.tokens = append(sc.tokens[:0], tokens...)
	img, err := s.imageJob(tokens)
	if err != nil {
		return err
	}
	sc.jobs = append(sc.jobs[:0], job{s: s, tokens: sc.tokens, out: out, all: all, img: img})
	s.m.run(sc, sc.jobs)
	s.commitImages(img)
	return nil
}

// checkPositions refuses tokens more tokens past the model's positions.
func (s *Sequence) checkPositions(tokens int) error {
	if c := s.m.cfg; c.MaxPositions > 0 && s.pos+tokens > c.MaxPositions {
		return fmt.Errorf("cpu: %d tokens exceed the model's %d positions", s.pos+tokens, c.MaxPositions)
	}
	return nil
}

var _ engine.Stepper = (*Model)(nil)

// Step runs rows of several sequences as one step (see engine.Stepper):
// their tokens pass through the layers together, each weight read once for
// all of them, and each row's logits are bit for bit those of its
// Forward alone. Nothing runs unless every row is valid.
func (m *Model) Step(rows []engine.Row) error {
	c := m.cfg
	if err := engine.CheckRows(rows, c.Vocab); err != nil {
		return err
	}
	for i, r := range rows {
		s, ok := r.Seq.(*Sequence)
		if !ok || s == nil || s.m != m {
			return fmt.Errorf("cpu: %w: row %d's sequence is not this model's", engine.ErrStepRows, i)
		}
		if s.layers == nil {
			return fmt.Errorf("cpu: row %d: %w", i, engine.ErrClosed)
		}
		if err := s.checkPositions(len(r.Tokens)); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		if _, err := s.imageJob(r.Tokens); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	sc := m.acquire()
	defer m.release(sc)
	jobs := sc.jobs[:0]
	for _, r := range rows {
		all, _ := engine.CheckOut(r.Out, len(r.Tokens), c.Vocab)
		s := r.Seq.(*Sequence)
		img, _ := s.imageJob(r.Tokens)
		jobs = append(jobs, job{s: s, tokens: r.Tokens, out: r.Out, all: all, img: img})
	}
	sc.jobs = jobs
	m.run(sc, jobs)
	for _, j := range jobs {
		j.s.commitImages(j.img)
	}
	return nil
}

// job is one row of a Forward or Step: done of its tokens have run, and
// next is how many the pass being built takes.
type job struct {
	s          *Sequence
	tokens     []int
	out        []float32
	all        bool
	done, next int
	img        *imageJob // the images among tokens, or nil
}

// seg is a job's piece in one pass: its tokens are rows [at, at+n) of
// the pass's activations, appended to s at position pos; out receives
// the logits of every position (all), of the last, or none (nil).
type seg struct {
	s       *Sequence
	tokens  []int
	at, pos int
	out     []float32
	all     bool
	// img is the job's images and off where the piece starts in the job.
	img *imageJob
	off int
	// keep is how many of the first tokens' DeltaNet states the pass
	// keeps for Rewind (Sequence.keepNext).
	keep int
}

// run runs jobs to the end in passes. Each job goes in pieces of
// maxChunk tokens, as a Forward of its own goes, so that its pieces and
// their paths through the products are the same in any company; a pass
// holds maxChunk tokens at most (bounding the activations) and a job at
// most once. Pieces that take the tiles come first in a pass (mulTiled).
func (m *Model) run(sc *scratch, jobs []job) {
	v := m.cfg.Vocab
	for {
		total := 0
		for j := range jobs {
			jb := &jobs[j]
			jb.next = min(maxChunk, len(jb.tokens)-jb.done)
			if jb.next > 0 && total > 0 && total+jb.next > maxChunk {
				jb.next = 0
			}
			total += jb.next
		}
		if total == 0 {
			m.flushDrafts(sc, jobs)
			return
		}
		segs := sc.segs[:0]
		for _, tiled := range [2]bool{true, false} {
			for j := range jobs {
				jb := &jobs[j]
				if jb.next == 0 || (tiledRows(jb.next) > 0) != tiled {
					continue
				}
				g := seg{s: jb.s, tokens: jb.tokens[jb.done : jb.done+jb.next], all: jb.all, img: jb.img, off: jb.done}
				switch end := jb.done + jb.next; {
				case jb.all:
					g.out = jb.out[jb.done*v : end*v]
				case len(jb.out) > 0 && end == len(jb.tokens):
					g.out = jb.out
				}
				segs = append(segs, g)
			}
		}
		sc.segs = segs
		x, xn := m.pass(sc, segs)
		m.logits(sc, segs, x, xn)
		for j := range jobs {
			jobs[j].done += jobs[j].next
		}
	}
}

// logits runs the final norm and the LM head over the rows whose logits
// segs ask for, all in one product: each piece's rows take the tiles
// where its Forward alone would (tiledRows of its logits rows).
func (m *Model) logits(sc *scratch, segs []seg, x, xn []float32) {
	c := m.cfg
	h, v := c.Hidden, c.Vocab
	outs := sc.logitRows[:0]
	k, nt := 0, 0
	for _, tiled := range [2]bool{true, false} {
		for _, g := range segs {
			n := 0
			switch {
			case g.all:
				n = len(g.tokens)
			case g.out != nil:
				n = 1
			}
			if n == 0 || (tiledRows(n) > 0) != tiled {
				continue
			}
			first := g.at + len(g.tokens) - n
			rmsNormRows(xn[k*h:(k+n)*h], x[first*h:(first+n)*h], m.finalNorm, h, c.RMSNormEps)
			for i := range n {
				outs = append(outs, g.out[i*v:(i+1)*v])
			}
			k += n
			if tiled {
				nt = k
			}
		}
	}
	sc.logitRows = outs
	if k > 0 {
		m.lmHead.mulRows(sc, 0, xn[:k*h], k, nt, outs)
	}
}

// layersChunk runs tokens of s through every layer, alone, and returns
// the residual stream after the last (x) and scratch of its size (xn),
// both in sc.
func (s *Sequence) layersChunk(sc *scratch, tokens []int) (x, xn []float32) {
	sc.segs = append(sc.segs[:0], seg{s: s, tokens: tokens})
	return s.m.pass(sc, sc.segs)
}

// pass runs segs' tokens through every layer as one block of rows, the
// pieces that take the tiles first, and returns the residual stream after
// the last layer (x) and scratch of its size (xn), both in sc. The norms
// and products take every row at once; attention and DeltaNet take each
// piece on its own sequence.
func (m *Model) pass(sc *scratch, segs []seg) (x, xn []float32) {
	c := m.cfg
	h := c.Hidden
	t, nt := 0, 0
	for i := range segs {
		g := &segs[i]
		g.at, g.pos = t, g.s.pos
		if g.s.keepNext {
			g.keep = len(g.tokens) - 1
		}
		t += len(g.tokens)
		if tiledRows(len(g.tokens)) > 0 {
			nt = t
		}
	}
	x = take(&sc.x, t*h)
	for _, g := range segs {
		for i, id := range g.tokens {
			m.embed.row(id, x[(g.at+i)*h:(g.at+i+1)*h])
		}
		if g.img != nil {
			g.img.embed(x[g.at*h:(g.at+len(g.tokens))*h], g.off, h)
		}
	}
	xn = take(&sc.xn, t*h)
	delta := take(&sc.delta, t*h)
	for li := range m.layers {
		l := &m.layers[li]
		rmsNormRows(xn, x, l.inNorm, h, c.RMSNormEps)
		if l.attn != nil {
			m.attention(sc, l.attn, li, segs, xn, t, nt, delta)
		} else {
			m.deltaNet(sc, l.delta, li, segs, xn, t, nt, delta)
		}
		add(x, delta)
		rmsNormRows(xn, x, l.postNorm, h, c.RMSNormEps)
		m.moe(sc, &l.moe, xn, t, nt, delta)
		add(x, delta)
	}
	for _, g := range segs {
		g.s.pos += len(g.tokens)
		g.s.keepNext, g.s.rewindable = false, g.keep
		if g.s.draft != nil {
			g.s.draft.addHidden(m, g.tokens, x[g.at*h:(g.at+len(g.tokens))*h])
		}
	}
	return x, xn
}

func add(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// rmsNormRows normalizes each row of x (length n) into dst, times w.
func rmsNormRows(dst, x, w []float32, n int, eps float32) {
	for r := 0; r+n <= len(x); r += n {
		rmsNorm(dst[r:r+n], x[r:r+n], w, eps)
	}
}

func rmsNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// sigmoids sets x[i] = sigmoid(x[i]), the exponentials by expShift's
// vector kernel (a call of math.Exp per element cost a sixth of prefill).
func sigmoids(x []float32) {
	for i, v := range x {
		x[i] = -v
	}
	expShift(x, 0)
	for i, e := range x {
		x[i] = 1 / (1 + e)
	}
}

// siluMul sets x[i] = silu(x[i]) * y[i], or silu(x[i]) where y is nil;
// tmp is a buffer of len(x). It takes the sigmoids a row of n at a time:
// the vector kernel takes a run's whole vectors and the Go loop the rest,
// so a row's values would otherwise depend on the rows before it.
func siluMul(x, y, tmp []float32, n int) {
	copy(tmp, x)
	sigmoidRows(tmp, n)
	if y == nil {
		for i, s := range tmp {
			x[i] *= s
		}
		return
	}
	for i, s := range tmp {
		x[i] *= s * y[i]
	}
}

// sigmoidRows is sigmoids on each row of n of x.
func sigmoidRows(x []float32, n int) {
	for r := 0; r+n <= len(x); r += n {
		sigmoids(x[r : r+n])
	}
}

// softplus matches torch.nn.functional.softplus (threshold 20).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
