package shaders

import (
	"fmt"

	"petal/gpu"
)

// Multi-row matrix-vector products, for a batched step's decode rows (one
// token each, up to QMVRowsMaxTokens of them): each threadgroup loads its
// weight words once and applies them to every row, so the step reads its
// weights as one row's decode step does, where the token-tiled GEMMs
// (QMM) pay for tiles the few rows leave empty.

const qmvRowsFile = "qmv_rows.metal"

// requireRowCount checks a multi-row product's row count.
func requireRowCount(op string, tokens int) error {
	if tokens < 1 || tokens > QMVRowsMaxTokens {
		return fmt.Errorf("%w: shaders: %s: %d rows, want 1..%d", gpu.ErrInvalid, op, tokens, QMVRowsMaxTokens)
	}
	return nil
}

// QMVRows writes out[t] = m · x[t] for t < tokens (out float32[tokens][m.Rows],
// x float32[tokens][m.Cols] starting on 16 bytes), 4- or 8-bit m, in one
// dispatch that reads m once.
func (k *Kernels) QMVRows(cb gpu.CommandBuffer, out View, m QMatrix, x View, tokens int) error {
	const op = "QMVRows"
	if err := requireRowCount(op, tokens); err != nil {
		return err
	}
	if err := requireQMatrix(op, &m, 1); err != nil {
		return err
	}
	if err := requireView(op, "x", x, 4*tokens*m.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "out", out, 4*tokens*m.Rows, offsetAlign); err != nil {
		return err
	}
	groups, err := denseGroups(op, m.Rows, qmvRowsPerGroup)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvRowsFile, fmt.Sprintf("qmv_rows_bf16_gs64_b%d", m.Bits))
	if err != nil {
		return err
	}
	args := QMMArgs{Rows: int32(m.Rows), K: int32(m.Cols), Tokens: int32(tokens)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), m.Codes.Arg(1), m.Scales.Arg(2), m.Biases.Arg(3), x.Arg(4), out.Arg(5)},
	})
}

// QMVRowsSwiGLU writes out[t] = silu(gate · x[t]) * (up · x[t]) for t <
// tokens (the shared expert's gate and up of every row), 4-bit gate and up
// of one shape, in one dispatch that reads them once.
func (k *Kernels) QMVRowsSwiGLU(cb gpu.CommandBuffer, out View, gate, up QMatrix, x View, tokens int) error {
	const op = "QMVRowsSwiGLU"
	if err := requireRowCount(op, tokens); err != nil {
		return err
	}
	if err := requireSwiGLU(op, &gate, &up); err != nil {
		return err
	}
	if err := requireView(op, "x", x, 4*tokens*gate.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "out", out, 4*tokens*gate.Rows, offsetAlign); err != nil {
		return err
	}
	groups, err := denseGroups(op, gate.Rows, qmvRowsPerGroup)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvRowsFile, "qmv_rows_swiglu_bf16_gs64_b4")
	if err != nil {
		return err
	}
	args := QMMArgs{Rows: int32(gate.Rows), K: int32(gate.Cols), Tokens: int32(tokens)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(groups), Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), gate.Codes.Arg(1), gate.Scales.Arg(2), gate.Biases.Arg(3),
			up.Codes.Arg(4), up.Scales.Arg(5), up.Biases.Arg(6), x.Arg(7), out.Arg(8)},
	})
}

// RowsExpertsIO is QMVRowsExpertsSwiGLURouted's operands: the routed
// experts of Tokens rows, TopK choices each, pair p = row*TopK + choice.
type RowsExpertsIO struct {
	Out           View    // float32[Tokens*TopK][Gate.Rows]
	Gate, Up      QMatrix // the 4-bit expert stacks, one shape
	X             View    // float32[Tokens][Gate.Cols], on 16 bytes
	IDs, Weights  View    // uint32[Tokens*TopK], float32[Tokens*TopK]: written
	Logits        View    // float32[Tokens][Experts]: the rows' router logits
	Experts       int
	TopK          int
	NormalizeTopK bool
	Tokens        int
}

// QMVRowsExpertsSwiGLURouted is RouterTopKRows followed by Out[p] =
// silu(G[IDs[p]] · X[p/TopK]) * (U[IDs[p]] · X[p/TopK]) for every pair p,
// in one dispatch: every simd-group picks its row's experts from the
// router logits itself (router.h, as RouterTopKRows picks them, bit for
// bit), so the step saves a level; IDs and Weights are written as
// RouterTopKRows writes them, for MoERowsDownCombine. An id at or past
// the experts both stacks' views hold yields NaNs.
func (k *Kernels) QMVRowsExpertsSwiGLURouted(cb gpu.CommandBuffer, io RowsExpertsIO) error {
	const op = "QMVRowsExpertsSwiGLURouted"
	if err := requireRowCount(op, io.Tokens); err != nil {
		return err
	}
	route, err := routerArgs(op, io.IDs, io.Weights, io.Logits, io.Experts, io.TopK, io.NormalizeTopK, io.Tokens)
	if err != nil {
		return err
	}
	pairs := io.Tokens * io.TopK
	if err := requireSwiGLU(op, &io.Gate, &io.Up); err != nil {
		return err
	}
	if err := requireView(op, "x", io.X, 4*io.Tokens*io.Gate.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireViews(op, []viewBytes{{"out", io.Out, 4 * pairs * io.Gate.Rows}}); err != nil {
		return err
	}
	groups, err := denseGroups(op, io.Gate.Rows, qmvRowsPerGroup)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvRowsFile, "qmv_rows_experts_swiglu_routed_bf16_gs64_b4")
	if err != nil {
		return err
	}
	args := QMMArgs{Rows: int32(io.Gate.Rows), K: int32(io.Gate.Cols), Tokens: int32(pairs), XDiv: int32(io.TopK),
		Experts: min(heldExperts(&io.Gate), heldExperts(&io.Up))}
	g, u := &io.Gate, &io.Up
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: groups, Y: pairs, Z: 1}, Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), g.Codes.Arg(1), g.Scales.Arg(2), g.Biases.Arg(3),
			u.Codes.Arg(4), u.Scales.Arg(5), u.Biases.Arg(6), io.X.Arg(7), io.Out.Arg(8), io.IDs.Arg(9),
			gpu.BytesArg(10, Bytes(&route)), io.Logits.Arg(11), io.Weights.Arg(12)},
	})
}

// MoERowsDownIO is MoERowsDownCombine's operands, for Tokens rows.
type MoERowsDownIO struct {
	Out        View    // float32[Tokens][Down.Rows]: each row's MoE output
	Down       QMatrix // the 4-bit expert stack
	H          View    // float32[Tokens*TopK][Down.Cols], on 16 bytes: pair p's SwiGLU output
	IDs        View    // uint32[Tokens*TopK], read on the GPU
	Weights    View    // float32[Tokens*TopK]
	TopK       int
	SharedDown QMatrix // 4-bit, Down.Rows rows
	SharedH    View    // float32[Tokens][SharedDown.Cols], on 16 bytes
	SharedGate View    // float32[Tokens]: each row's shared-expert gate logit
	Tokens     int
}

// MoERowsDownCombine ends the MoE block of Tokens rows in one dispatch:
// each row's routed experts' down projections and the shared expert's,
// combined as MoECombineRows combines them (into Out, which the layer's
// end adds to the stream). An id at or past the experts Down's views hold
// yields NaNs.
func (k *Kernels) MoERowsDownCombine(cb gpu.CommandBuffer, io MoERowsDownIO) error {
	const op = "MoERowsDownCombine"
	if err := requireRowCount(op, io.Tokens); err != nil {
		return err
	}
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
	pairs := io.Tokens * io.TopK
	if err := requireView(op, "h", io.H, 4*pairs*io.Down.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireView(op, "shared h", io.SharedH, 4*io.Tokens*io.SharedDown.Cols, vectorAlign); err != nil {
		return err
	}
	if err := requireViews(op, []viewBytes{{"out", io.Out, 4 * io.Tokens * io.Down.Rows}, {"ids", io.IDs, 4 * pairs},
		{"weights", io.Weights, 4 * pairs}, {"shared gate", io.SharedGate, 4 * io.Tokens}}); err != nil {
		return err
	}
	groups, err := denseGroups(op, io.Down.Rows, qmvRowsPerGroup)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvRowsFile, "moe_rows_down_combine_bf16_gs64_b4")
	if err != nil {
		return err
	}
	args := MoEDownArgs{Rows: int32(io.Down.Rows), K: int32(io.Down.Cols), Experts: heldExperts(&io.Down),
		TopK: int32(io.TopK), SharedK: int32(io.SharedDown.Cols)}
	d, s := &io.Down, &io.SharedDown
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: groups, Y: io.Tokens, Z: 1}, Threads: denseSize(QMVThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), d.Codes.Arg(1), d.Scales.Arg(2), d.Biases.Arg(3),
			io.H.Arg(4), io.IDs.Arg(5), io.Weights.Arg(6), s.Codes.Arg(7), s.Scales.Arg(8), s.Biases.Arg(9),
			io.SharedH.Arg(10), io.SharedGate.Arg(11), io.Out.Arg(12)},
	})
}
