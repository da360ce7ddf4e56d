package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

const attentionPrefillFile = "attention_prefill.metal"

// Token blocking of AttnPrefill (args.h): a simd-group attends
// AttnPrefillTokens tokens together, sharing each K/V row it loads, and a
// threadgroup takes up to AttnPrefillBlocks such blocks.
const (
	AttnPrefillTokens = 8
	AttnPrefillBlocks = 4
)

// AttnPrefillScratch is the threadgroup scratch of one AttnPrefill
// simd-group, in floats (args.h ATTN_PREFILL_SCRATCH).
const AttnPrefillScratch = 88

// AttnPrefillRows is how many rows AttnPrefill's q and o views must hold
// for tokens tokens: whole blocks of AttnPrefillTokens.
func AttnPrefillRows(tokens int) int {
	return (tokens + AttnPrefillTokens - 1) / AttnPrefillTokens * AttnPrefillTokens
}

// AttnPrefillGroupTokens is how many tokens one AttnPrefill threadgroup
// attends for shape a: the device reads each cached row about once per
// that many tokens.
func (k *Kernels) AttnPrefillGroupTokens(a AttnShape) (int, error) {
	if err := attnCheck("AttnPrefill", a); err != nil {
		return 0, err
	}
	_, blocks, err := k.attnPrefillPipeline(a)
	return blocks * AttnPrefillTokens, err
}

// attnPrefillPipeline is the pipeline for a and the token blocks per
// threadgroup it allows.
func (k *Kernels) attnPrefillPipeline(a AttnShape) (gpu.Pipeline, int, error) {
	group := a.Heads / a.KVHeads
	p, err := k.Pipeline(attentionPrefillFile, "attn_prefill_f16kv",
		gpu.IntConstant(FCAttn, int32(a.HeadDim)), gpu.IntConstant(FCAttn+1, int32(group)))
	if err != nil {
		return nil, 0, err
	}
	blocks := min(AttnPrefillBlocks, p.MaxThreads()/(group*gpu.SimdWidth))
	if blocks < 1 {
		return nil, 0, fmt.Errorf("%w: shaders: AttnPrefill: a GQA group of %d exceeds the pipeline's %d threads", gpu.ErrInvalid, group, p.MaxThreads())
	}
	return p, blocks, nil
}

// AttnPrefillIO is AttnPrefill's operands: Tokens rows of Gate, O and Q
// with AttnPrefillRows(Tokens) rows (Q's rows past Tokens are read and may
// hold anything; O's are overwritten), caches holding at least
// Pos0+Tokens rows.
type AttnPrefillIO struct {
	AttnIO
	Pos0, Tokens int
}

// AttnPrefill attends each of Tokens query rows of a chunk, at positions
// Pos0 .. Pos0+Tokens-1, causally to the cached positions up to its own
// (softmax scale 1/sqrt(HeadDim), fp32), then gates the result: O =
// attn * sigmoid(Gate). AttnPrep must already have written the chunk's K/V
// rows.
func (k *Kernels) AttnPrefill(cb gpu.CommandBuffer, io AttnPrefillIO) error {
	const op = "AttnPrefill"
	o, q, gate, kCache, vCache, a, pos0, tokens := io.O, io.Q, io.Gate, io.KCache, io.VCache, io.Shape, io.Pos0, io.Tokens
	if err := attnCheck(op, a); err != nil {
		return err
	}
	hd := a.Heads * a.HeadDim
	if pos0 < 0 || tokens < 1 || tokens > maxGridGroups || int64(AttnPrefillRows(tokens))*int64(hd) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d tokens after position %d", gpu.ErrInvalid, op, tokens, pos0)
	}
	rows := AttnPrefillRows(tokens)
	if err := requireViews(op, []viewBytes{f32("o", o, rows*hd), f32("q", q, rows*hd), f32("gate", gate, tokens*hd)}); err != nil {
		return err
	}
	if err := attnCheckCache(op, "k cache", kCache, a, pos0+tokens); err != nil {
		return err
	}
	if err := attnCheckCache(op, "v cache", vCache, a, pos0+tokens); err != nil {
		return err
	}
	group := a.Heads / a.KVHeads
	p, blocks, err := k.attnPrefillPipeline(a)
	if err != nil {
		return err
	}
	// Threadgroups past the chunk's end would only idle.
	blocks = min(blocks, (tokens+AttnPrefillTokens-1)/AttnPrefillTokens)
	perGroup := blocks * AttnPrefillTokens
	args := AttnPrefillArgs{
		Tokens: int32(tokens), Pos0: int32(pos0), Heads: int32(a.Heads), KVHeads: int32(a.KVHeads),
		Scale: float32(1 / math.Sqrt(float64(a.HeadDim))),
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: a.KVHeads, Y: (tokens + perGroup - 1) / perGroup, Z: 1},
		Threads:  gpu.Size{X: blocks * group * gpu.SimdWidth, Y: 1, Z: 1},
		Args:     []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), q.Arg(1), gate.Arg(2), kCache.Arg(3), vCache.Arg(4), o.Arg(5)},
		// Per simd-group scratch; 88 floats keep it a multiple of 16 bytes.
		ThreadgroupMemory: []int{blocks * group * AttnPrefillScratch * 4},
	})
}
