package shaders

import (
	"fmt"

	"petal/gpu"
)

// Decode-step forms of the dense ops with the op before or after folded in,
// so that a step has fewer dispatches and dependency levels: the RMSNorm
// that feeds a layer's first products is computed by the products
// themselves, the residual add rides on the product that makes the added
// vector, and the MoE's down projections end in the combine. Each computes
// what the unfused ops compute, bit for bit (qmv.metal says how); each
// takes its operands as one struct with named fields.

// Norm is an RMSNorm folded into the op that reads its output: the op reads
// its input x as RMSNorm(x) * W, every simd-group computing the norm's scale
// itself, summed as RMSNorm sums it, so the step needs no dispatch and no
// level for the norm and no buffer for its output.
type Norm struct {
	W   View // float32 gains, as many as the input's floats
	Eps float32
}

// check validates the norm over n inputs and returns its arguments.
func (nm Norm) check(op string, n int) (RMSNormArgs, error) {
	args, err := normArgs(op, n, 1, nm.Eps)
	if err != nil {
		return RMSNormArgs{}, err
	}
	if err := requireViews(op, []viewBytes{{"norm gains", nm.W, 4 * n}}); err != nil {
		return RMSNormArgs{}, err
	}
	// The threadgroup RMSNorm would run with: the scale keeps its
	// summation order.
	args.Threads = int32(normThreads(n))
	return args, nil
}

// normArgs binds the norm's arguments and gains at index and index+1.
func normBind(d *gpu.Dispatch, index int, args *RMSNormArgs, w View) {
	d.Args = append(d.Args, gpu.BytesArg(index, Bytes(args)), w.Arg(index+1))
}

// NormQMVMultiIO is NormQMVMulti's operands: Outs[i] = Ms[i] ·
// RMSNorm(X) * Norm.W.
type NormQMVMultiIO struct {
	Outs []View
	Ms   []QMatrix
	X    View // float32[Ms[0].Cols], on 16 bytes
	Norm Norm
}

// NormQMVMulti is QMVMulti over RMSNorm(X) * Norm.W: a layer's first
// products (attention's q/k/v, DeltaNet's input projections, the router
// with the shared expert's gate) with the norm before them folded in.
func (k *Kernels) NormQMVMulti(cb gpu.CommandBuffer, io NormQMVMultiIO) error {
	const op = "NormQMVMulti"
	d, err := k.qmvMulti(op, "qmv_multi_norm", io.Outs, io.Ms, io.X)
	if err != nil {
		return err
	}
	args, err := io.Norm.check(op, io.Ms[0].Cols)
	if err != nil {
		return err
	}
	normBind(d, 2+4*QMVMultiMax, &args, io.Norm.W)
	return cb.Dispatch(d)
}

// NormQMVSwiGLUIO is NormQMVSwiGLU's operands: Out = silu(Gate · x') *
// (Up · x'), x' = RMSNorm(X) * Norm.W.
type NormQMVSwiGLUIO struct {
	Out      View // float32[Gate.Rows]
	Gate, Up QMatrix
	X        View // float32[Gate.Cols], on 16 bytes
	Norm     Norm
}

// NormQMVSwiGLU is QMVSwiGLU over RMSNorm(X) * Norm.W (the shared expert
// reading the post-mixer norm).
func (k *Kernels) NormQMVSwiGLU(cb gpu.CommandBuffer, io NormQMVSwiGLUIO) error {
	const op = "NormQMVSwiGLU"
	d, err := k.qmvSwiGLU(op, "qmv_swiglu_norm_bf16_gs64_b4", io.Out, io.Gate, io.Up, io.X)
	if err != nil {
		return err
	}
	args, err := io.Norm.check(op, io.Gate.Cols)
	if err != nil {
		return err
	}
	normBind(d, 9, &args, io.Norm.W)
	return cb.Dispatch(d)
}

// RoutedSwiGLUIO is NormQMVExpertsSwiGLURouted's operands: the router's
// TopK choices of Experts from Logits into IDs and Weights, and Out[j] =
// SwiGLU of expert IDs[j]'s Gate and Up over RMSNorm(X) * Norm.W.
type RoutedSwiGLUIO struct {
	Out           View // float32[TopK][Gate.Rows]
	Gate, Up      QMatrix
	X             View // float32[Gate.Cols], on 16 bytes
	Norm          Norm
	IDs, Weights  View // uint32[TopK], float32[TopK]: written
	Logits        View // float32[Experts]
	Experts, TopK int
	NormalizeTopK bool
}

// NormQMVExpertsSwiGLURouted is RouterTopK followed by QMVExpertsSwiGLU
// over its TopK choices of RMSNorm(X) * Norm.W in one dispatch: every
// simd-group picks the experts from the router logits itself (as
// RouterTopK does, bit for bit), so the step saves a dependency level; IDs
// and Weights are written as RouterTopK writes them, for the down
// projection and the combine after.
func (k *Kernels) NormQMVExpertsSwiGLURouted(cb gpu.CommandBuffer, io RoutedSwiGLUIO) error {
	const op = "NormQMVExpertsSwiGLURouted"
	route, err := routerArgs(op, io.IDs, io.Weights, io.Logits, io.Experts, io.TopK, io.NormalizeTopK, 1)
	if err != nil {
		return err
	}
	d, err := k.expertsSwiGLU(op, "qmv_experts_swiglu_routed_norm_bf16_gs64_b4", io.Out, io.Gate, io.Up, io.X, io.IDs, io.TopK)
	if err != nil {
		return err
	}
	args, err := io.Norm.check(op, io.Gate.Cols)
	if err != nil {
		return err
	}
	d.Args = append(d.Args, gpu.BytesArg(10, Bytes(&route)), io.Logits.Arg(11), io.Weights.Arg(12))
	normBind(d, 13, &args, io.Norm.W)
	return cb.Dispatch(d)
}

// QMVAdd adds m · x to y in place (float32[m.Rows] += m · float32[m.Cols]):
// a mixer's output projection with the residual add after it folded in. x
// must start on 16 bytes.
func (k *Kernels) QMVAdd(cb gpu.CommandBuffer, y View, m QMatrix, x View) error {
	return k.qmv(cb, "QMVAdd", "qmv_add", y, m, x)
}

// MoEDownIO is MoEDownCombine's operands: the residual stream X gains
// sum_j Weights[j] * (Down[IDs[j]] · H_j) + sigmoid(SharedGate) *
// (SharedDown · SharedH).
type MoEDownIO struct {
	X          View    // float32[Down.Rows], updated in place
	Down       QMatrix // the stack of 4-bit routed experts' down projections
	H          View    // float32[TopK][Down.Cols], on 16 bytes: H_j
	IDs        View    // uint32[TopK], read on the GPU
	Weights    View    // float32[TopK]
	TopK       int
	SharedDown QMatrix // 4-bit, Down.Rows rows
	SharedH    View    // float32[SharedDown.Cols], on 16 bytes
	SharedGate View    // one float32 logit
}

// MoEDownCombine ends a MoE block in one dispatch: the routed experts' down
// projections, the shared expert's (QMV) and the combine with the residual
// add (without the next layer's norm, which its products fold in). Every simd-group computes its rows of all
// TopK experts and of the shared expert, so no output of a projection goes
// through memory. An id at or past the experts Down's views hold yields
// NaNs.
func (k *Kernels) MoEDownCombine(cb gpu.CommandBuffer, io MoEDownIO) error {
	const op = "MoEDownCombine"
	if io.TopK < 1 || io.TopK > MoEMaxTopK {
		return fmt.Errorf("%w: shaders: %s: %d experts: want 1..%d", gpu.ErrInvalid, op, io.TopK, MoEMaxTopK)
	}
	for _, m := range []struct {
		what string
		m    *QMatrix
	}{{"down", &io.Down}, {"shared down", &io.SharedDown}} {
		if err := requireQMatrix(op, m.m, 1); err != nil {
			return err
		}
		if m.m.Bits != 4 || m.m.Rows != io.Down.Rows {
			return fmt.Errorf("%w: shaders: %s: %s is %d-bit with %d rows: want 4-bit with %d", gpu.ErrInvalid, op, m.what, m.m.Bits, m.m.Rows, io.Down.Rows)
		}
	}
	if err := requireView(op, "h", io.H, 4*io.TopK*io.Down.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "shared h", io.SharedH, 4*io.SharedDown.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireViews(op, []viewBytes{{"x", io.X, 4 * io.Down.Rows}, {"ids", io.IDs, 4 * io.TopK},
		{"weights", io.Weights, 4 * io.TopK}, {"shared gate", io.SharedGate, 4}}); err != nil {
		return err
	}
	groups, err := denseGroups(op, io.Down.Rows, qmvRowsPerGroup)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvFile, "moe_down_combine_bf16_gs64_b4")
	if err != nil {
		return err
	}
	args := MoEDownArgs{Rows: int32(io.Down.Rows), K: int32(io.Down.Cols), Experts: heldExperts(&io.Down),
		TopK: int32(io.TopK), SharedK: int32(io.SharedDown.Cols)}
	d, s := &io.Down, &io.SharedDown
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), d.Codes.Arg(1), d.Scales.Arg(2), d.Biases.Arg(3),
			io.H.Arg(4), io.IDs.Arg(5), io.Weights.Arg(6), s.Codes.Arg(7), s.Scales.Arg(8), s.Biases.Arg(9),
			io.SharedH.Arg(10), io.SharedGate.Arg(11), io.X.Arg(12)},
	})
}
