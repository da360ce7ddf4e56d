package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

// The prefill family: quantized matrix times a block of token rows with the
// dequantization fused in (QMM), its grouped form over the routed experts
// (QMMExperts), and the GPU-side routing and combine around it
// (MoERoute, MoECombineRows).

// Kernel files of the prefill family.
const (
	qmmFile        = "qmm.metal"
	moeGroupedFile = "moe_grouped.metal"
)

// Tiling constants shared with args.h (a test checks they agree).
const (
	QMMBM         = 32
	QMMBMSmall    = 8
	QMMBN         = 64
	QMMBK         = 64
	QMMSimdgroups = 4
	QMMThreads    = QMMSimdgroups * 32
)

// RouteNone is the slot MoERoute gives a pair whose expert id is out of
// range.
const RouteNone = math.MaxUint32

// QMMSmallTokens and QMMExpertsSmallPairs are the largest passes the
// small-tile kernels (QMMBMSmall tokens) take: a few tokens in a QMMBM tile
// leave most of its simdgroup products on zero rows, which the CUDA
// driver's 8x8 matrices emulated over a warp pay in full (BenchmarkStepDecode35B:
// 2-8 decode rows cost like a 32-token chunk). The experts' bound is 8 rows
// at top-8 routing, whose pairs fall one or two to an expert.
const (
	QMMSmallTokens       = QMMBMSmall
	QMMExpertsSmallPairs = 8 * QMMBMSmall
)

// routeBlockBytes is the size of one block-map entry (a uint4).
const routeBlockBytes = 16

// requireTokens checks a token count against the kernels' 32-bit indices.
func requireTokens(op string, n, width int) error {
	if n < 1 || n > maxGridGroups || int64(n)*int64(width) > maxElements {
		return fmt.Errorf("%w: shaders: %s: %d rows of %d", gpu.ErrInvalid, op, n, width)
	}
	return nil
}

// QMM writes out = x · mᵀ for tokens rows: out is float32[tokens][m.Rows],
// x float32[tokens][m.Cols] starting on 16 bytes; m is 4- or 8-bit. The
// weights are dequantized tile by tile into threadgroup memory and read
// once per QMMBM tokens (QMMBMSmall for up to QMMSmallTokens).
func (k *Kernels) QMM(cb gpu.CommandBuffer, out View, m QMatrix, x View, tokens int) error {
	const op = "QMM"
	if err := requireQMatrix(op, &m, 1); err != nil {
		return err
	}
	if err := requireTokens(op, tokens, max(m.Rows, m.Cols)); err != nil {
		return err
	}
	if err := requireView(op, "x", x, 4*tokens*m.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "out", out, 4*tokens*m.Rows, offsetAlign); err != nil {
		return err
	}
	cols, err := denseGroups(op, m.Rows, QMMBN)
	if err != nil {
		return err
	}
	name, bm := "qmm", QMMBM
	if tokens <= QMMSmallTokens {
		name, bm = "qmm_small", QMMBMSmall
	}
	p, err := k.Pipeline(qmmFile, fmt.Sprintf("%s_bf16_gs64_b%d", name, m.Bits))
	if err != nil {
		return err
	}
	args := QMMArgs{Rows: int32(m.Rows), K: int32(m.Cols), Tokens: int32(tokens)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: cols, Y: (tokens + bm - 1) / bm, Z: 1}, Threads: denseSize(QMMThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), m.Codes.Arg(1), m.Scales.Arg(2), m.Biases.Arg(3), x.Arg(4), out.Arg(5)},
	})
}

// RouteCapacity is how many block-map entries MoERoute may fill for pairs
// (token, choice) pairs over experts experts: one per QMMBM slots plus one
// partial tile per expert that has any.
func RouteCapacity(pairs, experts int) int {
	return (pairs+QMMBM-1)/QMMBM + min(experts, pairs)
}

// MoERoute sorts pairs (token, choice) pairs by expert on the GPU: ids is
// uint32[pairs] (RouterTopK's output for each token, token-major); it
// writes mapping uint32[pairs] (slot -> pair, stable within an expert),
// slotOf uint32[pairs] (pair -> slot, RouteNone for an id at or past
// experts) and blocks, RouteCapacity(pairs, experts) uint4 entries (expert,
// first slot, end slot, 0) of at most QMMBM slots each, zero-padded, for
// QMMExperts. Nothing is read back: the capacity depends only on the shape.
func (k *Kernels) MoERoute(cb gpu.CommandBuffer, mapping, slotOf, blocks, ids View, pairs, experts int) error {
	const op = "MoERoute"
	if experts < 1 || experts > MoEMaxExperts || pairs < 1 || pairs > maxGridGroups {
		return fmt.Errorf("%w: shaders: %s: %d pairs over %d experts (at most %d)", gpu.ErrInvalid, op, pairs, experts, MoEMaxExperts)
	}
	capacity := RouteCapacity(pairs, experts)
	if err := requireViews(op, []viewBytes{{"ids", ids, 4 * pairs}, {"map", mapping, 4 * pairs}, {"slotOf", slotOf, 4 * pairs}, {"blocks", blocks, routeBlockBytes * capacity}}); err != nil {
		return err
	}
	if blocks.Off%routeBlockBytes != 0 {
		return fmt.Errorf("%w: shaders: %s: blocks offset %d is not a multiple of %d", gpu.ErrInvalid, op, blocks.Off, routeBlockBytes)
	}
	p, err := k.Pipeline(moeGroupedFile, "moe_route")
	if err != nil {
		return err
	}
	threads := min(max((experts+gpu.SimdWidth-1)/gpu.SimdWidth*gpu.SimdWidth, gpu.SimdWidth), p.MaxThreads()/gpu.SimdWidth*gpu.SimdWidth)
	args := MoERouteArgs{Experts: int32(experts), Pairs: int32(pairs), Capacity: int32(capacity)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(1), Threads: denseSize(threads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), ids.Arg(1), mapping.Arg(2), slotOf.Arg(3), blocks.Arg(4)},
	})
}

// QMMExperts runs the grouped expert GEMM over MoERoute's block map: for
// each block (e, m0, m1) and slot s in [m0, m1), out[s] = W_e · x_r with r =
// mapping[s] / xDiv (xDiv 0: r = s). m is one expert's 4-bit shape, the
// stack of experts following one another (expert e's codes at m.Codes +
// e*m.ExpertCodeBytes(), its scales and biases at + e*m.ExpertScaleBytes()); out is
// float32[pairs][m.Rows]; x float32[.][m.Cols] on 16 bytes, xRows rows of
// it; blocks holds RouteCapacity(pairs, experts) entries. Sentinel entries
// cost one early-exiting threadgroup each. Up to QMMExpertsSmallPairs
// pairs, each block runs in QMMBMSmall-slot tiles.
func (k *Kernels) QMMExperts(cb gpu.CommandBuffer, out View, m QMatrix, x View, xRows, xDiv int, blocks, mapping View, pairs, experts int) error {
	const op = "QMMExperts"
	if err := requireQMatrix(op, &m, 1); err != nil {
		return err
	}
	if m.Bits != 4 {
		return fmt.Errorf("%w: shaders: %s: %d-bit experts, want 4", gpu.ErrInvalid, op, m.Bits)
	}
	if experts < 1 || experts > MoEMaxExperts || xDiv < 0 || xDiv > MoEMaxTopK {
		return fmt.Errorf("%w: shaders: %s: %d experts, input divisor %d", gpu.ErrInvalid, op, experts, xDiv)
	}
	if err := requireTokens(op, pairs, max(m.Rows, m.Cols)); err != nil {
		return err
	}
	if err := requireTokens(op, xRows, m.Cols); err != nil {
		return err
	}
	// Slots index x directly without a divisor, and through the map with
	// one: either way the rows read must exist.
	if (xDiv == 0 && xRows < pairs) || (xDiv > 0 && xRows*xDiv < pairs) {
		return fmt.Errorf("%w: shaders: %s: %d input rows for %d pairs with divisor %d", gpu.ErrInvalid, op, xRows, pairs, xDiv)
	}
	capacity := RouteCapacity(pairs, experts)
	if err := requireView(op, "x", x, 4*xRows*m.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "out", out, 4*pairs*m.Rows, offsetAlign); err != nil {
		return err
	}
	if err := requireView(op, "blocks", blocks, routeBlockBytes*capacity, routeBlockBytes); err != nil {
		return err
	}
	if err := requireView(op, "map", mapping, 4*pairs, offsetAlign); err != nil {
		return err
	}
	// The experts the views hold: an id past them must not read other
	// tensors.
	held := min((m.Codes.Buf.Len()-m.Codes.Off)/m.ExpertCodeBytes(),
		(m.Scales.Buf.Len()-m.Scales.Off)/m.ExpertScaleBytes(),
		(m.Biases.Buf.Len()-m.Biases.Off)/m.ExpertScaleBytes())
	cols, err := denseGroups(op, m.Rows, QMMBN)
	if err != nil {
		return err
	}
	name := "qmm_experts_bf16_gs64_b4"
	if pairs <= QMMExpertsSmallPairs {
		name = "qmm_experts_small_bf16_gs64_b4"
	}
	p, err := k.Pipeline(qmmFile, name)
	if err != nil {
		return err
	}
	args := QMMArgs{Rows: int32(m.Rows), K: int32(m.Cols), Tokens: int32(pairs), XDiv: int32(xDiv), Experts: int32(min(held, experts))}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: cols, Y: capacity, Z: 1}, Threads: denseSize(QMMThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), m.Codes.Arg(1), m.Scales.Arg(2), m.Biases.Arg(3), x.Arg(4), out.Arg(5), blocks.Arg(6), mapping.Arg(7)},
	})
}

// MoECombineRows writes, for each of tokens rows, out[t] = sum_j
// weights[t*topK+j] * ys[slotOf[t*topK+j]] + sigmoid(sharedGate[t]) *
// shared[t] over h floats: ys float32[tokens*topK][h] in slot order,
// weights float32[tokens*topK], slotOf MoERoute's uint32[tokens*topK] (a
// RouteNone slot yields NaN), sharedGate float32[tokens], shared and out
// float32[tokens][h].
func (k *Kernels) MoECombineRows(cb gpu.CommandBuffer, out, ys, weights, slotOf, shared, sharedGate View, h, topK, tokens int) error {
	const op = "MoECombineRows"
	if h < 1 || topK < 1 || topK > MoEMaxTopK {
		return fmt.Errorf("%w: shaders: %s: %d experts of %d", gpu.ErrInvalid, op, topK, h)
	}
	if err := requireTokens(op, tokens*topK, h); err != nil {
		return err
	}
	if err := requireViews(op, []viewBytes{
		{"out", out, 4 * h * tokens}, {"ys", ys, 4 * h * topK * tokens}, {"weights", weights, 4 * topK * tokens},
		{"slotOf", slotOf, 4 * topK * tokens}, {"shared", shared, 4 * h * tokens}, {"sharedGate", sharedGate, 4 * tokens},
	}); err != nil {
		return err
	}
	groups, err := denseGroups(op, h, ElementwiseThreads)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(moeGroupedFile, "moe_combine_rows_f32")
	if err != nil {
		return err
	}
	args := MoEArgs{N: int32(h), K: int32(topK)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: groups, Y: tokens, Z: 1}, Threads: denseSize(ElementwiseThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), ys.Arg(1), weights.Arg(2), slotOf.Arg(3), shared.Arg(4), sharedGate.Arg(5), out.Arg(6)},
	})
}

// SwiGLU writes out = silu(gate) * up over n floats (rows of the experts'
// or the shared expert's gate and up products, packed).
func (k *Kernels) SwiGLU(cb gpu.CommandBuffer, out, gate, up View, n int) error {
	const op = "SwiGLU"
	if n < 1 || n > maxElements {
		return fmt.Errorf("%w: shaders: %s: %d elements", gpu.ErrInvalid, op, n)
	}
	if err := requireViews(op, []viewBytes{{"out", out, 4 * n}, {"gate", gate, 4 * n}, {"up", up, 4 * n}}); err != nil {
		return err
	}
	groups, err := denseGroups(op, n, ElementwiseThreads)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(moeGroupedFile, "swiglu_f32")
	if err != nil {
		return err
	}
	args := MoEArgs{N: int32(n)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(ElementwiseThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), gate.Arg(1), up.Arg(2), out.Arg(3)},
	})
}

// AddRMSNormRows adds delta to the residual stream x in place over rows
// packed rows of n floats, one threadgroup per row: x[r] += delta[r];
// out[r] = RMSNorm(x[r]) * w. out must not be x (it may be delta).
func (k *Kernels) AddRMSNormRows(cb gpu.CommandBuffer, x, delta, out, w View, n, rows int, eps float32) error {
	const op = "AddRMSNormRows"
	args, err := normArgs(op, n, rows, eps)
	if err != nil {
		return err
	}
	if x.Buf == out.Buf && x.Off == out.Off {
		return fmt.Errorf("%w: shaders: %s: out is x", gpu.ErrInvalid, op)
	}
	if err := requireViews(op, []viewBytes{{"x", x, 4 * n * rows}, {"delta", delta, 4 * n * rows}, {"out", out, 4 * n * rows}, {"w", w, 4 * n}}); err != nil {
		return err
	}
	p, err := k.Pipeline(rmsnormFile, "add_rmsnorm_f32")
	if err != nil {
		return err
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(rows), Threads: denseSize(denseThreads(p, normThreads(n))),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), x.Arg(1), delta.Arg(2), w.Arg(3), out.Arg(4)},
	})
}
