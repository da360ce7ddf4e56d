package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

const attentionFile = "attention.metal"

// KVElementBytes is the size of one cached K or V element: the caches are
// IEEE fp16 (attention.metal says why), converted on write by AttnPrep and
// AttnPrepRows and widened to fp32 by AttnDecode and AttnPrefill.
const KVElementBytes = 2

// maxCacheElements bounds a KV cache's elements so that every index the
// attention kernels form fits the 32-bit arithmetic they start from.
const maxCacheElements = math.MaxInt32

// attnCheck reports why a is not a shape the attention kernels take.
func attnCheck(op string, a AttnShape) error {
	switch {
	case a.Heads < 1 || a.KVHeads < 1 || a.Heads%a.KVHeads != 0:
		return fmt.Errorf("%w: shaders: %s: %d query heads do not share %d KV heads evenly", gpu.ErrInvalid, op, a.Heads, a.KVHeads)
	case a.Heads/a.KVHeads > AttnMaxGroup:
		return fmt.Errorf("%w: shaders: %s: GQA group %d exceeds %d", gpu.ErrInvalid, op, a.Heads/a.KVHeads, AttnMaxGroup)
	case a.HeadDim < gpu.SimdWidth || a.HeadDim > AttnMaxHeadDim || a.HeadDim%gpu.SimdWidth != 0:
		return fmt.Errorf("%w: shaders: %s: head dim %d is not a multiple of %d in [%d,%d]", gpu.ErrInvalid, op, a.HeadDim, gpu.SimdWidth, gpu.SimdWidth, AttnMaxHeadDim)
	}
	return nil
}

// Check reports why the attention kernels (AttnPrep, AttnDecode,
// AttnPrefill and their row forms) cannot run shape a.
func (a AttnShape) Check() error { return attnCheckPrep("attention", a) }

// attnCheckPrep adds what AttnPrep needs of a: the RoPE and norm
// parameters.
func attnCheckPrep(op string, a AttnShape) error {
	if err := attnCheck(op, a); err != nil {
		return err
	}
	switch {
	case a.RotaryDim < 0 || a.RotaryDim > a.HeadDim || a.RotaryDim%2 != 0:
		return fmt.Errorf("%w: shaders: %s: rotary dim %d is not even in [0,%d]", gpu.ErrInvalid, op, a.RotaryDim, a.HeadDim)
	case !(a.Theta > 0) || math.IsInf(a.Theta, 0):
		return fmt.Errorf("%w: shaders: %s: rope theta %v", gpu.ErrInvalid, op, a.Theta)
	case !(a.Eps >= 0) || math.IsInf(float64(a.Eps), 0):
		return fmt.Errorf("%w: shaders: %s: norm eps %v", gpu.ErrInvalid, op, a.Eps)
	}
	return nil
}

// attnCheckCache reports why a cache view cannot hold rows positions of
// fp16 elements.
func attnCheckCache(op, what string, v View, a AttnShape, rows int) error {
	row := a.KVHeads * a.HeadDim
	if rows > maxCacheElements/row {
		return fmt.Errorf("%w: shaders: %s: position %d is past the %d the kernels index", gpu.ErrInvalid, op, rows-1, maxCacheElements/row)
	}
	n := rows * row
	switch {
	case v.Buf == nil:
		return fmt.Errorf("%w: shaders: %s: %s has no buffer", gpu.ErrInvalid, op, what)
	case v.Off < 0 || v.Off%KVElementBytes != 0:
		return fmt.Errorf("%w: shaders: %s: %s offset %d is not a multiple of %d", gpu.ErrInvalid, op, what, v.Off, KVElementBytes)
	case v.Off > v.Buf.Len() || n > (v.Buf.Len()-v.Off)/KVElementBytes:
		return fmt.Errorf("%w: shaders: %s: %s needs %d fp16 elements at offset %d of a %d-byte buffer", gpu.ErrInvalid, op, what, n, v.Off, v.Buf.Len())
	}
	return nil
}

// AttnPrepIO is AttnPrep's and AttnPrepRows' operands, for rows tokens at
// positions Pos, Pos+1, ... (one for AttnPrep); float32 but for the caches.
type AttnPrepIO struct {
	Q, Gate        View // written: [rows][Heads][HeadDim]
	QG             View // [rows][Heads][2*HeadDim]: each head's query | gate halves
	K, V           View // [rows][KVHeads][HeadDim]
	KCache, VCache View // f16 [capacity][KVHeads][HeadDim]: rows Pos .. Pos+rows-1 written
	QNorm, KNorm   View // [HeadDim]
	Shape          AttnShape
	Pos            int
}

// AttnPrep readies one token's attention inputs: for each query head, Q =
// RoPE(RMSNorm(query) * QNorm) and Gate copied out of QG's [query | gate]
// halves; for each KV head, RoPE(RMSNorm(K) * KNorm) and V written to row
// Pos of the caches, rounded to fp16.
func (k *Kernels) AttnPrep(cb gpu.CommandBuffer, io AttnPrepIO) error {
	return k.attnPrepRows(cb, "AttnPrep", io, 1)
}

// attnBlocks is how many ATTN_BLOCK blocks n positions take.
func attnBlocks(n int) int { return (n + AttnBlock - 1) / AttnBlock }

// attnSplit is how many parts attn_decode_f16kv splits each of n
// positions' blocks into: the largest power of two up to AttnMaxSplit with
// at most AttnSplitParts parts in all, 1 past AttnSplitParts blocks. It
// depends on the count of blocks alone, so a decode plan (one per count)
// replays its dispatch at every position of its block.
func attnSplit(n int) int {
	b, s := attnBlocks(n), AttnMaxSplit
	for s > 1 && b*s > AttnSplitParts {
		s /= 2
	}
	return s
}

// AttnScratchBytes is the scratch AttnDecode needs to attend up to n
// positions: of every count up to n, since a sequence sizes its scratch
// once for its capacity. Its parts, attnBlocks(n) * attnSplit(n), are at
// most AttnMaxSplit per block and at most the larger of AttnSplitParts and
// the blocks.
func AttnScratchBytes(a AttnShape, n int) int {
	b := attnBlocks(n)
	parts := min(b*AttnMaxSplit, max(b, AttnSplitParts))
	return a.Heads * parts * (a.HeadDim + 2) * 4
}

// attnGeometry is attn_decode_f16kv's simd-group grid for a GQA group: head
// columns by position stripes, as the kernel derives it.
func attnGeometry(group int) (columns, stripes int) {
	columns = (group + AttnHeadsPerSimdgroup - 1) / AttnHeadsPerSimdgroup
	return columns, AttnSimdgroups / columns
}

// AttnIO is the operands AttnDecode and AttnPrefill share: float32 but
// for the caches, rows the tokens attending.
type AttnIO struct {
	O              View // written: [rows][Heads][HeadDim], the gated output
	Q, Gate        View // [rows][Heads][HeadDim]
	KCache, VCache View // f16 [capacity][KVHeads][HeadDim]
	Shape          AttnShape
}

// AttnDecodeIO is AttnDecode's operands: one row, the first N cached
// positions, and Scratch of at least AttnScratchBytes.
type AttnDecodeIO struct {
	AttnIO
	Scratch View
	N       int
}

// AttnDecode attends each query head's one new query to cached positions
// 0..N-1 of its KV head (causal softmax, scale 1/sqrt(HeadDim), fp32),
// then gates the result: O = attn * sigmoid(Gate). It encodes two
// dispatches, the parts' partials then their merge, with a barrier
// between.
func (k *Kernels) AttnDecode(cb gpu.CommandBuffer, io AttnDecodeIO) error {
	const op = "AttnDecode"
	o, q, gate, kCache, vCache, scratch, a, n := io.O, io.Q, io.Gate, io.KCache, io.VCache, io.Scratch, io.Shape, io.N
	if err := attnCheck(op, a); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: shaders: %s: attending %d positions", gpu.ErrInvalid, op, n)
	}
	hd := a.Heads * a.HeadDim
	if err := requireViews(op, []viewBytes{f32("o", o, hd), f32("q", q, hd), f32("gate", gate, hd)}); err != nil {
		return err
	}
	if err := attnCheckCache(op, "k cache", kCache, a, n); err != nil {
		return err
	}
	if err := attnCheckCache(op, "v cache", vCache, a, n); err != nil {
		return err
	}
	if err := requireView(op, "scratch", scratch, AttnScratchBytes(a, n), offsetAlign); err != nil {
		return err
	}
	group := a.Heads / a.KVHeads
	consts := []gpu.Constant{gpu.IntConstant(FCAttn, int32(a.HeadDim)), gpu.IntConstant(FCAttn+1, int32(group))}
	p, err := k.Pipeline(attentionFile, "attn_decode_f16kv", consts...)
	if err != nil {
		return err
	}
	split := attnSplit(n)
	parts := attnBlocks(n) * split
	args := AttnDecodeArgs{
		N: int32(n), Parts: int32(parts), Heads: int32(a.Heads), KVHeads: int32(a.KVHeads),
		Scale: float32(1 / math.Sqrt(float64(a.HeadDim))), PartLen: int32(AttnBlock / split),
	}
	columns, stripes := attnGeometry(group)
	// Stripes after the first pass (acc, m, l) per head; Metal wants a
	// nonzero multiple of 16 bytes.
	tg := max(16, ((stripes-1)*group*(a.HeadDim+2)*4+15)/16*16)
	if err := cb.Dispatch(&gpu.Dispatch{
		Pipeline:          p,
		Groups:            gpu.Size{X: a.KVHeads, Y: parts, Z: 1},
		Threads:           gpu.Size{X: columns * stripes * gpu.SimdWidth, Y: 1, Z: 1}, // at most AttnDecodeThreads
		Args:              []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), q.Arg(1), kCache.Arg(2), vCache.Arg(3), scratch.Arg(4)},
		ThreadgroupMemory: []int{tg},
	}); err != nil {
		return err
	}
	merge, err := k.Pipeline(attentionFile, "attn_merge_f32", consts...)
	if err != nil {
		return err
	}
	cb.Barrier()
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: merge,
		Groups:   gpu.Size{X: a.Heads, Y: 1, Z: 1},
		Threads:  gpu.Size{X: a.HeadDim, Y: 1, Z: 1},
		Args:     []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), scratch.Arg(1), gate.Arg(2), o.Arg(3)},
	})
}
