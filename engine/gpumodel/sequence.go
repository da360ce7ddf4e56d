package gpumodel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/shaders"
)

// initialCapacity is the KV cache length a sequence starts with; it doubles
// as the sequence grows.
const initialCapacity = 256

// Sequence is one token sequence's caches and activations on the device.
type Sequence struct {
	m      *Model
	pos    int
	cap    int // positions the KV caches hold
	bufs   []gpu.Buffer
	layers []layerState
	act    activations
	chunk  chunkActs // prefill activations, allocated by the first prefill
	// limit bounds the ids the GPU argmax picks during a Decode (the
	// tokenizer's); 0 means the whole vocabulary.
	limit int
	plan  *plan // the latest decode step's plan
	// sampling is set while a Decode draws with the GPU sampler, whose
	// buffers samp holds once the first such Decode made them.
	sampling bool
	samp     samplerBufs
	closed   bool
	// img is the images placed on the sequence (vision_prefill.go).
	img imageState
}

type layerState struct {
	kCache, vCache shaders.View // attention: fp16 [cap][kvHeads][headDim]
	conv, state    shaders.View // DeltaNet: [channels][kernel-1], [valueHeads][keyDim][valueDim]
}

// activations are the per-step scratch buffers, reused by every layer and
// step: layers run in order and command buffers run in commit order.
type activations struct {
	x, xn                 shaders.View
	qg, k, v, q, gate, o  shaders.View
	attnScratch           shaders.View
	u, z, b, a            shaders.View
	dOut                  shaders.View
	routerLogits, weights shaders.View
	ids                   shaders.View
	eh                    shaders.View
	shH, shGate           shaders.View
	logits                shaders.View
	tokens                shaders.View // u32 token slots: step inputs and argmax outputs
	tokenCap              int
	logitsBuf, tokensBuf  gpu.Buffer
}

func (s *Sequence) alloc(n int) (shaders.View, error) {
	b, err := s.m.k.Device().NewBuffer(max(n, 16))
	if err != nil {
		return shaders.View{}, err
	}
	s.bufs = append(s.bufs, b)
	return shaders.View{Buf: b}, nil
}

// NewSequence allocates an empty sequence's state.
func (m *Model) NewSequence() (engine.Sequence, error) {
	s, err := m.newSequence()
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (m *Model) newSequence() (*Sequence, error) {
	s := &Sequence{m: m, layers: make([]layerState, len(m.layers))}
	if err := s.allocate(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// sequenceFor is a new sequence whose caches hold n positions.
func (m *Model) sequenceFor(n int) (*Sequence, error) {
	s, err := m.newSequence()
	if err != nil {
		return nil, err
	}
	if err := s.ensureCapacity(n); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sequence) allocate() error {
	c := s.m.cfg
	d := s.m.delta
	f := 4 // bytes per float32
	var errs []error
	a := func(n int) shaders.View {
		v, err := s.alloc(n)
		errs = append(errs, err)
		return v
	}
	act := &s.act
	h, nh, kvh, hd := c.Hidden, c.Heads, c.KVHeads, c.HeadDim
	act.x, act.xn = a(h*f), a(h*f)
	act.qg, act.k, act.v = a(nh*2*hd*f), a(kvh*hd*f), a(kvh*hd*f)
	act.q, act.gate, act.o = a(nh*hd*f), a(nh*hd*f), a(nh*hd*f)
	ch, vd := d.Channels(), d.ValueHeads*d.ValueDim
	act.u, act.z = a(ch*f), a(vd*f)
	act.b, act.a, act.dOut = a(d.ValueHeads*f), a(d.ValueHeads*f), a(vd*f)
	ek, ei := c.TopK, c.ExpertIntermediate
	act.routerLogits, act.weights, act.ids = a(c.Experts*f), a(ek*f), a(ek*4)
	act.eh = a(ek * ei * f)
	act.shH, act.shGate = a(c.SharedIntermediate*f), a(f)
	act.logits = a(c.Vocab * f)
	act.logitsBuf = act.logits.Buf
	for i, l := range s.m.layers {
		if l.kind == checkpoint.DeltaNet {
			s.layers[i].conv = a(ch * (d.ConvKernel - 1) * f)
			s.layers[i].state = a(d.ValueHeads * d.KeyDim * d.ValueDim * f)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Slots for a prompt piece of engine.Run and the ring of generated
	// tokens, so the decode loop never grows them.
	if err := s.ensureTokens(engine.PrefillPiece + tokenRing); err != nil {
		return err
	}
	return s.ensureCapacity(min(initialCapacity, s.maxPositions()))
}

func (s *Sequence) maxPositions() int {
	if p := s.m.cfg.MaxPositions; p > 0 {
		return p
	}
	return math.MaxInt32
}

// ensureCapacity grows the KV caches (and the attention scratch) to hold n
// positions, copying what they hold. No command buffer may be in flight.
func (s *Sequence) ensureCapacity(n int) error {
	if n <= s.cap {
		return nil
	}
	if n > s.maxPositions() {
		return fmt.Errorf("gpumodel: %d positions exceed the model's %d", n, s.maxPositions())
	}
	newCap := max(s.cap, 1)
	for newCap < n {
		newCap *= 2
	}
	newCap = min(newCap, s.maxPositions())
	c := s.m.cfg
	row := c.KVHeads * c.HeadDim * shaders.KVElementBytes
	for i, l := range s.m.layers {
		if l.kind != checkpoint.Attention {
			continue
		}
		st := &s.layers[i]
		for _, cache := range []*shaders.View{&st.kCache, &st.vCache} {
			nv, err := s.alloc(newCap * row)
			if err != nil {
				return err
			}
			if cache.Buf != nil {
				// Only a sequence that holds positions has anything to
				// copy; touching Contents otherwise would make the
				// recording driver allocate the whole cache.
				if s.pos > 0 {
					copy(nv.Buf.Contents(), cache.Buf.Contents()[:s.pos*row])
				}
				s.free(cache.Buf)
			}
			*cache = nv
		}
	}
	if s.act.attnScratch.Buf != nil {
		s.free(s.act.attnScratch.Buf)
	}
	sc, err := s.alloc(shaders.AttnScratchBytes(s.m.attn, newCap))
	if err != nil {
		return err
	}
	s.act.attnScratch = sc
	s.cap = newCap
	return nil
}

// ensureTokens makes room for n token slots.
func (s *Sequence) ensureTokens(n int) error {
	if n <= s.act.tokenCap {
		return nil
	}
	if s.act.tokensBuf != nil {
		s.free(s.act.tokensBuf)
	}
	v, err := s.alloc(4 * n)
	if err != nil {
		return err
	}
	s.act.tokens, s.act.tokensBuf, s.act.tokenCap = v, v.Buf, n
	return nil
}

// free releases one buffer the sequence allocated.
func (s *Sequence) free(b gpu.Buffer) {
	for i, x := range s.bufs {
		if x == b {
			s.bufs = append(s.bufs[:i], s.bufs[i+1:]...)
			break
		}
	}
	b.Release()
}

// Len is the number of tokens the caches hold.
func (s *Sequence) Len() int { return s.pos }

// Bytes is the device memory the sequence holds.
func (s *Sequence) Bytes() int64 {
	var n int64
	for _, b := range s.bufs {
		n += int64(b.Len())
	}
	return n
}

// Close releases the sequence's buffers.
func (s *Sequence) Close() error {
	for _, b := range s.bufs {
		b.Release()
	}
	s.bufs, s.closed = nil, true
	return nil
}

// Fork copies the caches into a new sequence.
func (s *Sequence) Fork() (engine.Sequence, error) {
	if s.closed {
		return nil, fmt.Errorf("gpumodel: %w", engine.ErrClosed)
	}
	f, err := s.m.newSequence()
	if err != nil {
		return nil, err
	}
	if err := f.ensureCapacity(max(s.pos, 1)); err != nil {
		f.Close()
		return nil, err
	}
	for i := range s.layers {
		src, dst := &s.layers[i], &f.layers[i]
		for _, p := range [][2]shaders.View{{src.kCache, dst.kCache}, {src.vCache, dst.vCache}, {src.conv, dst.conv}, {src.state, dst.state}} {
			if p[0].Buf != nil {
				n := min(p[0].Buf.Len(), p[1].Buf.Len())
				copy(p[1].Buf.Contents()[:n], p[0].Buf.Contents()[:n])
			}
		}
	}
	f.pos = s.pos
	if err := s.forkImages(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Forward runs tokens through the chunked prefill, or one decode step each
// when they are fewer than prefillMinTokens (see engine.Sequence).
func (s *Sequence) Forward(tokens []int, out []float32) error {
	if s.closed {
		return fmt.Errorf("gpumodel: %w", engine.ErrClosed)
	}
	c := s.m.cfg
	if err := engine.CheckTokens(tokens, c.Vocab); err != nil {
		return err
	}
	all, err := engine.CheckOut(out, len(tokens), c.Vocab)
	if err != nil {
		return err
	}
	if err := s.ensureCapacity(s.pos + len(tokens)); err != nil {
		return err
	}
	if err := s.ensureTokens(len(tokens)); err != nil {
		return err
	}
	s.putTokens(0, tokens)
	if s.img.held {
		return s.forwardImages(tokens, all, out)
	}
	if len(tokens) >= prefillMinTokens {
		return s.forwardChunks(len(tokens), all, out)
	}
	per := s.stepsPerBuffer(s.pos, len(tokens))
	for i := 0; i < len(tokens); {
		// One command buffer runs steps up to the next one whose logits
		// are wanted; the CPU needs nothing from the steps before it.
		cb, err := s.m.k.Device().NewCommandBuffer()
		if err != nil {
			return err
		}
		j, want := i, false
		for j < len(tokens) && !want && j-i < per {
			want = all || (len(out) > 0 && j == len(tokens)-1)
			if j > i {
				cb.Barrier()
			}
			if err := s.encode(cb, step{pos: s.pos + j - i, token: s.slot(j), logits: want}); err != nil {
				return err
			}
			j++
		}
		if err := s.run(cb, j-i); err != nil {
			return err
		}
		if want {
			dst := out
			if all {
				dst = out[(j-1)*c.Vocab : j*c.Vocab]
			}
			readFloats(dst, s.act.logitsBuf.Contents())
		}
		i = j
	}
	return nil
}

// stepsPerBuffer is how many of the n decode steps from position pos one
// command buffer holds within the bound (at least one), each costed as the
// last, the costliest.
func (s *Sequence) stepsPerBuffer(pos, n int) int {
	c := s.stepCost(step{pos: pos + n - 1, logits: true})
	k := 1
	for k < n && s.m.fits(Cost{Flops: int64(k+1) * c.Flops, Bytes: int64(k+1) * c.Bytes}) {
		k++
	}
	return k
}

// samplerBufs are the GPU sampler's mask and request state.
type samplerBufs struct {
	mask, state shaders.View
	maskLimit   int      // the ids the mask allows: [0, maskLimit); 0: a grammar's mask
	allowed     []uint64 // a Constraint's mask, before it is written into mask
	// records, one per token ring slot, receive the logprobs of the
	// token written to that slot while logprobs is set (a request asked
	// for them), with top alternatives.
	records  shaders.View
	logprobs bool
	top      int
}

// record is the logprobs record of the token written into view next.
func (s *Sequence) record(next shaders.View) shaders.View {
	i := (next.Off - s.slot(0).Off) / 4 % tokenRing
	return s.samp.records.At(i * shaders.SampleRecordBytes)
}

// pick encodes the choice of the next token from the step's logits into
// next: the sampler during a sampled Decode, else the argmax.
func (s *Sequence) pick(e *enc, next shaders.View) {
	if s.sampling {
		sm := shaders.Sampling{Logits: s.act.logits, N: s.m.cfg.Vocab, Mask: s.samp.mask, State: s.samp.state, Out: next}
		if s.samp.logprobs {
			sm.Record, sm.TopLogprobs = s.record(next), s.samp.top
		}
		e.sample(sm)
		return
	}
	e.argmax(next, s.act.logits, s.argmaxIDs())
}

// argmaxIDs is how many leading logits the GPU argmax chooses from.
func (s *Sequence) argmaxIDs() int {
	if s.limit > 0 {
		return s.limit
	}
	return s.m.cfg.Vocab
}

// slot is token slot i.
func (s *Sequence) slot(i int) shaders.View { return s.act.tokens.At(4 * i) }

// putTokens writes ids into the slots from index at.
func (s *Sequence) putTokens(at int, ids []int) {
	b := s.act.tokensBuf.Contents()
	for i, t := range ids {
		binary.LittleEndian.PutUint32(b[4*(at+i):], uint32(t))
	}
}

func (s *Sequence) token(i int) int {
	return int(binary.LittleEndian.Uint32(s.act.tokensBuf.Contents()[4*i:]))
}

// run commits cb, waits for it, and advances the sequence by steps.
func (s *Sequence) run(cb gpu.CommandBuffer, steps int) error {
	if err := cb.Commit(); err != nil {
		return err
	}
	return s.wait(cb, steps)
}

// wait waits for cb, the last use of it: every caller drops it after,
// so it goes back to the driver for reuse (gpu.Recycle), and a decode
// step makes no new command buffer. Then it advances the sequence by
// steps.
func (s *Sequence) wait(cb gpu.CommandBuffer, steps int) error {
	err := cb.Wait()
	gpu.Recycle(cb)
	if err != nil {
		return fmt.Errorf("gpumodel: steps at positions %d..%d: %w", s.pos, s.pos+steps-1, err)
	}
	s.pos += steps
	return nil
}

func readFloats(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

var _ engine.Sequence = (*Sequence)(nil)
