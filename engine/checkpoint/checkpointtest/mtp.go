package checkpointtest

import (
	"math"
	"math/rand/v2"
	"path/filepath"

	"petal/engine/safetensors"
)

// mtpSeedSalt keeps the head's random weights apart from the main
// layers' of the same Seed.
const mtpSeedSalt = 0x6d7470

// WriteMTP writes a random multi-token-prediction head for the checkpoint
// o describes into dir's model-mtp.safetensors (checkpoint.MTPFile), in
// the layout Petal reads: the original mtp.* names under o's prefix, MLX
// affine quantization (4-bit, the gates 8-bit), norms with their 1 added.
// o.Mutate, when set, may change its tensors first.
func WriteMTP(dir string, o Options) error {
	rng := rand.New(rand.NewPCG(o.Seed^mtpSeedSalt, 0x9e3779b97f4a7c15))
	prefix := "language_model."
	if o.Flat {
		prefix = ""
	}
	var ts []safetensors.NewTensor
	randn := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	addQ := func(name string, experts, rows, cols, bits int) {
		n := rows * cols * max(experts, 1)
		codes, sc, bi := Quantize(randn(n, 1/math.Sqrt(float64(cols))), cols, bits, 64)
		shape := func(last ...int) []int {
			if experts > 0 {
				return append([]int{experts}, last...)
			}
			return last
		}
		ts = append(ts,
			safetensors.NewTensor{Name: prefix + name + ".weight", DType: safetensors.U32, Shape: shape(rows, cols*bits/32), Data: u32bytes(codes)},
			safetensors.NewTensor{Name: prefix + name + ".scales", DType: safetensors.BF16, Shape: shape(rows, cols/64), Data: u16bytes(sc)},
			safetensors.NewTensor{Name: prefix + name + ".biases", DType: safetensors.BF16, Shape: shape(rows, cols/64), Data: u16bytes(bi)})
	}
	addV := func(name string, n int) {
		h := make([]uint16, n)
		for i, v := range randn(n, 0.1) {
			h[i] = BF16(v + 1)
		}
		ts = append(ts, safetensors.NewTensor{Name: prefix + name, DType: safetensors.BF16, Shape: []int{n}, Data: u16bytes(h)})
	}
	h := o.Hidden
	addV("mtp.pre_fc_norm_embedding.weight", h)
	addV("mtp.pre_fc_norm_hidden.weight", h)
	addV("mtp.norm.weight", h)
	addQ("mtp.fc", 0, h, 2*h, 4)
	p := "mtp.layers.0."
	addV(p+"input_layernorm.weight", h)
	addV(p+"post_attention_layernorm.weight", h)
	addQ(p+"self_attn.q_proj", 0, o.Heads*o.HeadDim*2, h, 4)
	addQ(p+"self_attn.k_proj", 0, o.KVHeads*o.HeadDim, h, 4)
	addQ(p+"self_attn.v_proj", 0, o.KVHeads*o.HeadDim, h, 4)
	addQ(p+"self_attn.o_proj", 0, h, o.Heads*o.HeadDim, 4)
	addV(p+"self_attn.q_norm.weight", o.HeadDim)
	addV(p+"self_attn.k_norm.weight", o.HeadDim)
	addQ(p+"mlp.gate", 0, o.Experts, h, 8)
	addQ(p+"mlp.switch_mlp.gate_proj", o.Experts, o.ExpertIntermediate, h, 4)
	addQ(p+"mlp.switch_mlp.up_proj", o.Experts, o.ExpertIntermediate, h, 4)
	addQ(p+"mlp.switch_mlp.down_proj", o.Experts, h, o.ExpertIntermediate, 4)
	addQ(p+"mlp.shared_expert.gate_proj", 0, o.SharedIntermediate, h, 4)
	addQ(p+"mlp.shared_expert.up_proj", 0, o.SharedIntermediate, h, 4)
	addQ(p+"mlp.shared_expert.down_proj", 0, h, o.SharedIntermediate, 4)
	addQ(p+"mlp.shared_expert_gate", 0, 1, h, 8)
	if o.Mutate != nil {
		ts = o.Mutate(ts)
	}
	return writeFile(filepath.Join(dir, "model-mtp.safetensors"), ts, o.MLX)
}
