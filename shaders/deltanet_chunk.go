package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

const deltaChunkFile = "deltanet_chunk.metal"

// DeltaMaxTaps bounds the conv kernel size DeltaConvRows keeps in
// registers (args.h DELTA_MAX_TAPS).
const DeltaMaxTaps = 8

// DeltaConvRows runs tokens rows through DeltaConv's conv and SiLU in
// order, in one dispatch: out and u are float32[tokens][c], the state and w
// as for DeltaConv. out may be u.
func (k *Kernels) DeltaConvRows(cb gpu.CommandBuffer, out, u, state, w View, c, kern, tokens int) error {
	const op = "DeltaConvRows"
	if c < 1 || kern < 2 || kern > DeltaMaxTaps {
		return fmt.Errorf("%w: shaders: %s: %d channels of %d taps (want at least 1 channel and 2..%d taps)", gpu.ErrInvalid, op, c, kern, DeltaMaxTaps)
	}
	if tokens < 1 || int64(tokens)*int64(c) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d tokens of %d channels", gpu.ErrInvalid, op, tokens, c)
	}
	if err := mixerViews(op, []viewFloats{{"out", out, tokens * c}, {"u", u, tokens * c}, {"state", state, c * (kern - 1)}, {"w", w, c * kern}}); err != nil {
		return err
	}
	p, err := k.Pipeline(deltaChunkFile, "delta_conv_rows_f32")
	if err != nil {
		return err
	}
	args := DeltaChunkArgs{Channels: int32(c), Taps: int32(kern), Tokens: int32(tokens)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: (c + DeltaConvThreads - 1) / DeltaConvThreads, Y: 1, Z: 1},
		Threads:  gpu.Size{X: DeltaConvThreads, Y: 1, Z: 1},
		Args:     []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), u.Arg(1), state.Arg(2), w.Arg(3), out.Arg(4)},
	})
}

// DeltaScan runs tokens rows through DeltaStep's recurrence and gated
// output in order, in one dispatch, the state held in registers for the
// whole chunk: o, z float32[tokens][ValueHeads][ValueDim]; qkv
// float32[tokens][d.Channels()] (DeltaConvRows' output); b, a
// float32[tokens][ValueHeads]; state, negA, dtBias and norm as for
// DeltaStep. Each token's arithmetic is DeltaStep's.
func (k *Kernels) DeltaScan(cb gpu.CommandBuffer, o, qkv, z, b, a, state, negA, dtBias, norm View, d DeltaShape, tokens int) error {
	const op = "DeltaScan"
	slices, tg, err := deltaCheck(op, d)
	if err != nil {
		return err
	}
	if tokens < 1 || int64(tokens)*int64(d.Channels()) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d tokens of %d channels", gpu.ErrInvalid, op, tokens, d.Channels())
	}
	hv := d.ValueHeads * d.ValueDim
	if err := mixerViews(op, []viewFloats{
		{"o", o, tokens * hv}, {"qkv", qkv, tokens * d.Channels()}, {"z", z, tokens * hv},
		{"b", b, tokens * d.ValueHeads}, {"a", a, tokens * d.ValueHeads},
		{"state", state, d.ValueHeads * d.KeyDim * d.ValueDim}, {"negA", negA, d.ValueHeads},
		{"dtBias", dtBias, d.ValueHeads}, {"norm", norm, d.ValueDim},
	}); err != nil {
		return err
	}
	p, err := k.Pipeline(deltaChunkFile, "delta_scan_f32", gpu.IntConstant(FCDelta, int32(d.KeyDim)))
	if err != nil {
		return err
	}
	args := DeltaScanArgs{
		KeyHeads: int32(d.KeyHeads), ValueHeads: int32(d.ValueHeads), ValueDim: int32(d.ValueDim),
		QScale: float32(1 / math.Sqrt(float64(d.KeyDim))), Eps: d.Eps, Tokens: int32(tokens),
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: d.ValueHeads, Y: 1, Z: 1},
		Threads:  gpu.Size{X: slices * d.ValueDim, Y: 1, Z: 1},
		Args: []gpu.Arg{
			gpu.BytesArg(0, Bytes(&args)), qkv.Arg(1), z.Arg(2), b.Arg(3), a.Arg(4), state.Arg(5),
			negA.Arg(6), dtBias.Arg(7), norm.Arg(8), o.Arg(9),
		},
		ThreadgroupMemory: []int{tg},
	})
}
