package main

import (
	"fmt"
	"sort"

	"petal/engine/safetensors"
)

// shape is the architecture's dimensions (MODEL.md's "Shapes"), kept
// apart from engine/checkpoint's own so the tests compare two independent
// readings of the same listing.
type shape struct {
	hidden, vocab                  int
	heads, kvHeads, headDim        int
	linKeyHeads, linValueHeads     int
	linKeyDim, linValueDim         int
	experts, topK                  int
	expertInter, sharedInter       int
	layers                         []string // "linear_attention" or "full_attention"
	ropeTheta, partialRotary       float64
	maxPositions                   int
	eos                            []int
	textEOS                        int
	visionDepth, visionHidden      int
	visionPatch, visionOutHidden   int
	visionInter, visionHeads       int
	visionChannels, visionTemporal int
	visionMerge, visionPositions   int
	imageToken, visionStart        int
	visionEnd                      int
	// vision writes the tower's tensors (mlx-vlm's layout under
	// vision_tower.), not only its config.
	vision                         bool
	mropeSection                   []int
	fullAttentionInterval          int
	linConvKernel                  int
	routerBits, defaultBits, group int
}

// qwen36 is Qwen3.6-35B-A3B with n layers: full attention where
// (i+1)%4 == 0, Gated DeltaNet elsewhere; with fewer than 4 layers the
// last is full attention, so both kinds are present (transformers' cache
// needs one attention layer, and every kernel is exercised).
func qwen36(n int) shape {
	s := shape{
		hidden: 2048, vocab: 248320,
		heads: 16, kvHeads: 2, headDim: 256,
		linKeyHeads: 16, linValueHeads: 32, linKeyDim: 128, linValueDim: 128,
		experts: 256, topK: 8, expertInter: 512, sharedInter: 512,
		ropeTheta: 1e7, partialRotary: 0.25, maxPositions: 262144,
		eos: []int{248046, 248044}, textEOS: 248044,
		visionDepth: 27, visionHidden: 1152, visionPatch: 16, visionOutHidden: 2048,
		visionInter: 4304, visionHeads: 16, visionChannels: 3, visionTemporal: 2,
		visionMerge: 2, visionPositions: 2304,
		imageToken: 248056, visionStart: 248053, visionEnd: 248054,
		mropeSection: []int{11, 11, 10}, fullAttentionInterval: 4, linConvKernel: 4,
		routerBits: 8, defaultBits: 4, group: 64,
	}
	s.layers = layerKinds(n)
	return s
}

func layerKinds(n int) []string {
	kinds := make([]string, n)
	for i := range kinds {
		kinds[i] = "linear_attention"
		if (i+1)%4 == 0 || (n < 4 && i == n-1) {
			kinds[i] = "full_attention"
		}
	}
	return kinds
}

// fillKind says how a tensor's bytes are made.
type fillKind int

const (
	fillCodes  fillKind = iota // uniform random codes
	fillScales                 // per-group scale
	fillBiases                 // per-group bias, -scale*(levels/2): zero-mean weights
	fillBF16                   // uniform in [lo, hi)
	fillF32                    // uniform in [lo, hi)
	fillLogF32                 // log of uniform in [lo, hi): A_log
)

// tensor is one tensor of the checkpoint and how to fill it.
type tensor struct {
	safetensors.Info
	kind fillKind
	// seed picks the random stream; a quantized module's scales and
	// biases share it, so each group's bias matches its scale.
	seed   uint64
	bits   int     // codes, scales, biases
	std    float64 // scales, biases: the dequantized weights' standard deviation
	lo, hi float64 // vectors
}

func (t *tensor) bytes() int64 { return t.Elements() * int64(t.DType.Size()) }

// plan lists the checkpoint's tensors sorted by name, and the 8-bit
// overrides for config.json's quantization block, keyed by module path.
func plan(s shape) ([]tensor, map[string]int) {
	const prefix = "language_model."
	var ts []tensor
	overrides := map[string]int{}
	seed := uint64(0)
	next := func() uint64 { seed++; return seed }
	quant := func(module string, experts, rows, cols, bits int) {
		lead := []int{}
		if experts > 0 {
			lead = []int{experts}
		}
		dims := func(last ...int) []int { return append(append([]int{}, lead...), last...) }
		sd := next()
		name := prefix + module
		std := 1 / sqrt(float64(cols))
		ts = append(ts,
			tensor{Info: safetensors.Info{Name: name + ".weight", DType: safetensors.U32, Shape: dims(rows, cols*bits/32)}, kind: fillCodes, seed: next(), bits: bits},
			tensor{Info: safetensors.Info{Name: name + ".scales", DType: safetensors.BF16, Shape: dims(rows, cols/s.group)}, kind: fillScales, seed: sd, bits: bits, std: std},
			tensor{Info: safetensors.Info{Name: name + ".biases", DType: safetensors.BF16, Shape: dims(rows, cols/s.group)}, kind: fillBiases, seed: sd, bits: bits, std: std})
		if bits != s.defaultBits {
			overrides[name] = bits
		}
	}
	vec := func(name string, kind fillKind, lo, hi float64, dims ...int) {
		dt := safetensors.BF16
		if kind != fillBF16 {
			dt = safetensors.F32
		}
		ts = append(ts, tensor{Info: safetensors.Info{Name: prefix + name, DType: dt, Shape: dims}, kind: kind, seed: next(), lo: lo, hi: hi})
	}
	quant("model.embed_tokens", 0, s.vocab, s.hidden, s.defaultBits)
	quant("lm_head", 0, s.vocab, s.hidden, s.defaultBits)
	vec("model.norm.weight", fillBF16, 0.9, 1.1, s.hidden)
	convCh := 2*s.linKeyHeads*s.linKeyDim + s.linValueHeads*s.linValueDim
	vd := s.linValueHeads * s.linValueDim
	for i, kind := range s.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		vec(p+"input_layernorm.weight", fillBF16, 0.9, 1.1, s.hidden)
		vec(p+"post_attention_layernorm.weight", fillBF16, 0.9, 1.1, s.hidden)
		if kind == "full_attention" {
			quant(p+"self_attn.q_proj", 0, 2*s.heads*s.headDim, s.hidden, s.defaultBits)
			quant(p+"self_attn.k_proj", 0, s.kvHeads*s.headDim, s.hidden, s.defaultBits)
			quant(p+"self_attn.v_proj", 0, s.kvHeads*s.headDim, s.hidden, s.defaultBits)
			quant(p+"self_attn.o_proj", 0, s.hidden, s.heads*s.headDim, s.defaultBits)
			vec(p+"self_attn.q_norm.weight", fillBF16, 0.8, 1.2, s.headDim)
			vec(p+"self_attn.k_norm.weight", fillBF16, 0.8, 1.2, s.headDim)
		} else {
			quant(p+"linear_attn.in_proj_qkv", 0, convCh, s.hidden, s.defaultBits)
			quant(p+"linear_attn.in_proj_z", 0, vd, s.hidden, s.defaultBits)
			quant(p+"linear_attn.in_proj_b", 0, s.linValueHeads, s.hidden, s.defaultBits)
			quant(p+"linear_attn.in_proj_a", 0, s.linValueHeads, s.hidden, s.defaultBits)
			quant(p+"linear_attn.out_proj", 0, s.hidden, vd, s.defaultBits)
			// MLX's layout of the depthwise conv: [channels, kernel, 1].
			vec(p+"linear_attn.conv1d.weight", fillBF16, -0.8, 0.8, convCh, s.linConvKernel, 1)
			// Decay from ~0.9996 to ~0.3 per token, as the reference
			// fixtures spread it, so some heads remember long contexts.
			vec(p+"linear_attn.dt_bias", fillBF16, -4, 1, s.linValueHeads)
			vec(p+"linear_attn.A_log", fillLogF32, 0.02, 1, s.linValueHeads)
			vec(p+"linear_attn.norm.weight", fillBF16, 0.9, 1.1, s.linValueDim)
		}
		quant(p+"mlp.gate", 0, s.experts, s.hidden, s.routerBits)
		quant(p+"mlp.switch_mlp.gate_proj", s.experts, s.expertInter, s.hidden, s.defaultBits)
		quant(p+"mlp.switch_mlp.up_proj", s.experts, s.expertInter, s.hidden, s.defaultBits)
		quant(p+"mlp.switch_mlp.down_proj", s.experts, s.hidden, s.expertInter, s.defaultBits)
		quant(p+"mlp.shared_expert.gate_proj", 0, s.sharedInter, s.hidden, s.defaultBits)
		quant(p+"mlp.shared_expert.up_proj", 0, s.sharedInter, s.hidden, s.defaultBits)
		quant(p+"mlp.shared_expert.down_proj", 0, s.hidden, s.sharedInter, s.defaultBits)
		quant(p+"mlp.shared_expert_gate", 0, 1, s.hidden, s.routerBits)
	}
	if s.vision {
		// After the text model's, so its seeds, and so its bytes, are
		// the same with or without the tower.
		ts = append(ts, visionPlan(s, next)...)
	}
	sort.Slice(ts, func(a, b int) bool { return ts[a].Name < ts[b].Name })
	return ts, overrides
}

// visionPlan lists the vision tower as mlx-vlm's conversion ships it
// (engine/checkpoint's bindVision reads these names): BF16, never
// quantized, the Conv3d weight channels-last [out, t, p, p, in]. Matrices
// are uniform with standard deviation 1/sqrt(in), as the text model's;
// norms near 1, biases and the position table small, so the 27 blocks'
// LayerNorms see unit-scale activations.
func visionPlan(s shape, next func() uint64) []tensor {
	const prefix = "vision_tower."
	var ts []tensor
	bf16 := func(name string, lo, hi float64, dims ...int) {
		ts = append(ts, tensor{Info: safetensors.Info{Name: prefix + name, DType: safetensors.BF16, Shape: dims}, kind: fillBF16, seed: next(), lo: lo, hi: hi})
	}
	// A uniform spread of ±sqrt(3/in) has standard deviation 1/sqrt(in).
	dense := func(name string, rows, cols int, dims ...int) {
		a := sqrt(3 / float64(cols))
		if len(dims) == 0 {
			dims = []int{rows, cols}
		}
		bf16(name+".weight", -a, a, dims...)
		bf16(name+".bias", -visionBiasSpread, visionBiasSpread, rows)
	}
	norm := func(name string, n int) {
		bf16(name+".weight", 0.9, 1.1, n)
		bf16(name+".bias", -visionBiasSpread, visionBiasSpread, n)
	}
	h, in := s.visionHidden, s.visionInter
	patchDim := s.visionChannels * s.visionTemporal * s.visionPatch * s.visionPatch
	dense("patch_embed.proj", h, patchDim, h, s.visionTemporal, s.visionPatch, s.visionPatch, s.visionChannels)
	bf16("pos_embed.weight", -visionPosSpread, visionPosSpread, s.visionPositions, h)
	for i := range s.visionDepth {
		p := fmt.Sprintf("blocks.%d.", i)
		norm(p+"norm1", h)
		norm(p+"norm2", h)
		dense(p+"attn.qkv", 3*h, h)
		dense(p+"attn.proj", h, h)
		dense(p+"mlp.linear_fc1", in, h)
		dense(p+"mlp.linear_fc2", h, in)
	}
	mh := h * s.visionMerge * s.visionMerge
	norm("merger.norm", h)
	dense("merger.linear_fc1", mh, mh)
	dense("merger.linear_fc2", s.visionOutHidden, mh)
	return ts
}

// The tower's biases and position table are drawn uniform in ±these:
// small beside the unit-scale activations, as trained ones are.
const (
	visionBiasSpread = 0.02
	visionPosSpread  = 0.05
)

// shardPlan splits tensors (in their order) into shards as mlx-lm's
// make_shards does: a new shard starts when the next tensor would take
// the current one past limit bytes.
func shardPlan(ts []tensor, limit int64) [][]tensor {
	var shards [][]tensor
	var cur []tensor
	var size int64
	for _, t := range ts {
		if len(cur) > 0 && size+t.bytes() > limit {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.bytes()
	}
	return append(shards, cur)
}
