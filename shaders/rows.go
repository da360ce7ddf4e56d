package shaders

import (
	"fmt"
	"math"

	"petal/gpu"
)

// Row-batched forms of decode ops, for a prefill chunk: the same kernels
// with the chunk's tokens as grid rows, one dispatch for the chunk.

// requireRows checks a chunk's row count.
func requireRows(op string, rows int) error {
	if rows < 1 || rows > maxGridGroups {
		return fmt.Errorf("%w: shaders: %s: %d rows", gpu.ErrInvalid, op, rows)
	}
	return nil
}

// EmbedRows is Embed for rows tokens: out is float32[rows][m.Cols], row r
// the embedding of the uint32 id at tokens + 4r.
func (k *Kernels) EmbedRows(cb gpu.CommandBuffer, out View, m QMatrix, tokens View, rows int) error {
	return k.embedRows(cb, "EmbedRows", out, m, tokens, rows)
}

// embedRows serves Embed (one row) and EmbedRows under op's name.
func (k *Kernels) embedRows(cb gpu.CommandBuffer, op string, out View, m QMatrix, tokens View, rows int) error {
	if err := requireRows(op, rows); err != nil {
		return err
	}
	if err := requireQMatrix(op, &m, 1); err != nil {
		return err
	}
	if m.Bits != 4 || int64(rows)*int64(m.Cols) > maxElements {
		return fmt.Errorf("%w: shaders: %s: %d rows of a %d-bit embedding of width %d", gpu.ErrInvalid, op, rows, m.Bits, m.Cols)
	}
	if err := requireViews(op, []viewBytes{{"out", out, 4 * rows * m.Cols}, {"tokens", tokens, 4 * rows}}); err != nil {
		return err
	}
	groups, err := denseGroups(op, m.Cols, ElementwiseThreads)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(qmvFile, "embed_bf16_gs64_b4")
	if err != nil {
		return err
	}
	// The table's row count only bounds the id; each row is addressed from
	// the same base.
	args := QMVArgs{Rows: int32(m.Rows), K: int32(m.Cols)}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: gpu.Size{X: groups, Y: rows, Z: 1}, Threads: denseSize(ElementwiseThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), m.Codes.Arg(1), m.Scales.Arg(2), m.Biases.Arg(3), tokens.Arg(4), out.Arg(5)},
	})
}

// AttnPrepRows is AttnPrep for rows tokens at positions io.Pos, io.Pos+1,
// ...
func (k *Kernels) AttnPrepRows(cb gpu.CommandBuffer, io AttnPrepIO, rows int) error {
	return k.attnPrepRows(cb, "AttnPrepRows", io, rows)
}

// attnPrepRows serves AttnPrep (one row) and AttnPrepRows under op's name.
func (k *Kernels) attnPrepRows(cb gpu.CommandBuffer, op string, io AttnPrepIO, rows int) error {
	a, pos := io.Shape, io.Pos
	if err := attnCheckPrep(op, a); err != nil {
		return err
	}
	if err := requireRows(op, rows); err != nil {
		return err
	}
	hd := a.Heads * a.HeadDim
	kd := a.KVHeads * a.HeadDim
	if pos < 0 || int64(rows)*int64(2*hd) > math.MaxInt32 {
		return fmt.Errorf("%w: shaders: %s: %d rows at position %d", gpu.ErrInvalid, op, rows, pos)
	}
	if err := requireViews(op, []viewBytes{
		f32("q", io.Q, rows*hd), f32("gate", io.Gate, rows*hd), f32("qg", io.QG, rows*2*hd),
		f32("k", io.K, rows*kd), f32("v", io.V, rows*kd),
		f32("q norm", io.QNorm, a.HeadDim), f32("k norm", io.KNorm, a.HeadDim),
	}); err != nil {
		return err
	}
	if err := attnCheckCache(op, "k cache", io.KCache, a, pos+rows); err != nil {
		return err
	}
	if err := attnCheckCache(op, "v cache", io.VCache, a, pos+rows); err != nil {
		return err
	}
	p, err := k.Pipeline(attentionFile, "attn_prep_f16kv")
	if err != nil {
		return err
	}
	args := AttnPrepArgs{
		Heads: int32(a.Heads), KVHeads: int32(a.KVHeads), HeadDim: int32(a.HeadDim),
		RotaryDim: int32(a.RotaryDim), Pos: int32(pos), Eps: a.Eps,
	}
	for j := range a.RotaryDim / 2 {
		// As engine/cpu's rope: computed in float64, rounded to fp32.
		args.InvFreq[j] = float32(math.Pow(a.Theta, -2*float64(j)/float64(a.RotaryDim)))
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p,
		Groups:   gpu.Size{X: a.Heads + a.KVHeads, Y: rows, Z: 1},
		Threads:  gpu.Size{X: min(a.HeadDim, AttnPrepMaxThreads), Y: 1, Z: 1},
		Args: []gpu.Arg{
			gpu.BytesArg(0, Bytes(&args)), io.QG.Arg(1), io.K.Arg(2), io.V.Arg(3), io.QNorm.Arg(4), io.KNorm.Arg(5),
			io.Q.Arg(6), io.Gate.Arg(7), io.KCache.Arg(8), io.VCache.Arg(9),
		},
	})
}

// RouterTopKRows is RouterTopK for rows tokens: logits
// float32[rows][experts], ids uint32[rows][topK], weights
// float32[rows][topK].
func (k *Kernels) RouterTopKRows(cb gpu.CommandBuffer, ids, weights, logits View, experts, topK int, normalize bool, rows int) error {
	return k.routerTopKRows(cb, "RouterTopKRows", ids, weights, logits, experts, topK, normalize, rows)
}

// routerTopKRows serves RouterTopK (one row) and RouterTopKRows under op's
// name.
func (k *Kernels) routerTopKRows(cb gpu.CommandBuffer, op string, ids, weights, logits View, experts, topK int, normalize bool, rows int) error {
	args, err := routerArgs(op, ids, weights, logits, experts, topK, normalize, rows)
	if err != nil {
		return err
	}
	p, err := k.Pipeline(moeFile, "router_topk_f32")
	if err != nil {
		return err
	}
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(rows), Threads: denseSize(RouterThreads),
		Args: []gpu.Arg{gpu.BytesArg(0, Bytes(&args)), logits.Arg(1), ids.Arg(2), weights.Arg(3)},
	})
}

// routerArgs checks the router's top-k over rows rows and returns its
// arguments.
func routerArgs(op string, ids, weights, logits View, experts, topK int, normalize bool, rows int) (MoEArgs, error) {
	if experts < 1 || experts > MoEMaxExperts || topK < 1 || topK > MoEMaxTopK || topK > experts {
		return MoEArgs{}, fmt.Errorf("%w: shaders: %s: top %d of %d experts: want 1 <= k <= %d and k <= experts <= %d", gpu.ErrInvalid, op, topK, experts, MoEMaxTopK, MoEMaxExperts)
	}
	if err := requireRows(op, rows); err != nil {
		return MoEArgs{}, err
	}
	if err := requireViews(op, []viewBytes{{"logits", logits, 4 * experts * rows}, {"ids", ids, 4 * topK * rows}, {"weights", weights, 4 * topK * rows}}); err != nil {
		return MoEArgs{}, err
	}
	args := MoEArgs{N: int32(experts), K: int32(topK)}
	if normalize {
		args.Normalize = 1
	}
	return args, nil
}
