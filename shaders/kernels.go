package shaders

import (
	"fmt"
	"sync"

	"petal/gpu"
)

// Kernels compiles Petal's kernels on one device, each specialisation once,
// and encodes them. Each op method encodes its dispatches into a command
// buffer; when an op needs several dependent dispatches it places the
// barriers between them itself, but the caller places the barriers between
// ops (only where a real data dependency exists, so independent ops share a
// level of the concurrent pass).
type Kernels struct {
	dev   gpu.Device
	mu    sync.Mutex
	cache map[string]gpu.Pipeline
}

// NewKernels prepares kernels for dev; pipelines compile on first use.
func NewKernels(dev gpu.Device) *Kernels {
	return &Kernels{dev: dev, cache: map[string]gpu.Pipeline{}}
}

// Device is the device the kernels run on.
func (k *Kernels) Device() gpu.Device { return k.dev }

// Pipeline returns function fn of the named .metal file specialised with
// constants, compiling it on first use. Every op calls it for every
// dispatch, so a hit costs a map lookup only: the embedded files are fixed
// for the life of the binary, so the file's name stands for its text and
// it is expanded only on a miss.
func (k *Kernels) Pipeline(file, fn string, constants ...gpu.Constant) (gpu.Pipeline, error) {
	key := gpu.PipelineKey(gpu.Source{Name: file}, fn, constants)
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.cache[key]; ok {
		return p, nil
	}
	text, err := Source(file)
	if err != nil {
		return nil, err
	}
	p, err := k.dev.NewPipeline(gpu.Source{Name: file, Text: text}, fn, constants...)
	if err != nil {
		return nil, fmt.Errorf("shaders: %s %s: %w", file, fn, err)
	}
	if err := checkThreads(file, p); err != nil {
		return nil, err
	}
	k.cache[key] = p
	return p, nil
}

// View is a byte range of a buffer, starting at Off.
type View struct {
	Buf gpu.Buffer
	Off int
}

// At is the view n bytes further on.
func (v View) At(n int) View { return View{v.Buf, v.Off + n} }

// Arg binds the view to [[buffer(index)]].
func (v View) Arg(index int) gpu.Arg { return gpu.BufferArg(index, v.Buf, v.Off) }

// QMatrix is an MLX affine-quantized matrix [Rows, Cols] (or a stack of
// experts of that shape) in place in device memory: uint32 codes packed
// along Cols, lowest bits first; bf16 scales and biases per GroupSize
// inputs of a row.
type QMatrix struct {
	Codes, Scales, Biases View
	Rows, Cols            int
	Bits, GroupSize       int
}

// ExpertCodeBytes is the distance between two experts' codes.
func (m *QMatrix) ExpertCodeBytes() int { return m.Rows * m.Cols * m.Bits / 8 }

// ExpertScaleBytes is the distance between two experts' scales (and
// biases).
func (m *QMatrix) ExpertScaleBytes() int { return m.Rows * (m.Cols / m.GroupSize) * 2 }

// AttnShape is the geometry of gated full attention.
type AttnShape struct {
	Heads, KVHeads, HeadDim int
	RotaryDim               int // leading dims of each head that RoPE rotates
	Theta                   float64
	Eps                     float32 // of the q/k RMSNorms
}

// DeltaShape is the geometry of a Gated DeltaNet layer.
type DeltaShape struct {
	KeyHeads, ValueHeads int
	KeyDim, ValueDim     int
	ConvKernel           int
	Eps                  float32 // of the gated output RMSNorm
}

// Channels is the width of the conv: q, k and v.
func (d DeltaShape) Channels() int { return 2*d.KeyHeads*d.KeyDim + d.ValueHeads*d.ValueDim }
