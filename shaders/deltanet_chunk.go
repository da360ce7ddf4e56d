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

// DeltaConvRows runs tokens rows through DeltaStepConv's conv and SiLU in
// order, shifting each into the state, in one dispatch: out and u are
// float32[tokens][c], the state float32[c][kern-1] (the last kern-1 inputs
// per channel, oldest first), w float32[c][kern]. out may be u.
func (k *Kernels) DeltaConvRows(cb gpu.CommandBuffer, out, u, state, w View, c, kern, tokens int) error {
	const op = "DeltaConvRows"
	if c < 1 || kern < 2 || kern > DeltaMaxTaps {
		return fmt.Errorf("%w: shaders: %s: %d channels of %d taps (want at least 1 channel and 2..%d taps)", gpu.ErrInvalid, op, c, kern, DeltaMaxTaps)
	}
	if tokens < 1 || int64(tokens)*int64(c) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d tokens of %d channels", gpu.ErrInvalid, op, tokens, c)
	}
	if err := requireViews(op, []viewBytes{f32("out", out, tokens*c), f32("u", u, tokens*c), f32("state", state, c*(kern-1)), f32("w", w, c*kern)}); err != nil {
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

// DeltaChunk is the token block of DeltaScan's chunked recurrence
// (args.h DELTA_CHUNK).
const DeltaChunk = 64

// DeltaScan's other tiling constants, mirrors of args.h: the largest key
// dim it keeps in registers, the prep kernel's threads, and the scan's
// simd-groups per threadgroup at most.
const (
	DeltaChunkMaxKeyDim      = 128
	DeltaChunkPrepThreads    = 256
	DeltaChunkScanSimdgroups = 4
	DeltaChunkScanThreads    = DeltaChunkScanSimdgroups * 32
)

// DeltaScanScratch is the float32 count of the scratch DeltaScan needs for
// tokens rows of shape d: per value head and block of DeltaChunk tokens,
// three [DeltaChunk][KeyDim] and two [DeltaChunk][DeltaChunk] matrices and
// one decay.
func DeltaScanScratch(d DeltaShape, tokens int) int {
	blocks := (tokens + DeltaChunk - 1) / DeltaChunk
	return d.ValueHeads * blocks * (3*DeltaChunk*d.KeyDim + 2*DeltaChunk*DeltaChunk + 1)
}

// DeltaScanIO is DeltaScan's operands: DeltaStepConv's step's, O, QKV
// (DeltaConvRows' output), Z, B and A holding Tokens rows, and DeltaScanScratch(Shape,
// Tokens) floats of scratch.
type DeltaScanIO struct {
	DeltaStepIO
	Scratch View
	Tokens  int
}

// DeltaScan runs io.Tokens rows through DeltaStepConv's recurrence and gated
// output in the chunked form: blocks of DeltaChunk tokens, each from the
// state the block starts with, the fp32 state carried across blocks and
// held in registers for the whole run (loaded and stored once). It encodes
// three dispatches with barriers between them. The key and value dims must
// be multiples of 8 (the simdgroup matrices), the key dim at most 128.
func (k *Kernels) DeltaScan(cb gpu.CommandBuffer, io DeltaScanIO) error {
	const op = "DeltaScan"
	d, tokens := io.Shape, io.Tokens
	if err := deltaScanCheck(op, d); err != nil {
		return err
	}
	switch {
	case tokens < 1 || int64(tokens+DeltaChunk)*int64(d.Channels()) > math.MaxInt32:
		return fmt.Errorf("%w: shaders: %s: %d tokens of %d channels", gpu.ErrInvalid, op, tokens, d.Channels())
	case int64(DeltaScanScratch(d, tokens)) > math.MaxInt32 || int64(d.ValueHeads)*int64(d.KeyDim)*int64(d.ValueDim) > math.MaxInt32:
		return fmt.Errorf("%w: shaders: %s: %d tokens of %d value heads is too large", gpu.ErrInvalid, op, tokens, d.ValueHeads)
	}
	hv := d.ValueHeads * d.ValueDim
	if err := requireViews(op, []viewBytes{
		f32("o", io.O, tokens*hv), f32("qkv", io.QKV, tokens*d.Channels()), f32("z", io.Z, tokens*hv),
		f32("b", io.B, tokens*d.ValueHeads), f32("a", io.A, tokens*d.ValueHeads),
		f32("state", io.State, d.ValueHeads*d.KeyDim*d.ValueDim), f32("negA", io.NegA, d.ValueHeads),
		f32("dtBias", io.DtBias, d.ValueHeads), f32("norm", io.Norm, d.ValueDim),
		f32("scratch", io.Scratch, DeltaScanScratch(d, tokens)),
	}); err != nil {
		return err
	}
	keyDim := gpu.IntConstant(FCDelta, int32(d.KeyDim))
	prep, err := k.Pipeline(deltaChunkFile, "delta_chunk_prep_f32", keyDim)
	if err != nil {
		return err
	}
	scan, err := k.Pipeline(deltaChunkFile, "delta_chunk_scan_f32", keyDim)
	if err != nil {
		return err
	}
	gated, err := k.Pipeline(deltaChunkFile, "delta_gated_norm_rows_f32", keyDim)
	if err != nil {
		return err
	}
	blocks := (tokens + DeltaChunk - 1) / DeltaChunk
	args := DeltaScanArgs{
		KeyHeads: int32(d.KeyHeads), ValueHeads: int32(d.ValueHeads), ValueDim: int32(d.ValueDim),
		QScale: float32(1 / math.Sqrt(float64(d.KeyDim))), Eps: d.Eps, Tokens: int32(tokens), Blocks: int32(blocks),
	}
	argBytes := gpu.BytesArg(0, Bytes(&args))
	if err := cb.Dispatch(&gpu.Dispatch{
		Pipeline: prep,
		Groups:   gpu.Size{X: d.ValueHeads, Y: blocks, Z: 1},
		Threads:  gpu.Size{X: DeltaChunkPrepThreads, Y: 1, Z: 1},
		Args:     []gpu.Arg{argBytes, io.QKV.Arg(1), io.B.Arg(2), io.A.Arg(3), io.NegA.Arg(4), io.DtBias.Arg(5), io.Scratch.Arg(6)},
	}); err != nil {
		return err
	}
	cb.Barrier()
	// Simd-groups of 8 value columns per threadgroup: the most, up to
	// DeltaChunkScanSimdgroups, that divide the value dim evenly.
	sgs := DeltaChunkScanSimdgroups
	for (d.ValueDim/8)%sgs != 0 {
		sgs /= 2
	}
	if err := cb.Dispatch(&gpu.Dispatch{
		Pipeline: scan,
		Groups:   gpu.Size{X: d.ValueHeads, Y: d.ValueDim / 8 / sgs, Z: 1},
		Threads:  gpu.Size{X: 32 * sgs, Y: 1, Z: 1},
		Args:     []gpu.Arg{argBytes, io.QKV.Arg(1), io.Scratch.Arg(2), io.State.Arg(3), io.O.Arg(4)},
	}); err != nil {
		return err
	}
	cb.Barrier()
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: gated,
		Groups:   gpu.Size{X: d.ValueHeads, Y: tokens, Z: 1},
		Threads:  gpu.Size{X: (d.ValueDim + 31) / 32 * 32, Y: 1, Z: 1},
		Args:     []gpu.Arg{argBytes, io.O.Arg(1), io.Z.Arg(2), io.Norm.Arg(3)},
	})
}

// deltaScanCheck reports why d is not a shape DeltaScan's kernels take.
func deltaScanCheck(op string, d DeltaShape) error {
	if err := deltaHeadsEps(op, d); err != nil {
		return err
	}
	switch {
	case d.KeyDim < 8 || d.KeyDim%8 != 0 || d.KeyDim > DeltaChunkMaxKeyDim:
		return fmt.Errorf("%w: shaders: %s: key dim %d (want a multiple of 8 up to %d)", gpu.ErrInvalid, op, d.KeyDim, DeltaChunkMaxKeyDim)
	case d.ValueDim < 8 || d.ValueDim%8 != 0 || d.ValueDim > gpu.MaxThreadsPerThreadgroup:
		return fmt.Errorf("%w: shaders: %s: value dim %d (want a multiple of 8 up to %d)", gpu.ErrInvalid, op, d.ValueDim, gpu.MaxThreadsPerThreadgroup)
	}
	return nil
}

// Check reports why the DeltaNet kernels cannot run shape d: DeltaStepConv
// and DeltaConvShift for decode, DeltaConvRows and DeltaScan for prefill.
func (d DeltaShape) Check() error {
	const op = "DeltaNet"
	if d.ConvKernel < 2 || d.ConvKernel > DeltaMaxTaps {
		return fmt.Errorf("%w: shaders: %s: conv kernel %d (want 2..%d taps)", gpu.ErrInvalid, op, d.ConvKernel, DeltaMaxTaps)
	}
	if _, _, err := deltaCheck(op, d); err != nil {
		return err
	}
	return deltaScanCheck(op, d)
}
