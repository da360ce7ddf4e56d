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
		rope:      newRope(ckpt.Config.RotaryDim, ckpt.Config.RopeTheta),
	}
	for i := range ckpt.Layers {
		src := &ckpt.Layers[i]
		l := &m.layers[i]
		l.kind = src.Kind
		l.inNorm = vector(&src.InputNorm)
		l.postNorm = vector(&src.PostNorm)
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
	}
	return m
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
}

type layerState struct {
	// attention: keys and values of every past position, [pos][kvHeads][headDim]
	k, v []float32
	// DeltaNet: the last kernel-1 conv inputs per channel, [channels][kernel-1],
	// and the recurrent state per value head, [heads][keyDim][valueDim]
	conv, state []float32
}

// Len is the number of tokens processed.
func (s *Sequence) Len() int { return s.pos }

// Fork copies the sequence and its caches.
func (s *Sequence) Fork() (engine.Sequence, error) {
	if s.layers == nil {
		return nil, fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	f := &Sequence{m: s.m, pos: s.pos, layers: make([]layerState, len(s.layers))}
	for i, l := range s.layers {
		f.layers[i] = layerState{
			k: slices.Clone(l.k), v: slices.Clone(l.v),
			conv: slices.Clone(l.conv), state: slices.Clone(l.state),
		}
	}
	return f, nil
}

// Bytes is the size of the caches.
func (s *Sequence) Bytes() int64 {
	var n int64
	for _, l := range s.layers {
		n += 4 * int64(cap(l.k)+cap(l.v)+len(l.conv)+len(l.state))
	}
	return n
}

// Close drops the caches.
func (s *Sequence) Close() error {
	s.layers = nil
	return nil
}

// Forward appends tokens and writes their logits (see engine.Sequence).
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
	if c.MaxPositions > 0 && s.pos+len(tokens) > c.MaxPositions {
		return fmt.Errorf("cpu: %d tokens exceed the model's %d positions", s.pos+len(tokens), c.MaxPositions)
	}
	sc := s.m.acquire()
	defer s.m.release(sc)
	for start := 0; start < len(tokens); start += maxChunk {
		end := min(start+maxChunk, len(tokens))
		var dst []float32
		switch {
		case all:
			dst = out[start*c.Vocab : end*c.Vocab]
		case len(out) > 0 && end == len(tokens):
			dst = out
		}
		s.chunk(sc, tokens[start:end], dst, all)
	}
	return nil
}

// chunk runs tokens through every layer; dst receives the logits of every
// position (all) or of the last one.
func (s *Sequence) chunk(sc *scratch, tokens []int, dst []float32, all bool) {
	m, c := s.m, s.m.cfg
	t, h := len(tokens), c.Hidden
	x, xn := s.layersChunk(sc, tokens)
	if dst == nil {
		return
	}
	if !all {
		x = x[(t-1)*h:]
		t = 1
	}
	rmsNormRows(xn[:t*h], x, m.finalNorm, h, c.RMSNormEps)
	m.lmHead.mul(sc, 0, xn[:t*h], t, dst)
}

// layersChunk runs tokens through every layer and returns the residual
// stream after the last (x) and scratch of its size (xn), both in sc.
func (s *Sequence) layersChunk(sc *scratch, tokens []int) (x, xn []float32) {
	m, c := s.m, s.m.cfg
	t, h := len(tokens), c.Hidden
	x = take(&sc.x, t*h)
	for i, id := range tokens {
		m.embed.row(id, x[i*h:(i+1)*h])
	}
	xn = take(&sc.xn, t*h)
	delta := take(&sc.delta, t*h)
	for li := range m.layers {
		l := &m.layers[li]
		rmsNormRows(xn, x, l.inNorm, h, c.RMSNormEps)
		if l.attn != nil {
			s.attention(sc, l.attn, &s.layers[li], xn, t, delta)
		} else {
			s.deltaNet(sc, l.delta, &s.layers[li], xn, t, delta)
		}
		add(x, delta)
		rmsNormRows(xn, x, l.postNorm, h, c.RMSNormEps)
		s.moe(sc, &l.moe, xn, t, delta)
		add(x, delta)
	}
	s.pos += t
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
// tmp is a buffer of len(x).
func siluMul(x, y, tmp []float32) {
	copy(tmp, x)
	sigmoids(tmp)
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

// softplus matches torch.nn.functional.softplus (threshold 20).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
