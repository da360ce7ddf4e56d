package gpumodel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/gpu"
	"petal/gpu/record"
	"petal/shaders"
)

// Model is a checkpoint resident on a GPU device.
type Model struct {
	ckpt   *checkpoint.Model
	cfg    *checkpoint.Config
	k      *shaders.Kernels
	shards []gpu.Buffer
	owned  []gpu.Buffer // float32 copies of the small vectors
	// copies are aligned copies of the tensors that lie misaligned in
	// their shard for the kernels (an MLX-written file that was not
	// realigned); copiedBytes is their size.
	copies      []gpu.Buffer
	copiedBytes int64

	embed, lmHead shaders.QMatrix
	finalNorm     shaders.View
	layers        []layer
	attn          shaders.AttnShape
	delta         shaders.DeltaShape
	// prefillChunk is the tokens per prefill chunk.
	prefillChunk int
	// maxMillis bounds a command buffer's Cost.M1Millis
	// (maxCommandBufferMillis; tests lower it to cut small models).
	maxMillis float64
	// attnGroupTokens is how many query rows one AttnPrefill threadgroup
	// attends, from its pipeline, looked up on the first prefill.
	attnGroupTokens func() (int, error)
	// batch is the activations of Step's passes.
	batch batchActs
	// vision is the vision tower, placed on the device on first use.
	vision deviceTower
}

type layer struct {
	kind             checkpoint.LayerKind
	inNorm, postNorm shaders.View
	// attention
	q, kp, v, o  shaders.QMatrix
	qNorm, kNorm shaders.View
	// DeltaNet
	qkv, z, b, a, out          shaders.QMatrix
	conv, negA, dtBias, gnNorm shaders.View
	// MoE
	router, gate, up, down             shaders.QMatrix
	shGate, shUp, shDown, shExpertGate shaders.QMatrix
}

// Open opens the checkpoint in dir on dev.
func Open(dir string, dev gpu.Device) (*Model, error) {
	ckpt, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := New(ckpt, dev)
	if err != nil {
		ckpt.Close()
		return nil, err
	}
	return m, nil
}

// New places an opened checkpoint on dev. On success the Model owns ckpt.
func New(ckpt *checkpoint.Model, dev gpu.Device) (*Model, error) {
	c := ckpt.Config
	m := &Model{
		ckpt: ckpt, cfg: c, k: shaders.NewKernels(dev), prefillChunk: defaultPrefillChunk,
		maxMillis: maxCommandBufferMillis,
		attn: shaders.AttnShape{
			Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
			RotaryDim: c.RotaryDim, Theta: c.RopeTheta, Eps: c.RMSNormEps,
		},
		delta: shaders.DeltaShape{
			KeyHeads: c.LinearKeyHeads, ValueHeads: c.LinearValueHeads,
			KeyDim: c.LinearKeyDim, ValueDim: c.LinearValueDim,
			ConvKernel: c.ConvKernel, Eps: c.RMSNormEps,
		},
	}
	m.attnGroupTokens = sync.OnceValues(func() (int, error) { return m.k.AttnPrefillGroupTokens(m.attn) })
	for _, k := range c.Layers {
		check := m.attn.Check
		if k == checkpoint.DeltaNet {
			check = m.delta.Check
		}
		if err := check(); err != nil {
			return nil, fmt.Errorf("gpumodel: the GPU kernels cannot run this model's layers: %w", err)
		}
	}
	if err := m.load(); err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

func (m *Model) load() error {
	dev := m.k.Device()
	bufOf := map[*safetensors.File]gpu.Buffer{}
	for _, s := range m.ckpt.Shards {
		// The driver is told where the tensors lie so that a shard longer
		// than one device buffer (Metal's maxBufferLength, about half the
		// memory on some Macs) can be wrapped as overlapping views, each
		// tensor wholly inside one.
		ts := s.Tensors()
		ext := make([]gpu.Extent, len(ts))
		for i, t := range ts {
			ext[i] = gpu.Extent{Name: t.Name, Offset: int(t.Offset), Len: len(t.Data)}
		}
		b, err := gpu.WrapTensors(dev, s.Data, ext)
		if err != nil {
			return fmt.Errorf("gpumodel: wrapping %s: %w", s.Path, err)
		}
		m.shards = append(m.shards, b)
		bufOf[s] = b
	}
	view := func(t *safetensors.Tensor) shaders.View {
		if t.File == nil { // a shape-only model: counted, never read
			return shaders.View{Buf: record.Placeholder(int(t.End))}
		}
		return shaders.View{Buf: bufOf[t.File], Off: int(t.Offset)}
	}
	var errs []error
	// Alignment is settled here, once: a tensor the kernels cannot read
	// where it lies is copied into a buffer of its own (which starts
	// aligned), and every matrix is checked, so no dispatch has to.
	place := func(t *safetensors.Tensor, misaligned []*safetensors.Tensor) shaders.View {
		if !slices.Contains(misaligned, t) {
			return view(t)
		}
		b, err := gpu.Upload(dev, t.Data)
		if err != nil {
			errs = append(errs, fmt.Errorf("gpumodel: copying misaligned %s: %w", t.Name, err))
			return shaders.View{}
		}
		m.copies = append(m.copies, b)
		m.copiedBytes += int64(len(t.Data))
		return shaders.View{Buf: b}
	}
	mat := func(x *checkpoint.Matrix) shaders.QMatrix {
		if x.Bits == 0 {
			errs = append(errs, fmt.Errorf("gpumodel: %s is not quantized; the GPU backend runs MLX affine 4/8-bit matrices only", x.Name))
			return shaders.QMatrix{}
		}
		mis := x.GPUMisaligned()
		q := shaders.QMatrix{
			Codes: place(x.Weight, mis), Scales: place(x.Scales, mis), Biases: place(x.Biases, mis),
			Rows: x.Rows, Cols: x.Cols, Bits: x.Bits, GroupSize: x.GroupSize,
		}
		if err := q.CheckAligned(); err != nil {
			errs = append(errs, fmt.Errorf("gpumodel: %s: %w", x.Name, err))
		}
		return q
	}
	vec := func(v *checkpoint.Vector, f func(float32) float32) shaders.View {
		b, err := m.floats(vectorValues(v, f))
		errs = append(errs, err)
		return b
	}
	ck := m.ckpt
	m.embed, m.lmHead = mat(&ck.Embed), mat(&ck.LMHead)
	m.finalNorm = vec(&ck.FinalNorm, nil)
	m.layers = make([]layer, len(ck.Layers))
	for i := range ck.Layers {
		src, l := &ck.Layers[i], &m.layers[i]
		l.kind = src.Kind
		l.inNorm, l.postNorm = vec(&src.InputNorm, nil), vec(&src.PostNorm, nil)
		if a := src.Attn; a != nil {
			l.q, l.kp, l.v, l.o = mat(&a.Q), mat(&a.K), mat(&a.V), mat(&a.O)
			l.qNorm, l.kNorm = vec(&a.QNorm, nil), vec(&a.KNorm, nil)
		}
		if d := src.Delta; d != nil {
			l.qkv, l.z, l.b, l.a, l.out = mat(&d.QKV), mat(&d.Z), mat(&d.B), mat(&d.A), mat(&d.Out)
			l.conv = vec(&d.Conv, nil)
			l.negA = vec(&d.ALog, func(x float32) float32 { return -float32(math.Exp(float64(x))) })
			l.dtBias, l.gnNorm = vec(&d.DtBias, nil), vec(&d.Norm, nil)
		}
		e := &src.MoE
		l.router, l.gate, l.up, l.down = mat(&e.Router), mat(&e.Gate), mat(&e.Up), mat(&e.Down)
		l.shGate, l.shUp, l.shDown, l.shExpertGate = mat(&e.SharedGate), mat(&e.SharedUp), mat(&e.SharedDown), mat(&e.SharedExpertGate)
	}
	return errors.Join(errs...)
}

// vectorValues converts a checkpoint vector to float32, applying f if set.
func vectorValues(v *checkpoint.Vector, f func(float32) float32) []float32 {
	t := v.T
	var out []float32
	if t.DType == safetensors.F32 {
		out = append(out, t.Float32s()...)
	} else {
		for _, u := range t.Uint16s() {
			out = append(out, math.Float32frombits(uint32(u)<<16))
		}
	}
	if f != nil {
		for i := range out {
			out[i] = f(out[i])
		}
	}
	return out
}

// floats uploads v into a new buffer the model owns.
func (m *Model) floats(v []float32) (shaders.View, error) {
	b, err := m.k.Device().NewBuffer(4 * len(v))
	if err != nil {
		return shaders.View{}, err
	}
	m.owned = append(m.owned, b)
	putFloats(b.Contents(), v)
	return shaders.View{Buf: b}, nil
}

func putFloats(dst []byte, v []float32) {
	for i, x := range v {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
	}
}

func (m *Model) release() {
	m.batch.release()
	for _, b := range m.owned {
		b.Release()
	}
	for _, b := range m.copies {
		b.Release()
	}
	for _, b := range m.shards {
		b.Release()
	}
	m.owned, m.copies, m.shards = nil, nil, nil
}

// CopiedBytes is how many bytes of weights the model copied at load
// because they were misaligned for the kernels in their shard (see
// checkpoint.Matrix.GPUMisaligned); 0 for a folder stored aligned.
func (m *Model) CopiedBytes() int64 { return m.copiedBytes }

// Config is the checkpoint's configuration.
func (m *Model) Config() *checkpoint.Config { return m.cfg }

// Close releases the device buffers and the checkpoint's mappings.
func (m *Model) Close() error {
	m.release()
	return m.ckpt.Close()
}

// DecodeWeightBytes is how many bytes of weights one decode step reads.
func (m *Model) DecodeWeightBytes() int64 { return m.ckpt.DecodeWeightBytes() }

var _ engine.Model = (*Model)(nil)
