package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

// The dense family: embedding gather, RMSNorm (alone, fused with the
// residual add, and fused with the MoE combine before that), quantized
// matrix-vector products (single, several on one input, SwiGLU pairs, and
// gathered by expert), the MoE router, and argmax. All activations
// are float32; quantized matrices are MLX affine (bf16 scales and biases,
// group 64) used in place.

// Kernel files of the dense family.
const (
	qmvFile     = "qmv.metal"
	rmsnormFile = "rmsnorm.metal"
	moeFile     = "moe.metal"
	argmaxFile  = "argmax.metal"
)

// Geometry of the dense family's dispatches.
const (
	// normValuesPerThread sizes an RMSNorm threadgroup: one thread per this
	// many elements of a row (2048 -> 256 threads), within [32, 1024].
	normValuesPerThread = 8
	// argmaxThreads is the one threadgroup that scans the logits.
	argmaxThreads = gpu.MaxThreadsPerThreadgroup
	// offsetAlign is the alignment Metal requires of a buffer binding's
	// offset.
	offsetAlign = 4
	// vectorAlign is the alignment of the float vectors that QMV reads with
	// float4 loads.
	vectorAlign = 16
	// codesAlign is the alignment of quantized codes, which QMV reads as
	// uint2.
	codesAlign = 8
	// maxMatrixDim bounds a quantized matrix's rows and columns (lm_head
	// has 248320 rows), so every count fits the kernels' 32-bit fields.
	maxMatrixDim = 1 << 24
	// maxElements bounds the float vectors an op takes, so element
	// indices fit the kernels' 32-bit arithmetic with room to spare.
	maxElements = 1 << 30
	// maxGridGroups bounds a dispatch's threadgroups per dimension, far
	// above any shape of the model (lm_head needs 31040).
	maxGridGroups = 1 << 24
)

// requireQMatrix checks m's shape, bit width and views for experts stacked
// matrices of its shape.
func requireQMatrix(op string, m *QMatrix, experts int) error {
	switch {
	case m.Rows < 1 || m.Cols < 1 || m.Cols%QMVGroupSize != 0 || m.Rows > maxMatrixDim || m.Cols > maxMatrixDim:
		return fmt.Errorf("%w: shaders: %s: matrix %dx%d: want 1..%d rows and a multiple of %d columns up to %[5]d", gpu.ErrInvalid, op, m.Rows, m.Cols, maxMatrixDim, QMVGroupSize)
	case m.GroupSize != QMVGroupSize:
		return fmt.Errorf("%w: shaders: %s: group size %d, want %d", gpu.ErrInvalid, op, m.GroupSize, QMVGroupSize)
	case m.Bits != 4 && m.Bits != 8:
		return fmt.Errorf("%w: shaders: %s: %d-bit codes, want 4 or 8", gpu.ErrInvalid, op, m.Bits)
	}
	// Bounds only: where the views sit was checked once, when the model
	// was loaded ([QMatrix.CheckAligned]).
	if err := requireView(op, "codes", m.Codes, experts*m.ExpertCodeBytes(), 1); err != nil {
		return err
	}
	if err := requireView(op, "scales", m.Scales, experts*m.ExpertScaleBytes(), 1); err != nil {
		return err
	}
	return requireView(op, "biases", m.Biases, experts*m.ExpertScaleBytes(), 1)
}

// Alignment the kernels need of a quantized matrix's views: codes are read
// as uint2 (8 bytes), scales and biases as bfloat at a binding offset,
// which Metal wants a multiple of 4. engine/checkpoint states the same
// rule for the shards' files (GPUCodesAlign, GPUScalesAlign).
const (
	CodesAlign  = codesAlign
	ScalesAlign = offsetAlign
)

// CheckAligned reports a view of m that the kernels cannot read where it
// is. A model checks each matrix once at load (and copies what is
// misaligned), so the ops check only bounds per dispatch.
func (m *QMatrix) CheckAligned() error {
	for _, v := range []struct {
		what  string
		off   int
		align int
	}{{"codes", m.Codes.Off, CodesAlign}, {"scales", m.Scales.Off, ScalesAlign}, {"biases", m.Biases.Off, ScalesAlign}} {
		if v.off%v.align != 0 {
			return fmt.Errorf("%w: shaders: %s offset %d is not a multiple of %d", gpu.ErrInvalid, v.what, v.off, v.align)
		}
	}
	return nil
}

// denseGroups is how many threadgroups of per items cover n items.
func denseGroups(op string, n, per int) (int, error) {
	g := (n + per - 1) / per
	if n < 1 || g > maxGridGroups {
		return 0, fmt.Errorf("%w: shaders: %s: %d items do not fit a grid", gpu.ErrInvalid, op, n)
	}
	return g, nil
}

// denseThreads is want threads, or fewer whole simd-groups where the
// compiled pipeline allows fewer (Metal may, for a register-hungry kernel);
// the kernels that use it take any threadgroup size.
func denseThreads(p gpu.Pipeline, want int) int {
	return max(gpu.SimdWidth, min(want, p.MaxThreads()/gpu.SimdWidth*gpu.SimdWidth))
}

// denseSize is a 1-D extent.
func denseSize(x int) gpu.Size { return gpu.Size{X: x, Y: 1, Z: 1} }

// Embed writes row token of the 4-bit embedding m, dequantized, to out
// (float32[m.Cols]). The token id is the uint32 at token, read on the GPU
// (the previous step's Argmax writes it there); an id outside the table
// yields NaNs.
func (k *Kernels) Embed(cb gpu.CommandBuffer, out View, m QMatrix, token View) error {
	return k.embedRows(cb, "Embed", out, m, token, 1)
}

// normThreads is the threadgroup size for rows of n elements.
func normThreads(n int) int {
	t := (n + normValuesPerThread - 1) / normValuesPerThread
	t = (t + gpu.SimdWidth - 1) / gpu.SimdWidth * gpu.SimdWidth
	return min(max(t, gpu.SimdWidth), gpu.MaxThreadsPerThreadgroup)
}

func normArgs(op string, n, rows int, eps float32) (RMSNormArgs, error) {
	if n < 1 || rows < 1 || rows > maxGridGroups || int64(n)*int64(rows) > maxElements {
		return RMSNormArgs{}, fmt.Errorf("%w: shaders: %s: %d rows of %d", gpu.ErrInvalid, op, rows, n)
	}
	if !(eps >= 0) {
		return RMSNormArgs{}, fmt.Errorf("%w: shaders: %s: eps %v", gpu.ErrInvalid, op, eps)
	}
	return RMSNormArgs{N: int32(n), Eps: eps, RowStride: uint64(n)}, nil
}

// RMSNorm writes out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for rows
// packed rows of n floats. The gain is w exactly (the MLX checkpoint
// already holds 1+w). out may be x.
func (k *Kernels) RMSNorm(cb gpu.CommandBuffer, out, x, w View, n, rows int, eps float32) error {
	const op = "RMSNorm"
	args, err := normArgs(op, n, rows, eps)
	if err != nil {
		return err
	}
	if err := requireViews(op, []viewBytes{{"out", out, 4 * n * rows}, {"x", x, 4 * n * rows}, {"w", w, 4 * n}}); err != nil {
		return err
	}
	p, err := k.Pipeline(rmsnormFile, "rmsnorm_f32")
	if err != nil {
		return err
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(rows), Threads: denseSize(denseThreads(p, normThreads(n))),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), x.Arg(1), w.Arg(2), out.Arg(3)},
	})
}

// qmvRowsPerGroup is how many rows one QMV threadgroup computes.
const qmvRowsPerGroup = QMVRows * QMVSimdgroups

// QMV writes out = m · x (float32[m.Rows] from float32[m.Cols]) for 4- and
// 8-bit m. x must start on 16 bytes.
func (k *Kernels) QMV(cb gpu.CommandBuffer, out View, m QMatrix, x View) error {
	return k.qmv(cb, "QMV", "qmv", out, m, x)
}

// qmv serves QMV and QMVAdd (kernel fn) under op's name.
func (k *Kernels) qmv(cb gpu.CommandBuffer, op, fn string, out View, m QMatrix, x View) error {
	if err := requireQMatrix(op, &m, 1); err != nil {
		return err
	}
	if err := requireView(op, "x", x, 4*m.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "out", out, 4*m.Rows, offsetAlign); err != nil {
		return err
	}
	groups, err := denseGroups(op, m.Rows, qmvRowsPerGroup)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvFile, fmt.Sprintf("%s_bf16_gs64_b%d", fn, m.Bits))
	if err != nil {
		return err
	}
	args := QMVArgs{Rows: int32(m.Rows), K: int32(m.Cols)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), m.Codes.Arg(1), m.Scales.Arg(2), m.Biases.Arg(3), x.Arg(4), out.Arg(5)},
	})
}

// QMVMulti writes outs[i] = ms[i] · x for up to QMVMultiMax matrices of one
// width and bit width that read the same x (attention's q/k/v, DeltaNet's
// four input projections, the router with the shared expert's gate), in
// one dispatch: its simd-groups cover the matrices' rows end to end. x
// must start on 16 bytes.
func (k *Kernels) QMVMulti(cb gpu.CommandBuffer, outs []View, ms []QMatrix, x View) error {
	d, err := k.qmvMulti("QMVMulti", "qmv_multi", outs, ms, x)
	if err != nil {
		return err
	}
	return cb.Dispatch(d)
}

// qmvMulti checks and builds the dispatch of QMVMulti's kernel fn.
func (k *Kernels) qmvMulti(op, fn string, outs []View, ms []QMatrix, x View) (*gpu.Dispatch, error) {
	if len(ms) < 1 || len(ms) > QMVMultiMax || len(outs) != len(ms) {
		return nil, fmt.Errorf("%w: shaders: %s: %d matrices and %d outputs: want 1..%d of each, as many outputs as matrices", gpu.ErrInvalid, op, len(ms), len(outs), QMVMultiMax)
	}
	args := QMVMultiArgs{K: int32(ms[0].Cols), Matrices: int32(len(ms))}
	blocks := 0
	for i := range ms {
		m := &ms[i]
		if err := requireQMatrix(fmt.Sprintf("%s matrix %d", op, i), m, 1); err != nil {
			return nil, err
		}
		if m.Cols != ms[0].Cols || m.Bits != ms[0].Bits {
			return nil, fmt.Errorf("%w: shaders: %s: matrix %d is %d columns at %d bits, matrix 0 %d at %d: want one width and bit width", gpu.ErrInvalid, op, i, m.Cols, m.Bits, ms[0].Cols, ms[0].Bits)
		}
		if err := requireView(op, fmt.Sprintf("out %d", i), outs[i], 4*m.Rows, offsetAlign); err != nil {
			return nil, err
		}
		blocks += (m.Rows + QMVRows - 1) / QMVRows
		args.Rows[i], args.BlockEnd[i] = int32(m.Rows), int32(blocks)
	}
	if err := requireView(op, "x", x, 4*ms[0].Cols, vectorAlign); err != nil {
		return nil, err
	}
	groups, err := denseGroups(op, blocks, QMVSimdgroups)
	if err != nil {
		return nil, err
	}
	p, err := k.Pipeline(qmvFile, fmt.Sprintf("%s_bf16_gs64_b%d", fn, ms[0].Bits))
	if err != nil {
		return nil, err
	}
	bind := []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), x.Arg(1)}
	for slot := range QMVMultiMax {
		// Every binding must be valid: unused slots repeat matrix 0, whose
		// blocks end before theirs would start.
		i := slot
		if i >= len(ms) {
			i = 0
		}
		bind = append(bind, ms[i].Codes.Arg(2+slot), ms[i].Scales.Arg(2+QMVMultiMax+slot),
			ms[i].Biases.Arg(2+2*QMVMultiMax+slot), outs[i].Arg(2+3*QMVMultiMax+slot))
	}
	return &gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(QMVThreads), Args: bind,
	}, nil
}

// requireSwiGLU checks that gate and up are 4-bit matrices (stacks) of one
// shape.
func requireSwiGLU(op string, gate, up *QMatrix) error {
	if err := requireQMatrix(op, gate, 1); err != nil {
		return err
	}
	if err := requireQMatrix(op, up, 1); err != nil {
		return err
	}
	if gate.Bits != 4 || up.Bits != 4 {
		return fmt.Errorf("%w: shaders: %s: %d- and %d-bit gate and up, want 4", gpu.ErrInvalid, op, gate.Bits, up.Bits)
	}
	if gate.Rows != up.Rows || gate.Cols != up.Cols {
		return fmt.Errorf("%w: shaders: %s: gate %dx%d, up %dx%d: want one shape", gpu.ErrInvalid, op, gate.Rows, gate.Cols, up.Rows, up.Cols)
	}
	return nil
}

// QMVSwiGLU writes out[r] = silu(gate[r] · x) * (up[r] · x) (float32[Rows])
// for 4-bit gate and up of one shape, in one dispatch whose simd-groups
// compute the same rows of both. x must start on 16 bytes.
func (k *Kernels) QMVSwiGLU(cb gpu.CommandBuffer, out View, gate, up QMatrix, x View) error {
	d, err := k.qmvSwiGLU("QMVSwiGLU", "qmv_swiglu_bf16_gs64_b4", out, gate, up, x)
	if err != nil {
		return err
	}
	return cb.Dispatch(d)
}

// qmvSwiGLU checks and builds the dispatch of QMVSwiGLU's kernel fn.
func (k *Kernels) qmvSwiGLU(op, fn string, out View, gate, up QMatrix, x View) (*gpu.Dispatch, error) {
	if err := requireSwiGLU(op, &gate, &up); err != nil {
		return nil, err
	}
	if err := requireView(op, "x", x, 4*gate.Cols, vectorAlign); err != nil {
		return nil, err
	}
	if err := requireView(op, "out", out, 4*gate.Rows, offsetAlign); err != nil {
		return nil, err
	}
	groups, err := denseGroups(op, gate.Rows, qmvRowsPerGroup)
	if err != nil {
		return nil, err
	}
	p, err := k.Pipeline(qmvFile, fn)
	if err != nil {
		return nil, err
	}
	args := QMVArgs{Rows: int32(gate.Rows), K: int32(gate.Cols)}
	return &gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), gate.Codes.Arg(1), gate.Scales.Arg(2), gate.Biases.Arg(3),
			up.Codes.Arg(4), up.Scales.Arg(5), up.Biases.Arg(6), x.Arg(7), out.Arg(8)},
	}, nil
}

// heldExperts is how many experts of m's shape its views hold: ids past
// them would read other tensors.
func heldExperts(m *QMatrix) int32 {
	n := min((m.Codes.Buf.Len()-m.Codes.Off)/m.ExpertCodeBytes(),
		(m.Scales.Buf.Len()-m.Scales.Off)/m.ExpertScaleBytes(),
		(m.Biases.Buf.Len()-m.Biases.Off)/m.ExpertScaleBytes())
	return int32(min(n, math.MaxInt32))
}

// QMVExpertsSwiGLU writes out[j] = silu(G[ids[j]] · x) * (U[ids[j]] · x)
// for j < slots in one dispatch, where G and U are the stacks of 4-bit
// experts of gate's and up's (one) shape laid out as for QMMExperts; out is
// float32[slots][gate.Rows], x (shared by all slots) starts on 16 bytes,
// ids is uint32[slots], read on the GPU. An id at or past the number of
// experts both stacks' views hold yields NaNs.
func (k *Kernels) QMVExpertsSwiGLU(cb gpu.CommandBuffer, out View, gate, up QMatrix, x View, ids View, slots int) error {
	d, err := k.expertsSwiGLU("QMVExpertsSwiGLU", "qmv_experts_swiglu_bf16_gs64_b4", out, gate, up, x, ids, slots)
	if err != nil {
		return err
	}
	return cb.Dispatch(d)
}

// expertsSwiGLU checks and builds the dispatch of the expert SwiGLU
// kernel fn over slots expert slots.
func (k *Kernels) expertsSwiGLU(op, fn string, out View, gate, up QMatrix, x View, ids View, slots int) (*gpu.Dispatch, error) {
	if slots < 1 || slots > maxGridGroups {
		return nil, fmt.Errorf("%w: shaders: %s: %d slots", gpu.ErrInvalid, op, slots)
	}
	if err := requireSwiGLU(op, &gate, &up); err != nil {
		return nil, err
	}
	if err := requireView(op, "x", x, 4*gate.Cols, vectorAlign); err != nil {
		return nil, err
	}
	if err := requireViews(op, []viewBytes{{"out", out, 4 * slots * gate.Rows}, {"ids", ids, 4 * slots}}); err != nil {
		return nil, err
	}
	groups, err := denseGroups(op, gate.Rows, qmvRowsPerGroup)
	if err != nil {
		return nil, err
	}
	p, err := k.Pipeline(qmvFile, fn)
	if err != nil {
		return nil, err
	}
	args := QMVArgs{Rows: int32(gate.Rows), K: int32(gate.Cols), Experts: min(heldExperts(&gate), heldExperts(&up))}
	return &gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: groups, Y: slots, Z: 1}, Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), gate.Codes.Arg(1), gate.Scales.Arg(2), gate.Biases.Arg(3),
			up.Codes.Arg(4), up.Scales.Arg(5), up.Biases.Arg(6), x.Arg(7), out.Arg(8), ids.Arg(9)},
	}, nil
}

// RouterTopK picks the topK largest of experts router logits into ids
// (uint32[topK], largest first, ties to the lower index) and writes their
// softmax probabilities over all experts (fp32) to weights (float32[topK]),
// renormalised to sum 1 when normalize.
func (k *Kernels) RouterTopK(cb gpu.CommandBuffer, ids, weights, logits View, experts, topK int, normalize bool) error {
	return k.routerTopKRows(cb, "RouterTopK", ids, weights, logits, experts, topK, normalize, 1)
}

// Argmax writes the index of the largest of n logits (the first on ties;
// SampleBadLogits if one is NaN or the largest is +Inf) to the uint32 at
// out, where the next decode step's Embed reads it.
func (k *Kernels) Argmax(cb gpu.CommandBuffer, out, logits View, n int) error {
	const op = "Argmax"
	if n < 1 || n > maxElements {
		return fmt.Errorf("%w: shaders: %s: %d values", gpu.ErrInvalid, op, n)
	}
	if err := requireViews(op, []viewBytes{{"logits", logits, 4 * n}, {"out", out, 4}}); err != nil {
		return err
	}
	p, err := k.Pipeline(argmaxFile, "argmax_f32")
	if err != nil {
		return err
	}
	args := ArgmaxArgs{N: int32(n)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(1), Threads: denseSize(denseThreads(p, argmaxThreads)),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), logits.Arg(1), out.Arg(2)},
	})
}
