// Package checkpointtest writes small random checkpoints in the MLX layout
// for tests: nested or flat config, one or several shards, MLX affine
// quantization with 8-bit router gates. The reference fixtures from
// transformers live in engine/testdata/fixtures; these are for tests that
// need a checkpoint of a particular shape or a broken one.
package checkpointtest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"petal/engine/safetensors"
)

// Options describe the checkpoint to write.
type Options struct {
	Hidden, Vocab                    int
	Layers                           []string // "linear_attention" or "full_attention"
	Heads, KVHeads, HeadDim          int
	LinearKeyHeads, LinearValueHeads int
	LinearKeyDim, LinearValueDim     int
	Experts, TopK                    int
	ExpertIntermediate               int
	SharedIntermediate               int
	Flat                             bool // flat config, no language_model. prefix
	Shards                           int
	Seed                             uint64
	// MLX writes the shards as MLX's save_safetensors does
	// ([safetensors.EncodeMLX]: header unpadded, no padding between
	// tensors), data in name order; otherwise every tensor is 8-byte
	// aligned ([safetensors.Encode]).
	MLX bool
	// Mutate, when set, may change the tensors (by name) before they are
	// written, to build broken checkpoints.
	Mutate func(ts []safetensors.NewTensor) []safetensors.NewTensor
}

// Tiny returns options for a small model with both layer kinds.
func Tiny() Options {
	return Options{
		Hidden: 64, Vocab: 96,
		Layers: []string{"linear_attention", "full_attention", "linear_attention"},
		Heads:  4, KVHeads: 2, HeadDim: 32,
		LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 16, LinearValueDim: 16,
		Experts: 4, TopK: 2, ExpertIntermediate: 64, SharedIntermediate: 64,
		Shards: 2, Seed: 1,
	}
}

// BF16 rounds f to the nearest bfloat16 (ties to even) and returns its bits.
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Quantize applies MLX's affine rule to rows of cols values: per group of
// size group, scale = (max-min)/(2^bits-1) and bias = min, both rounded to
// bf16, q = round((w-bias)/scale). It returns packed codes (lowest bits =
// lowest column), scales and biases.
func Quantize(w []float32, cols, bits, group int) (codes []uint32, scales, biases []uint16) {
	rows := len(w) / cols
	perWord := 32 / bits
	levels := float32(int(1)<<bits - 1)
	codes = make([]uint32, rows*cols/perWord)
	for r := 0; r < rows; r++ {
		for g := 0; g < cols/group; g++ {
			vals := w[r*cols+g*group : r*cols+(g+1)*group]
			lo, hi := vals[0], vals[0]
			for _, v := range vals {
				lo, hi = min(lo, v), max(hi, v)
			}
			scale := (hi - lo) / levels
			if scale == 0 {
				scale = 1
			}
			sb, bb := BF16(scale), BF16(lo)
			scales = append(scales, sb)
			biases = append(biases, bb)
			s, b := math.Float32frombits(uint32(sb)<<16), math.Float32frombits(uint32(bb)<<16)
			for i, v := range vals {
				q := float32(math.Round(float64((v - b) / s)))
				q = max(0, min(levels, q))
				c := g*group + i
				codes[(r*cols+c)/perWord] |= uint32(q) << uint(bits*(c%perWord))
			}
		}
	}
	return codes, scales, biases
}

// Write writes the checkpoint into dir.
func Write(dir string, o Options) error {
	rng := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	prefix := "language_model."
	if o.Flat {
		prefix = ""
	}
	var ts []safetensors.NewTensor
	quant := map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}
	randn := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	addQ := func(name string, experts, rows, cols, bits int) {
		n := rows * cols
		if experts > 0 {
			n *= experts
		}
		codes, sc, bi := Quantize(randn(n, 1/math.Sqrt(float64(cols))), cols, bits, 64)
		lead := []int{}
		if experts > 0 {
			lead = []int{experts}
		}
		shape := func(last ...int) []int { return append(append([]int{}, lead...), last...) }
		ts = append(ts,
			safetensors.NewTensor{Name: prefix + name + ".weight", DType: safetensors.U32, Shape: shape(rows, cols*bits/32), Data: u32bytes(codes)},
			safetensors.NewTensor{Name: prefix + name + ".scales", DType: safetensors.BF16, Shape: shape(rows, cols/64), Data: u16bytes(sc)},
			safetensors.NewTensor{Name: prefix + name + ".biases", DType: safetensors.BF16, Shape: shape(rows, cols/64), Data: u16bytes(bi)})
		if bits != 4 {
			quant[prefix+name] = map[string]int{"group_size": 64, "bits": bits}
		}
	}
	addV := func(name string, shape []int, mean, std float64) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := randn(n, std)
		h := make([]uint16, n)
		for i := range v {
			h[i] = BF16(v[i] + float32(mean))
		}
		ts = append(ts, safetensors.NewTensor{Name: prefix + name, DType: safetensors.BF16, Shape: shape, Data: u16bytes(h)})
	}
	addQ("model.embed_tokens", 0, o.Vocab, o.Hidden, 4)
	addQ("lm_head", 0, o.Vocab, o.Hidden, 4)
	addV("model.norm.weight", []int{o.Hidden}, 1, 0.1)
	conv := 2*o.LinearKeyHeads*o.LinearKeyDim + o.LinearValueHeads*o.LinearValueDim
	for i, kind := range o.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		addV(p+"input_layernorm.weight", []int{o.Hidden}, 1, 0.1)
		addV(p+"post_attention_layernorm.weight", []int{o.Hidden}, 1, 0.1)
		if kind == "full_attention" {
			addQ(p+"self_attn.q_proj", 0, o.Heads*o.HeadDim*2, o.Hidden, 4)
			addQ(p+"self_attn.k_proj", 0, o.KVHeads*o.HeadDim, o.Hidden, 4)
			addQ(p+"self_attn.v_proj", 0, o.KVHeads*o.HeadDim, o.Hidden, 4)
			addQ(p+"self_attn.o_proj", 0, o.Hidden, o.Heads*o.HeadDim, 4)
			addV(p+"self_attn.q_norm.weight", []int{o.HeadDim}, 1, 0.1)
			addV(p+"self_attn.k_norm.weight", []int{o.HeadDim}, 1, 0.1)
		} else {
			vd := o.LinearValueHeads * o.LinearValueDim
			addQ(p+"linear_attn.in_proj_qkv", 0, conv, o.Hidden, 4)
			addQ(p+"linear_attn.in_proj_z", 0, vd, o.Hidden, 4)
			addQ(p+"linear_attn.in_proj_b", 0, o.LinearValueHeads, o.Hidden, 4)
			addQ(p+"linear_attn.in_proj_a", 0, o.LinearValueHeads, o.Hidden, 4)
			addQ(p+"linear_attn.out_proj", 0, o.Hidden, vd, 4)
			addV(p+"linear_attn.conv1d.weight", []int{conv, 4, 1}, 0, 0.5)
			addV(p+"linear_attn.dt_bias", []int{o.LinearValueHeads}, 0, 1)
			aLog := randn(o.LinearValueHeads, 0.5)
			ts = append(ts, safetensors.NewTensor{Name: prefix + p + "linear_attn.A_log", DType: safetensors.F32, Shape: []int{o.LinearValueHeads}, Data: f32bytes(aLog)})
			addV(p+"linear_attn.norm.weight", []int{o.LinearValueDim}, 1, 0.1)
		}
		addQ(p+"mlp.gate", 0, o.Experts, o.Hidden, 8)
		addQ(p+"mlp.switch_mlp.gate_proj", o.Experts, o.ExpertIntermediate, o.Hidden, 4)
		addQ(p+"mlp.switch_mlp.up_proj", o.Experts, o.ExpertIntermediate, o.Hidden, 4)
		addQ(p+"mlp.switch_mlp.down_proj", o.Experts, o.Hidden, o.ExpertIntermediate, 4)
		addQ(p+"mlp.shared_expert.gate_proj", 0, o.SharedIntermediate, o.Hidden, 4)
		addQ(p+"mlp.shared_expert.up_proj", 0, o.SharedIntermediate, o.Hidden, 4)
		addQ(p+"mlp.shared_expert.down_proj", 0, o.Hidden, o.SharedIntermediate, 4)
		addQ(p+"mlp.shared_expert_gate", 0, 1, o.Hidden, 8)
	}
	if o.Mutate != nil {
		ts = o.Mutate(ts)
	}
	if err := writeConfig(dir, o, quant); err != nil {
		return err
	}
	return writeShards(dir, ts, max(o.Shards, 1), o.MLX)
}

func writeConfig(dir string, o Options, quant map[string]any) error {
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "hidden_size": o.Hidden, "num_hidden_layers": len(o.Layers),
		"layer_types": o.Layers, "vocab_size": o.Vocab, "rms_norm_eps": 1e-6,
		"num_attention_heads": o.Heads, "num_key_value_heads": o.KVHeads, "head_dim": o.HeadDim,
		"attn_output_gate":     true,
		"rope_parameters":      map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
		"linear_num_key_heads": o.LinearKeyHeads, "linear_num_value_heads": o.LinearValueHeads,
		"linear_key_head_dim": o.LinearKeyDim, "linear_value_head_dim": o.LinearValueDim, "linear_conv_kernel_dim": 4,
		"num_experts": o.Experts, "num_experts_per_tok": o.TopK, "moe_intermediate_size": o.ExpertIntermediate,
		"shared_expert_intermediate_size": o.SharedIntermediate, "norm_topk_prob": true,
		"max_position_embeddings": 4096, "tie_word_embeddings": false, "eos_token_id": o.Vocab - 1,
	}
	var cfg map[string]any
	if o.Flat {
		cfg = text
		cfg["quantization"] = quant
	} else {
		cfg = map[string]any{
			"model_type": "qwen3_5_moe", "text_config": text, "vision_config": map[string]any{"depth": 1},
			"eos_token_id": []int{o.Vocab - 1, o.Vocab - 2}, "quantization": quant, "quantization_config": quant,
		}
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}

func writeShards(dir string, ts []safetensors.NewTensor, shards int, mlx bool) error {
	if mlx {
		ts = append([]safetensors.NewTensor(nil), ts...)
		sort.Slice(ts, func(a, b int) bool { return ts[a].Name < ts[b].Name })
	}
	if shards == 1 {
		return writeFile(filepath.Join(dir, "model.safetensors"), ts, mlx)
	}
	weightMap := map[string]string{}
	per := (len(ts) + shards - 1) / shards
	for s := 0; s < shards; s++ {
		part := ts[min(s*per, len(ts)):min((s+1)*per, len(ts))]
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		for _, t := range part {
			weightMap[t.Name] = name
		}
		if err := writeFile(filepath.Join(dir, name), part, mlx); err != nil {
			return err
		}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644)
}

func writeFile(path string, ts []safetensors.NewTensor, mlx bool) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	encode := safetensors.Encode
	if mlx {
		encode = safetensors.EncodeMLX
	}
	if err := encode(f, ts, map[string]string{"format": "mlx"}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func u32bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func u16bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
