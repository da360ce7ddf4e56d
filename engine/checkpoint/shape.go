package checkpoint

import "fmt"

// Qwen36 is the configuration of Qwen3.6-35B-A3B (and Qwen3.5-35B-A3B) as
// mlx-community's 4-bit conversion ships it: MODEL.md's shapes, 4-bit
// groups of 64, the router and shared-expert gates at 8 bits.
func Qwen36() *Config {
	c := &Config{
		ModelType: "qwen3_5_moe", Hidden: 2048, Vocab: 248320, RMSNormEps: 1e-6,
		Heads: 16, KVHeads: 2, HeadDim: 256, RotaryDim: 64, RopeTheta: 1e7, AttnOutputGate: true,
		LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
		Experts: 256, TopK: 8, ExpertIntermediate: 512, SharedIntermediate: 512, NormTopK: true,
		MaxPositions: 262144, EOS: []int{248046, 248044},
		Quant:     Quant{Bits: 4, GroupSize: 64},
		Overrides: map[string]*Quant{},
	}
	c.Layers = make([]LayerKind, 40)
	for i := range c.Layers {
		if (i+1)%4 == 0 {
			c.Layers[i] = Attention
		}
		for _, g := range []string{"mlp.gate", "mlp.shared_expert_gate"} {
			c.Overrides[fmt.Sprintf("language_model.model.layers.%d.%s", i, g)] = &Quant{Bits: 8, GroupSize: 64}
		}
	}
	return c
}
