package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

const deltaNetFile = "deltanet.metal"

// deltaSlices is how many row slices delta_step_conv_f32 splits a state column
// into: one thread each.
func deltaSlices(keyDim int) int {
	return keyDim / min(keyDim, DeltaRowsPerThread)
}

// deltaHeadsEps reports why d's heads or norm eps are not ones the
// DeltaNet kernels take.
func deltaHeadsEps(op string, d DeltaShape) error {
	switch {
	case d.KeyHeads < 1 || d.ValueHeads < 1 || d.ValueHeads%d.KeyHeads != 0:
		return fmt.Errorf("%w: shaders: %s: %d value heads do not share %d key heads evenly", gpu.ErrInvalid, op, d.ValueHeads, d.KeyHeads)
	case !(d.Eps >= 0) || math.IsInf(float64(d.Eps), 0):
		return fmt.Errorf("%w: shaders: %s: norm eps %v", gpu.ErrInvalid, op, d.Eps)
	}
	return nil
}

// deltaCheck reports why d is not a shape delta_step_conv_f32 takes; else it
// gives its row slices per state column and threadgroup memory in bytes.
func deltaCheck(op string, d DeltaShape) (slices, tg int, err error) {
	if err := deltaHeadsEps(op, d); err != nil {
		return 0, 0, err
	}
	switch {
	case d.KeyDim < 1 || (d.KeyDim > DeltaRowsPerThread && d.KeyDim%DeltaRowsPerThread != 0):
		return 0, 0, fmt.Errorf("%w: shaders: %s: key dim %d is neither at most %d nor a multiple of it", gpu.ErrInvalid, op, d.KeyDim, DeltaRowsPerThread)
	case d.ValueDim < 1 || d.ValueDim*deltaSlices(d.KeyDim) > DeltaStepMaxThreads:
		return 0, 0, fmt.Errorf("%w: shaders: %s: key dim %d and value dim %d take %d row slices of %d threads, more than %d", gpu.ErrInvalid, op, d.KeyDim, d.ValueDim, deltaSlices(d.KeyDim), d.ValueDim, DeltaStepMaxThreads)
	case int64(d.ValueHeads)*int64(d.KeyDim)*int64(d.ValueDim) > math.MaxInt32:
		return 0, 0, fmt.Errorf("%w: shaders: %s: state of %dx%dx%d is too large", gpu.ErrInvalid, op, d.ValueHeads, d.KeyDim, d.ValueDim)
	}
	slices = deltaSlices(d.KeyDim)
	// q and k of the head, then the kv and o slices; Metal wants a multiple
	// of 16 bytes.
	tg = ((2*d.KeyDim+2*slices*d.ValueDim)*4 + 15) / 16 * 16
	if tg > gpu.MaxThreadgroupMemory {
		return 0, 0, fmt.Errorf("%w: shaders: %s: key dim %d and value dim %d need %d bytes of threadgroup memory", gpu.ErrInvalid, op, d.KeyDim, d.ValueDim, tg)
	}
	return slices, tg, nil
}

// DeltaStepIO is the operands of one DeltaNet token's step, float32
// throughout; DeltaScan's hold rows of its per-token ones (O, QKV, Z, B, A).
type DeltaStepIO struct {
	O            View // written: [ValueHeads][ValueDim], the gated output
	QKV          View // [Channels()]: q | k | v, the conv's input for DeltaStepConv (DeltaConvRows' output for DeltaScan)
	Z            View // [ValueHeads][ValueDim]
	B, A         View // [ValueHeads]
	State        View // [ValueHeads][KeyDim][ValueDim], updated
	NegA, DtBias View // [ValueHeads]
	Norm         View // [ValueDim]
	Shape        DeltaShape
}

// DeltaStepConvIO is DeltaStepConv's operands: the step's, QKV being the
// conv's input (the qkv projection), and the conv's.
type DeltaStepConvIO struct {
	DeltaStepIO
	ConvState View // [Channels()][ConvKernel-1], read only
	ConvW     View // [Channels()][ConvKernel]
}

// DeltaStepConv runs one token through the causal depthwise conv with
// SiLU, qkv[c] = silu(sum_{j<kern-1} ConvW[c][j] * ConvState[c][j] +
// ConvW[c][kern-1] * QKV[c]), then advances each value head's recurrent
// state by one token and writes its gated output: q, k l2-normalised (q
// also by 1/sqrt(KeyDim)), beta = sigmoid(B), alpha = exp(NegA *
// softplus(A + DtBias)); S = alpha S; S += k (x) beta (v - S^T k); O =
// RMSNorm(S^T q) * Norm * silu(Z). The step's threadgroups compute the
// conv outputs they read themselves and leave the conv state as it was:
// DeltaConvShift must then shift QKV into it, in a later level (every
// value head sharing a key head reads that head's channels of the old
// state).
func (k *Kernels) DeltaStepConv(cb gpu.CommandBuffer, io DeltaStepConvIO) error {
	const op = "DeltaStepConv"
	d, err := k.deltaStep(op, io.DeltaStepIO)
	if err != nil {
		return err
	}
	c, kern := io.Shape.Channels(), io.Shape.ConvKernel
	if kern < 2 || c > math.MaxInt32/kern {
		return fmt.Errorf("%w: shaders: %s: %d channels of %d taps (want at least 2 taps)", gpu.ErrInvalid, op, c, kern)
	}
	if err := requireViews(op, []viewBytes{f32("conv state", io.ConvState, c*(kern-1)), f32("conv w", io.ConvW, c*kern)}); err != nil {
		return err
	}
	d.Args = append(d.Args, io.ConvState.Arg(10), io.ConvW.Arg(11))
	return cb.Dispatch(d)
}

// deltaStep checks io's step operands and builds the dispatch of
// delta_step_conv_f32 without the conv's.
func (k *Kernels) deltaStep(op string, io DeltaStepIO) (*gpu.Dispatch, error) {
	d := io.Shape
	slices, tg, err := deltaCheck(op, d)
	if err != nil {
		return nil, err
	}
	hv := d.ValueHeads * d.ValueDim
	if err := requireViews(op, []viewBytes{
		f32("o", io.O, hv), f32("qkv", io.QKV, d.Channels()), f32("z", io.Z, hv), f32("b", io.B, d.ValueHeads), f32("a", io.A, d.ValueHeads),
		f32("state", io.State, d.ValueHeads*d.KeyDim*d.ValueDim), f32("negA", io.NegA, d.ValueHeads),
		f32("dtBias", io.DtBias, d.ValueHeads), f32("norm", io.Norm, d.ValueDim),
	}); err != nil {
		return nil, err
	}
	p, err := k.Pipeline(deltaNetFile, "delta_step_conv_f32", gpu.IntConstant(FCDelta, int32(d.KeyDim)))
	if err != nil {
		return nil, err
	}
	args := DeltaStepArgs{
		KeyHeads: int32(d.KeyHeads), ValueHeads: int32(d.ValueHeads), ValueDim: int32(d.ValueDim),
		QScale: float32(1 / math.Sqrt(float64(d.KeyDim))), Eps: d.Eps, Taps: int32(d.ConvKernel),
	}
	return &gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: d.ValueHeads, Y: 1, Z: 1},
		Threads:  gpu.Size{X: slices * d.ValueDim, Y: 1, Z: 1},
		Args: []gpu.Arg{
			gpu.BytesArg(0, Bytes(&args)), io.QKV.Arg(1), io.Z.Arg(2), io.B.Arg(3), io.A.Arg(4), io.State.Arg(5),
			io.NegA.Arg(6), io.DtBias.Arg(7), io.Norm.Arg(8), io.O.Arg(9),
		},
		ThreadgroupMemory: []int{tg},
	}, nil
}

// DeltaConvShift is the conv's state update: the state of c channels of
// kern taps (the last kern-1 inputs per channel, oldest first) shifts u in. It follows DeltaStepConv, in a level
// of its own or beside the layer's output projection.
func (k *Kernels) DeltaConvShift(cb gpu.CommandBuffer, u, state View, c, kern int) error {
	const op = "DeltaConvShift"
	if c < 1 || kern < 2 || c > math.MaxInt32/kern {
		return fmt.Errorf("%w: shaders: %s: %d channels of %d taps (want at least 1 channel and 2 taps)", gpu.ErrInvalid, op, c, kern)
	}
	if err := requireViews(op, []viewBytes{f32("u", u, c), f32("state", state, c*(kern-1))}); err != nil {
		return err
	}
	p, err := k.Pipeline(deltaNetFile, "delta_conv_shift_f32")
	if err != nil {
		return err
	}
	args := DeltaConvArgs{Channels: int32(c), Taps: int32(kern)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: (c + DeltaConvThreads - 1) / DeltaConvThreads, Y: 1, Z: 1},
		Threads:  gpu.Size{X: DeltaConvThreads, Y: 1, Z: 1},
		Args:     []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), u.Arg(1), state.Arg(2)},
	})
}
