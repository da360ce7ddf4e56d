package tower

import (
	"context"
	"errors"
	"fmt"
	"math"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/engine/vision/preprocess"
)

// Limits on one image, so that a grid the caller did not bound cannot make
// the tower allocate without end: the attention scores of a frame are
// patches² floats per worker.
const (
	// MaxPatches bounds one image's patches (t·h·w): Qwen3.6's processor
	// allows 16,384 (longest_edge 16,777,216 pixels over 32²-pixel tokens
	// of four patches is 65,536 patches; its default cap is a quarter).
	MaxPatches = 1 << 16
	// ropeTheta is the tower's 2D rotary base (transformers'
	// Qwen3_5MoeVisionRotaryEmbedding default, which the model keeps).
	ropeTheta = 10000
	// NormEps is the LayerNorms' epsilon (nn.LayerNorm(..., eps=1e-6)).
	NormEps = 1e-6
)

// ErrBadImage marks an image whose grid or pixel values do not fit the
// tower; callers test with errors.Is.
var ErrBadImage = errors.New("tower: image does not fit the vision tower")

// Tower is a checkpoint's vision tower with its weights widened to fp32.
type Tower struct {
	cfg    checkpoint.VisionConfig
	patch  dense // [hidden][channel, time, y, x]
	pos    []float32
	blocks []block
	mNorm  norm
	mFC1   dense
	mFC2   dense
	inv    []float32 // rotary inverse frequencies, head_dim/4
	k      Kernels
}

// SetKernels has the tower run its inner loops with k (nil: its own Go
// loops); call it before Encode.
func (t *Tower) SetKernels(k Kernels) {
	if k == nil {
		k = goKernels{}
	}
	t.k = k
}

type norm struct{ w, b []float32 }

type block struct {
	norm1, norm2        norm
	qkv, proj, fc1, fc2 dense
}

// dense is a linear layer y = W x + b, W row-major [rows][cols].
type dense struct {
	rows, cols int
	w, b       []float32
}

// New widens the tower of an opened checkpoint; it fails on a text-only
// checkpoint.
func New(m *checkpoint.Model) (*Tower, error) {
	if m.Vision == nil || m.Config.Vision == nil {
		if m.VisionErr != nil {
			return nil, fmt.Errorf("tower: the model is text-only: %w", m.VisionErr)
		}
		return nil, errors.New("tower: the model is text-only: its files hold no vision tower")
	}
	c, w := m.Config.Vision, m.Vision
	t := &Tower{cfg: *c, blocks: make([]block, len(w.Blocks)), k: goKernels{}}
	var err error
	if t.patch, err = patchMatrix(c, w); err != nil {
		return nil, err
	}
	t.pos = Floats(w.PosEmbed.T)
	for i := range w.Blocks {
		s, d := &w.Blocks[i], &t.blocks[i]
		d.norm1 = norm{Floats(s.Norm1.T), Floats(s.Norm1Bias.T)}
		d.norm2 = norm{Floats(s.Norm2.T), Floats(s.Norm2Bias.T)}
		for _, l := range []struct {
			dst  *dense
			m    *checkpoint.Matrix
			bias *checkpoint.Vector
		}{{&d.qkv, &s.QKV, &s.QKVBias}, {&d.proj, &s.Proj, &s.ProjBias}, {&d.fc1, &s.FC1, &s.FC1Bias}, {&d.fc2, &s.FC2, &s.FC2Bias}} {
			*l.dst = newDense(l.m, l.bias)
		}
	}
	t.mNorm = norm{Floats(w.MergerNorm.T), Floats(w.MergerNormBias.T)}
	t.mFC1 = newDense(&w.MergerFC1, &w.MergerFC1Bias)
	t.mFC2 = newDense(&w.MergerFC2, &w.MergerFC2Bias)
	t.inv = InvFreq(c)
	return t, nil
}

// Config is the tower's configuration.
func (t *Tower) Config() *checkpoint.VisionConfig { return &t.cfg }

// patchMatrix is the Conv3d weight as a [hidden][C·T·P·P] matrix whose
// columns follow the pixel values' (channel, time, y, x) order.
func patchMatrix(c *checkpoint.VisionConfig, w *checkpoint.VisionWeights) (dense, error) {
	raw := Floats(w.Patch.T)
	cols := c.PatchDim()
	d := dense{rows: c.Hidden, cols: cols, w: raw, b: Floats(w.PatchBias.T)}
	if len(raw) != c.Hidden*cols {
		return d, fmt.Errorf("tower: patch embedding holds %d values, want %d", len(raw), c.Hidden*cols)
	}
	if !w.ChannelsLast {
		return d, nil
	}
	// mlx-vlm stores [out, t, y, x, channel].
	ch, tp, p := c.InChannels, c.TemporalPatch, c.Patch
	d.w = make([]float32, len(raw))
	for o := 0; o < c.Hidden; o++ {
		src, dst := raw[o*cols:(o+1)*cols], d.w[o*cols:(o+1)*cols]
		for k := 0; k < ch; k++ {
			for ti := 0; ti < tp; ti++ {
				for y := 0; y < p; y++ {
					for x := 0; x < p; x++ {
						dst[((k*tp+ti)*p+y)*p+x] = src[((ti*p+y)*p+x)*ch+k]
					}
				}
			}
		}
	}
	return d, nil
}

func newDense(m *checkpoint.Matrix, bias *checkpoint.Vector) dense {
	return dense{rows: m.Rows, cols: m.Cols, w: widen(m), b: Floats(bias.T)}
}

// Floats is a BF16 or F32 tensor widened to float32, in a copy.
func Floats(t *safetensors.Tensor) []float32 {
	if t.DType == safetensors.F32 {
		return append([]float32(nil), t.Float32s()...)
	}
	raw := t.Uint16s()
	out := make([]float32, len(raw))
	for i, u := range raw {
		out[i] = bf16(u)
	}
	return out
}

func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// widen is a matrix's weights in fp32: dense as stored, or an MLX
// affine-quantized one dequantized (w = scale·q + bias per group).
func widen(m *checkpoint.Matrix) []float32 {
	if m.Bits == 0 {
		return Floats(m.Weight)
	}
	words, scales, biases := m.Weight.Uint32s(), m.Scales.Uint16s(), m.Biases.Uint16s()
	per := 32 / m.Bits
	mask := uint32(1)<<m.Bits - 1
	groups := m.Cols / m.GroupSize
	out := make([]float32, m.Rows*m.Cols)
	for r := 0; r < m.Rows; r++ {
		for c := 0; c < m.Cols; c++ {
			q := words[r*m.Cols/per+c/per] >> (m.Bits * (c % per)) & mask
			g := r*groups + c/m.GroupSize
			out[r*m.Cols+c] = bf16(scales[g])*float32(q) + bf16(biases[g])
		}
	}
	return out
}

// Encode returns the merged features of one image: Tokens() rows of the
// text model's hidden size, as transformers' get_image_features computes
// them from the same pixel values.
func (t *Tower) Encode(px preprocess.Pixels) ([]float32, error) {
	return t.EncodeContext(context.Background(), px)
}

// EncodeContext is Encode, stopped between blocks when ctx ends (an image
// at the processor's max_pixels takes minutes on a CPU): it then returns
// ctx's cause.
func (t *Tower) EncodeContext(ctx context.Context, px preprocess.Pixels) ([]float32, error) {
	c := &t.cfg
	g := px.Grid
	n := g.Patches()
	switch {
	case g.T <= 0 || g.H <= 0 || g.W <= 0 || g.H%c.Merge != 0 || g.W%c.Merge != 0:
		return nil, fmt.Errorf("%w: grid %dx%dx%d is not whole merge blocks of %d", ErrBadImage, g.T, g.H, g.W, c.Merge)
	case n > MaxPatches:
		return nil, fmt.Errorf("%w: %d patches exceed %d", ErrBadImage, n, MaxPatches)
	case px.Merge != 0 && px.Merge != c.Merge:
		return nil, fmt.Errorf("%w: merged by %d, the tower merges %d", ErrBadImage, px.Merge, c.Merge)
	case len(px.Values) != n*c.PatchDim():
		return nil, fmt.Errorf("%w: %d pixel values for %d patches of %d", ErrBadImage, len(px.Values), n, c.PatchDim())
	}
	h := c.Hidden
	x := make([]float32, n*h)
	t.patch.apply(t.k, px.Values, n, x)
	AddPositions(x, t.pos, &t.cfg, g)
	cos, sin := Rotary(t.inv, t.cfg.Merge, g)
	scratch := newWork(n, c)
	for i := range t.blocks {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		t.block(&t.blocks[i], x, g, cos, sin, scratch)
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	// The merger: each patch normalized, Merge² consecutive patches (one
	// merge block) side by side, FC1, exact GELU, FC2.
	xn := scratch.xn
	layerNormRows(xn, x, t.mNorm, h)
	tokens := n / (c.Merge * c.Merge)
	mid := make([]float32, tokens*t.mFC1.rows)
	t.mFC1.apply(t.k, xn, tokens, mid)
	for i, v := range mid {
		mid[i] = geluErf(v)
	}
	out := make([]float32, tokens*t.mFC2.rows)
	t.mFC2.apply(t.k, mid, tokens, out)
	return out, nil
}

// work holds one Encode's activations.
type work struct {
	xn, qkv, attn, mlp, delta []float32
}

func newWork(n int, c *checkpoint.VisionConfig) *work {
	return &work{
		xn: make([]float32, n*c.Hidden), qkv: make([]float32, n*3*c.Hidden), attn: make([]float32, n*c.Hidden),
		mlp: make([]float32, n*c.Intermediate), delta: make([]float32, n*c.Hidden),
	}
}

func (t *Tower) block(b *block, x []float32, g preprocess.Grid, cos, sin []float32, w *work) {
	c := &t.cfg
	n, h := g.Patches(), c.Hidden
	layerNormRows(w.xn, x, b.norm1, h)
	b.qkv.apply(t.k, w.xn, n, w.qkv)
	t.attention(w.qkv, w.attn, g, cos, sin)
	b.proj.apply(t.k, w.attn, n, w.delta)
	add(x, w.delta)
	layerNormRows(w.xn, x, b.norm2, h)
	b.fc1.apply(t.k, w.xn, n, w.mlp)
	for i, v := range w.mlp {
		w.mlp[i] = geluTanh(v)
	}
	b.fc2.apply(t.k, w.mlp, n, w.delta)
	add(x, w.delta)
}

func add(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// layerNormRows normalizes each row of n of x into dst: (x - mean) /
// sqrt(var + eps) · w + b, the statistics in float64 (torch reduces fp32
// rows in a wider accumulator too).
func layerNormRows(dst, x []float32, p norm, n int) {
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var s float64
		for _, v := range row {
			s += float64(v)
		}
		mean := s / float64(n)
		var ss float64
		for _, v := range row {
			d := float64(v) - mean
			ss += d * d
		}
		inv := 1 / math.Sqrt(ss/float64(n)+NormEps)
		for i, v := range row {
			dst[r+i] = float32((float64(v)-mean)*inv)*p.w[i] + p.b[i]
		}
	}
}

// geluTanh is gelu_pytorch_tanh, the blocks' MLP activation.
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// geluErf is nn.GELU(), the merger's activation.
func geluErf(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}
