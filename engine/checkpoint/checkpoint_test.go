package checkpoint_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/safetensors"
)

func write(t *testing.T, o checkpointtest.Options) string {
	t.Helper()
	dir := t.TempDir()
	if err := checkpointtest.Write(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenLayouts(t *testing.T) {
	for _, flat := range []bool{false, true} {
		o := checkpointtest.Tiny()
		o.Flat = flat
		if flat {
			o.Shards = 1
		} else {
			o.Shards = 3
		}
		m, err := checkpoint.Open(write(t, o))
		if err != nil {
			t.Fatalf("flat=%v: %v", flat, err)
		}
		c := m.Config
		if c.Hidden != o.Hidden || len(c.Layers) != 3 || c.Layers[1] != checkpoint.Attention || c.Layers[0] != checkpoint.DeltaNet {
			t.Errorf("flat=%v: config %+v", flat, c)
		}
		if c.RotaryDim != o.HeadDim/4 || c.RopeTheta != 1e7 {
			t.Errorf("rotary %d theta %v", c.RotaryDim, c.RopeTheta)
		}
		wantEOS := []int{o.Vocab - 1, o.Vocab - 2}
		if flat {
			wantEOS = wantEOS[:1]
		}
		if len(c.EOS) != len(wantEOS) || c.EOS[0] != wantEOS[0] {
			t.Errorf("flat=%v: eos %v, want %v", flat, c.EOS, wantEOS)
		}
		router := m.Layers[0].MoE.Router
		if router.Bits != 8 || router.GroupSize != 64 || m.Layers[0].MoE.Gate.Bits != 4 || m.Layers[0].MoE.Gate.Experts != o.Experts {
			t.Errorf("router bits %d, experts bits %d", router.Bits, m.Layers[0].MoE.Gate.Bits)
		}
		if m.Layers[1].Attn == nil || m.Layers[0].Delta == nil {
			t.Error("layer mixers not bound")
		}
		if len(m.Shards) != o.Shards {
			t.Errorf("%d shards, want %d", len(m.Shards), o.Shards)
		}
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}
}

// mutated writes Tiny with f applied to its tensors.
func mutated(t *testing.T, f func([]safetensors.NewTensor) []safetensors.NewTensor) string {
	o := checkpointtest.Tiny()
	o.Mutate = f
	return write(t, o)
}

func rename(from, to string) func([]safetensors.NewTensor) []safetensors.NewTensor {
	return func(ts []safetensors.NewTensor) []safetensors.NewTensor {
		for i := range ts {
			if ts[i].Name == from {
				ts[i].Name = to
			}
		}
		return ts
	}
}

func TestTensorErrors(t *testing.T) {
	const q = "language_model.model.layers.1.self_attn.q_proj"
	cases := []struct {
		name string
		dir  string
		want []string
	}{
		{"missing", mutated(t, func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			return del(ts, q+".scales")
		}), []string{q + ".weight", "has biases but no"}},
		{"unknown", mutated(t, rename("language_model.model.layers.0.linear_attn.dt_bias", "language_model.model.layers.0.linear_attn.dt_bias_x")),
			[]string{"dt_bias_x", "unknown tensors", "dt_bias\" is missing"}},
		{"shape", mutated(t, func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			for i := range ts {
				if ts[i].Name == "language_model.model.norm.weight" {
					ts[i].Shape = []int{ts[i].Shape[0] / 2, 2}
				}
			}
			return ts
		}), []string{"model.norm.weight", "shape [32 2], want [64]", ".safetensors"}},
		{"dtype", mutated(t, func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			for i := range ts {
				if ts[i].Name == q+".scales" {
					ts[i].DType = "F16"
				}
			}
			return ts
		}), []string{q + ".scales", "dtype F16, want BF16"}},
		{"bits", mutated(t, func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			// An 8-bit router stored with the 4-bit width.
			for i := range ts {
				if ts[i].Name == "language_model.model.layers.0.mlp.gate.weight" {
					ts[i].Shape = []int{ts[i].Shape[0] * 2, ts[i].Shape[1] / 2}
				}
			}
			return ts
		}), []string{"mlp.gate.weight", "8-bit codes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := checkpoint.Open(c.dir)
			if err == nil {
				m.Close()
				t.Fatal("opened a bad checkpoint")
			}
			if !errors.Is(err, checkpoint.ErrBadModel) {
				t.Errorf("error not marked ErrBadModel: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func del(ts []safetensors.NewTensor, name string) []safetensors.NewTensor {
	out := ts[:0]
	for _, t := range ts {
		if t.Name != name {
			out = append(out, t)
		}
	}
	return out
}

func TestSkippedTensors(t *testing.T) {
	dir := mutated(t, func(ts []safetensors.NewTensor) []safetensors.NewTensor {
		for _, n := range []string{"vision_tower.blocks.0.w", "language_model.mtp.fc.weight", "model.visual.patch.weight"} {
			ts = append(ts, safetensors.NewTensor{Name: n, DType: safetensors.F32, Shape: []int{1}, Data: make([]byte, 4)})
		}
		return ts
	})
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

func TestFileErrors(t *testing.T) {
	t.Run("truncated shard", func(t *testing.T) {
		dir := write(t, checkpointtest.Tiny())
		p := filepath.Join(dir, "model-00002-of-00002.safetensors")
		st, _ := os.Stat(p)
		if err := os.Truncate(p, st.Size()-100); err != nil {
			t.Fatal(err)
		}
		_, err := checkpoint.Open(dir)
		if !errors.Is(err, checkpoint.ErrBadModel) || !errors.Is(err, safetensors.ErrCorrupt) || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
			t.Fatalf("truncated shard: %v", err)
		}
	})
	t.Run("duplicate across shards", func(t *testing.T) {
		o := checkpointtest.Tiny()
		o.Mutate = func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			return append(ts, ts[0]) // lands in the last shard too
		}
		_, err := checkpoint.Open(write(t, o))
		if err == nil || !strings.Contains(err.Error(), "is in both") {
			t.Fatalf("duplicate: %v", err)
		}
	})
	t.Run("index escapes folder", func(t *testing.T) {
		dir := write(t, checkpointtest.Tiny())
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map":{"a":"../../etc/passwd"}}`), 0o644)
		_, err := checkpoint.Open(dir)
		if !errors.Is(err, checkpoint.ErrBadModel) || !strings.Contains(err.Error(), "not a file in the model folder") {
			t.Fatalf("escape: %v", err)
		}
	})
	t.Run("no weights", func(t *testing.T) {
		dir := write(t, checkpointtest.Tiny())
		os.Remove(filepath.Join(dir, "model.safetensors.index.json"))
		_, err := checkpoint.Open(dir)
		if !errors.Is(err, checkpoint.ErrBadModel) {
			t.Fatalf("no weights: %v", err)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	base := `"hidden_size":64,"num_hidden_layers":2,"vocab_size":10,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
	"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":16,"linear_conv_kernel_dim":4,
	"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":64,"shared_expert_intermediate_size":64`
	ok := `{"model_type":"qwen3_5_moe_text",` + base + `}`
	if c, err := checkpoint.ParseConfig([]byte(ok)); err != nil {
		t.Fatal(err)
	} else if c.Layers[0] != checkpoint.DeltaNet || c.RotaryDim != 8 || c.RMSNormEps != 1e-6 {
		t.Errorf("defaults: %+v", c)
	}
	cases := map[string]string{
		"not json":      `{`,
		"wrong type":    `{"model_type":"llama",` + base + `}`,
		"wrapper type":  `{"model_type":"llama","text_config":{` + base + `}}`,
		"zero heads":    `{"model_type":"qwen3_5_moe_text",` + base + `,"num_key_value_heads":0}`,
		"gqa":           `{"model_type":"qwen3_5_moe_text",` + base + `,"num_key_value_heads":3}`,
		"layer types":   `{"model_type":"qwen3_5_moe_text",` + base + `,"layer_types":["full_attention"]}`,
		"layer name":    `{"model_type":"qwen3_5_moe_text",` + base + `,"layer_types":["x","y"]}`,
		"eos range":     `{"model_type":"qwen3_5_moe_text",` + base + `,"eos_token_id":[3,99]}`,
		"eos type":      `{"model_type":"qwen3_5_moe_text",` + base + `,"eos_token_id":"x"}`,
		"bits":          `{"model_type":"qwen3_5_moe_text",` + base + `,"quantization":{"bits":3,"group_size":64}}`,
		"mode":          `{"model_type":"qwen3_5_moe_text",` + base + `,"quantization":{"bits":4,"group_size":64,"mode":"mxfp4"}}`,
		"override":      `{"model_type":"qwen3_5_moe_text",` + base + `,"quantization":{"bits":4,"group_size":64,"x":{"bits":5,"group_size":64}}}`,
		"absurd hidden": `{"model_type":"qwen3_5_moe_text",` + base + `,"hidden_size":1000000000}`,
		"layers":        `{"model_type":"qwen3_5_moe_text",` + base + `,"num_hidden_layers":100000}`,
		"tied":          `{"model_type":"qwen3_5_moe_text",` + base + `,"tie_word_embeddings":true}`,
		"topk":          `{"model_type":"qwen3_5_moe_text",` + base + `,"num_experts_per_tok":5}`,
	}
	for name, js := range cases {
		if _, err := checkpoint.ParseConfig([]byte(js)); !errors.Is(err, checkpoint.ErrBadModel) {
			t.Errorf("%s: got %v, want an ErrBadModel error", name, err)
		}
	}
}

// The 35B shape: 1.67 GB of weights per decode token by REFERENCE-ENGINE.md's
// arithmetic (4.5 bits per Q4 weight, 8.5 per Q8).
func TestQwen36ShapeBytes(t *testing.T) {
	m, err := checkpoint.ShapeOnly(checkpoint.Qwen36())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.DecodeWeightBytes(); got < 1.60e9 || got > 1.72e9 {
		t.Errorf("decode reads %d bytes of weights, want about 1.67e9", got)
	}
	if m.Layers[0].MoE.Router.Bits != 8 || m.Layers[3].Attn == nil || m.Layers[0].Delta == nil {
		t.Error("shape model lacks 8-bit routers or the 3:1 layer pattern")
	}
	var total int64
	total += m.Embed.Bytes() + m.LMHead.Bytes()
	for _, l := range m.Layers {
		total += l.MoE.Gate.Bytes() + l.MoE.Up.Bytes() + l.MoE.Down.Bytes()
	}
	// Experts, embedding and head are most of the 19.4 GB checkpoint.
	if total < 17e9 || total > 19.4e9 {
		t.Errorf("experts+embedding+head = %d bytes", total)
	}
}
