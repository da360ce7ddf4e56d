package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

const attentionPrefillFile = "attention_prefill.metal"

// AttnPrefillTokens is how many tokens of a chunk one threadgroup attends
// together, sharing each K/V row it loads (args.h ATTN_PREFILL_TOKENS).
const AttnPrefillTokens = 8

// AttnPrefill attends each of tokens query rows of a chunk, at positions
// pos0 .. pos0+tokens-1, causally to the cached positions up to its own
// (softmax scale 1/sqrt(HeadDim), fp32), then gates the result: o =
// attn * sigmoid(gate). AttnPrep must already have written the chunk's K/V
// rows. Views are f32: o, q, gate [tokens][Heads][HeadDim]; the caches
// [capacity][KVHeads][HeadDim] holding at least pos0+tokens rows.
func (k *Kernels) AttnPrefill(cb gpu.CommandBuffer, o, q, gate, kCache, vCache View, a AttnShape, pos0, tokens int) error {
	const op = "AttnPrefill"
	if err := attnCheck(op, a); err != nil {
		return err
	}
	hd := a.Heads * a.HeadDim
	if pos0 < 0 || tokens < 1 || tokens > maxGridGroups || int64(tokens)*int64(hd) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d tokens after position %d", gpu.ErrInvalid, op, tokens, pos0)
	}
	for _, c := range []struct {
		what string
		v    View
		n    int
	}{{"o", o, tokens * hd}, {"q", q, tokens * hd}, {"gate", gate, tokens * hd}} {
		if err := mixerFloats(op, c.what, c.v, c.n); err != nil {
			return err
		}
	}
	if err := attnCheckCache(op, "k cache", kCache, a, pos0+tokens); err != nil {
		return err
	}
	if err := attnCheckCache(op, "v cache", vCache, a, pos0+tokens); err != nil {
		return err
	}
	group := a.Heads / a.KVHeads
	p, err := k.Pipeline(attentionPrefillFile, "attn_prefill_f32",
		gpu.IntConstant(FCAttn, int32(a.HeadDim)), gpu.IntConstant(FCAttn+1, int32(group)))
	if err != nil {
		return err
	}
	args := AttnPrefillArgs{
		Tokens: int32(tokens), Pos0: int32(pos0), Heads: int32(a.Heads), KVHeads: int32(a.KVHeads),
		Scale: float32(1 / math.Sqrt(float64(a.HeadDim))),
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: a.KVHeads, Y: (tokens + AttnPrefillTokens - 1) / AttnPrefillTokens, Z: 1},
		Threads:  gpu.Size{X: group * gpu.SimdWidth, Y: 1, Z: 1},
		Args:     []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), q.Arg(1), gate.Arg(2), kCache.Arg(3), vCache.Arg(4), o.Arg(5)},
	})
}
