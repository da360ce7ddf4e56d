package shaders

import (
	"fmt"
	"math"
	"unsafe"

	"petal/gpu"
)

// The vision family (vision.metal, vision_mrope.metal): the vision
// tower's LayerNorm, dense products with bias and GELU, 2D rotary,
// attention within a frame and a copy of features into the prompt's
// rows; and the attention prep of prompt rows with 3D rotary positions.

// Kernel files of the vision family.
const (
	visionFile = "vision.metal"
	mropeFile  = "vision_mrope.metal"
)

// Constants shared with vision.h (TestVisionArgsLayout checks they agree).
const (
	VisThreads      = 256
	VisTile         = 16
	VisDenseThreads = VisTile * VisTile
	VisAttnThreads  = 32
	VisMaxHeadDim   = 128
)

// VisAct is a dense product's activation.
type VisAct int32

// The activations, as vision.h's VIS_ACT_*.
const (
	VisActNone     VisAct = 0
	VisActGELUTanh VisAct = 1 // gelu_pytorch_tanh
	VisActGELUErf  VisAct = 2 // nn.GELU()
)

// VisNormArgs mirrors struct VisNormArgs.
type VisNormArgs struct {
	N    int32
	Eps  float32
	Rows int32
	_    int32
}

// VisDenseArgs mirrors struct VisDenseArgs.
type VisDenseArgs struct {
	Rows       int32
	Cols       int32
	Tokens     int32
	Act        VisAct
	Accumulate int32
	_          [3]int32
}

// VisRopeArgs mirrors struct VisRopeArgs.
type VisRopeArgs struct {
	Tokens  int32
	Heads   int32
	HeadDim int32
	Frame   int32
}

// VisAttnArgs mirrors struct VisAttnArgs.
type VisAttnArgs struct {
	Tokens  int32
	Heads   int32
	HeadDim int32
	Frame   int32
	Scale   float32
	_       [3]int32
}

// VisCopyArgs mirrors struct VisCopyArgs.
type VisCopyArgs struct {
	N int32
	_ [3]int32
}

// MRopePrepArgs mirrors struct MRopePrepArgs.
type MRopePrepArgs struct {
	Heads     int32
	KVHeads   int32
	HeadDim   int32
	RotaryDim int32
	Pos       int32
	Eps       float32
	Text      int32
	Delta     int32
	InvFreq   [AttnMaxHeadDim / 2]float32
	Axis      [AttnMaxHeadDim / 2]int32
}

// visBytes is the in-memory image of a vision args struct (fixed-width
// numbers only, so the Go layout is the C one).
func visBytes[T VisNormArgs | VisDenseArgs | VisRopeArgs | VisAttnArgs | VisCopyArgs | MRopePrepArgs](a *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}

// VisMatrix is a dense weight [Rows][Cols] in device memory, bf16 or
// float32.
type VisMatrix struct {
	W          View
	Rows, Cols int
	BF16       bool
}

func (m *VisMatrix) elemBytes() int {
	if m.BF16 {
		return 2
	}
	return 4
}

// visElements checks that n·m floats fit the kernels' 32-bit indices.
func visElements(op string, n, m int) error {
	if n < 1 || m < 1 || int64(n)*int64(m) > maxElements {
		return fmt.Errorf("%w: shaders: %s: %d x %d values", gpu.ErrInvalid, op, n, m)
	}
	return nil
}

// VisLayerNorm writes out[r] = (x[r] - mean) / sqrt(var + eps) · w + b for
// rows packed rows of n floats. out may be x.
func (k *Kernels) VisLayerNorm(cb gpu.CommandBuffer, out, x, w, b View, n, rows int, eps float32) error {
	const op = "VisLayerNorm"
	if err := visElements(op, n, rows); err != nil {
		return err
	}
	if rows > maxGridGroups || !(eps >= 0) {
		return fmt.Errorf("%w: shaders: %s: %d rows, eps %v", gpu.ErrInvalid, op, rows, eps)
	}
	if err := requireViews(op, []viewBytes{f32("out", out, n*rows), f32("x", x, n*rows), f32("w", w, n), f32("b", b, n)}); err != nil {
		return err
	}
	p, err := k.Pipeline(visionFile, "vis_layernorm_f32")
	if err != nil {
		return err
	}
	args := VisNormArgs{N: int32(n), Eps: eps, Rows: int32(rows)}
	threads := min(VisThreads, (n+gpu.SimdWidth-1)/gpu.SimdWidth*gpu.SimdWidth)
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(rows), Threads: denseSize(threads),
		Args: []gpu.Arg{gpu.BytesArg(0, visBytes(&args)), x.Arg(1), w.Arg(2), b.Arg(3), out.Arg(4)},
	})
}

// VisDense writes out[t] = act(m · x[t] + b) for tokens rows of x
// (float32[tokens][m.Cols]) into out (float32[tokens][m.Rows]), adding to
// what out holds when accumulate (the residual stream). out must not
// overlap x.
func (k *Kernels) VisDense(cb gpu.CommandBuffer, out View, m VisMatrix, b, x View, tokens int, act VisAct, accumulate bool) error {
	const op = "VisDense"
	if err := visElements(op, m.Rows, m.Cols); err != nil {
		return err
	}
	if err := visElements(op, tokens, max(m.Rows, m.Cols)); err != nil {
		return err
	}
	if act < VisActNone || act > VisActGELUErf {
		return fmt.Errorf("%w: shaders: %s: activation %d", gpu.ErrInvalid, op, act)
	}
	if err := requireView(op, "w", m.W, m.Rows*m.Cols*m.elemBytes(), m.elemBytes()); err != nil {
		return err
	}
	if err := requireViews(op, []viewBytes{f32("out", out, tokens*m.Rows), f32("x", x, tokens*m.Cols), f32("b", b, m.Rows)}); err != nil {
		return err
	}
	gx, err := denseGroups(op, m.Rows, VisTile)
	if err != nil {
		return err
	}
	gy, err := denseGroups(op, tokens, VisTile)
	if err != nil {
		return err
	}
	fn := "vis_dense_f32"
	if m.BF16 {
		fn = "vis_dense_bf16"
	}
	p, err := k.Pipeline(visionFile, fn)
	if err != nil {
		return err
	}
	args := VisDenseArgs{Rows: int32(m.Rows), Cols: int32(m.Cols), Tokens: int32(tokens), Act: act}
	if accumulate {
		args.Accumulate = 1
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: gx, Y: gy, Z: 1}, Threads: gpu.Size{X: VisTile, Y: VisTile, Z: 1},
		Args: []gpu.Arg{gpu.BytesArg(0, visBytes(&args)), x.Arg(1), m.W.Arg(2), b.Arg(3), out.Arg(4)},
	})
}

// VisShape is the geometry of one image in the tower's attention.
type VisShape struct {
	Tokens, Heads, HeadDim int
	Frame                  int // patches per frame: attention stays within one
}

func (s VisShape) check(op string) error {
	switch {
	case s.Heads < 1 || s.HeadDim < 2 || s.HeadDim%2 != 0 || s.HeadDim > VisMaxHeadDim:
		return fmt.Errorf("%w: shaders: %s: %d heads of %d: want an even head dim up to %d", gpu.ErrInvalid, op, s.Heads, s.HeadDim, VisMaxHeadDim)
	case s.Frame < 1 || s.Tokens < 1 || s.Tokens%s.Frame != 0 || s.Tokens > maxGridGroups:
		return fmt.Errorf("%w: shaders: %s: %d patches in frames of %d", gpu.ErrInvalid, op, s.Tokens, s.Frame)
	}
	return visElements(op, s.Tokens, 3*s.Heads*s.HeadDim)
}

// VisRope rotates the queries and keys of qkv
// (float32[Tokens][3][Heads][HeadDim]) in place by the 2D rotary tables
// cos and sin (float32[Frame][HeadDim/2], every frame alike), rotate-half
// over each head.
func (k *Kernels) VisRope(cb gpu.CommandBuffer, qkv, cos, sin View, s VisShape) error {
	const op = "VisRope"
	if err := s.check(op); err != nil {
		return err
	}
	half := s.HeadDim / 2
	if err := requireViews(op, []viewBytes{f32("qkv", qkv, s.Tokens*3*s.Heads*s.HeadDim), f32("cos", cos, s.Frame*half), f32("sin", sin, s.Frame*half)}); err != nil {
		return err
	}
	groups, err := denseGroups(op, s.Tokens*2*s.Heads*half, VisThreads)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(visionFile, "vis_rope_f32")
	if err != nil {
		return err
	}
	args := VisRopeArgs{Tokens: int32(s.Tokens), Heads: int32(s.Heads), HeadDim: int32(s.HeadDim), Frame: int32(s.Frame)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(VisThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, visBytes(&args)), qkv.Arg(1), cos.Arg(2), sin.Arg(3)},
	})
}

// VisAttention writes out[p][h] = softmax(q·kᵀ/√HeadDim)·v over the
// patches of p's frame, for every patch p and head h of qkv
// (float32[Tokens][3][Heads][HeadDim]); out is float32[Tokens][Heads][HeadDim].
func (k *Kernels) VisAttention(cb gpu.CommandBuffer, out, qkv View, s VisShape) error {
	const op = "VisAttention"
	if err := s.check(op); err != nil {
		return err
	}
	hd := s.Heads * s.HeadDim
	if err := requireViews(op, []viewBytes{f32("out", out, s.Tokens*hd), f32("qkv", qkv, s.Tokens*3*hd)}); err != nil {
		return err
	}
	p, err := k.Pipeline(visionFile, "vis_attention_f32")
	if err != nil {
		return err
	}
	args := VisAttnArgs{Tokens: int32(s.Tokens), Heads: int32(s.Heads), HeadDim: int32(s.HeadDim), Frame: int32(s.Frame),
		Scale: float32(1 / math.Sqrt(float64(s.HeadDim)))}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: s.Tokens, Y: s.Heads, Z: 1}, Threads: denseSize(VisAttnThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, visBytes(&args)), qkv.Arg(1), out.Arg(2)},
	})
}

// CopyFloats copies n floats from x to out (an image's features into the
// prompt's embedding rows).
func (k *Kernels) CopyFloats(cb gpu.CommandBuffer, out, x View, n int) error {
	const op = "CopyFloats"
	if n < 1 || n > maxElements {
		return fmt.Errorf("%w: shaders: %s: %d values", gpu.ErrInvalid, op, n)
	}
	if err := requireViews(op, []viewBytes{f32("out", out, n), f32("x", x, n)}); err != nil {
		return err
	}
	groups, err := denseGroups(op, n, VisThreads)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(visionFile, "vis_copy_f32")
	if err != nil {
		return err
	}
	args := VisCopyArgs{N: int32(n)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(VisThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, visBytes(&args)), x.Arg(1), out.Arg(2)},
	})
}

// MRopePrep is AttnPrep for rows prompt rows whose rotary positions are
// 3D: Pos3 (int32[rows][3]: time, height, width, read on the GPU) gives
// row r's, frequency j rotating by component Axes[j] (0, 1 or 2; one per
// frequency of RotaryDim/2); io.Pos is the first row's cache row.
func (k *Kernels) MRopePrep(cb gpu.CommandBuffer, io AttnPrepIO, pos3 View, axes []int, rows int) error {
	return k.mropePrep("MRopePrep", io, pos3, axes, rows, nil, cb)
}

// MRopeStep is MRopePrep for one text row at cache row io.Pos whose
// rotary position is io.Pos + delta in all three components (a decode
// step past an image); its dispatches differ from one position to the
// next only in the inline position word, as AttnPrep's (a decode plan is
// made from two probe positions, where the move may make the rotary
// position negative: only an angle).
func (k *Kernels) MRopeStep(cb gpu.CommandBuffer, io AttnPrepIO, delta int, axes []int) error {
	return k.mropePrep("MRopeStep", io, io.QNorm, axes, 1, &delta, cb)
}

func (k *Kernels) mropePrep(op string, io AttnPrepIO, pos3 View, axes []int, rows int, delta *int, cb gpu.CommandBuffer) error {
	a, pos := io.Shape, io.Pos
	if err := attnCheckPrep(op, a); err != nil {
		return err
	}
	if err := requireRows(op, rows); err != nil {
		return err
	}
	if len(axes) != a.RotaryDim/2 {
		return fmt.Errorf("%w: shaders: %s: %d axes for %d frequencies", gpu.ErrInvalid, op, len(axes), a.RotaryDim/2)
	}
	hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	if pos < 0 || int64(rows)*int64(2*hd) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d rows at position %d", gpu.ErrInvalid, op, rows, pos)
	}
	if err := requireViews(op, []viewBytes{
		f32("q", io.Q, rows*hd), f32("gate", io.Gate, rows*hd), f32("qg", io.QG, rows*2*hd),
		f32("k", io.K, rows*kd), f32("v", io.V, rows*kd),
		f32("q norm", io.QNorm, a.HeadDim), f32("k norm", io.KNorm, a.HeadDim), {"pos3", pos3, 12 * pos3Rows(delta, rows)},
	}); err != nil {
		return err
	}
	if err := attnCheckCache(op, "k cache", io.KCache, a, pos+rows); err != nil {
		return err
	}
	if err := attnCheckCache(op, "v cache", io.VCache, a, pos+rows); err != nil {
		return err
	}
	p, err := k.Pipeline(mropeFile, "mrope_prep_f16kv")
	if err != nil {
		return err
	}
	args := MRopePrepArgs{
		Heads: int32(a.Heads), KVHeads: int32(a.KVHeads), HeadDim: int32(a.HeadDim),
		RotaryDim: int32(a.RotaryDim), Pos: int32(pos), Eps: a.Eps,
	}
	if delta != nil {
		args.Text, args.Delta = 1, int32(*delta)
	}
	for j := range a.RotaryDim / 2 {
		// As AttnPrep: computed in float64, rounded to fp32.
		args.InvFreq[j] = float32(math.Pow(a.Theta, -2*float64(j)/float64(a.RotaryDim)))
		if axes[j] < 0 || axes[j] > 2 {
			return fmt.Errorf("%w: shaders: %s: frequency %d takes axis %d", gpu.ErrInvalid, op, j, axes[j])
		}
		args.Axis[j] = int32(axes[j])
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: a.Heads + a.KVHeads, Y: rows, Z: 1},
		Threads:  gpu.Size{X: min(a.HeadDim, AttnPrepMaxThreads), Y: 1, Z: 1},
		Args: []gpu.Arg{
			gpu.BytesArg(0, visBytes(&args)), io.QG.Arg(1), io.K.Arg(2), io.V.Arg(3), io.QNorm.Arg(4), io.KNorm.Arg(5),
			io.Q.Arg(6), io.Gate.Arg(7), io.KCache.Arg(8), io.VCache.Arg(9), pos3.Arg(10),
		},
	})
}

// pos3Rows is how many rows of positions MRopePrep reads: none with a
// delta (text rows), else one per row.
func pos3Rows(delta *int, rows int) int {
	if delta != nil {
		return 0
	}
	return rows
}
