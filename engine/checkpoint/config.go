package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// LayerKind says which token mixer a layer uses.
type LayerKind int

// The two mixers of the architecture.
const (
	DeltaNet LayerKind = iota
	Attention
)

func (k LayerKind) String() string {
	if k == Attention {
		return "full_attention"
	}
	return "linear_attention"
}

// Quant is the quantization of one module.
type Quant struct {
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
}

// Config is the text model's configuration with every derived size the
// engine needs.
type Config struct {
	ModelType  string
	Hidden     int
	Layers     []LayerKind
	Vocab      int
	RMSNormEps float32

	Heads, KVHeads, HeadDim int
	RotaryDim               int
	RopeTheta               float64
	AttnOutputGate          bool

	LinearKeyHeads, LinearValueHeads int
	LinearKeyDim, LinearValueDim     int
	ConvKernel                       int

	Experts, TopK      int
	ExpertIntermediate int
	SharedIntermediate int
	NormTopK           bool

	MaxPositions int
	EOS          []int

	// Quant is the default quantization; Overrides hold per-module
	// settings keyed by module path, a nil entry meaning "not quantized".
	Quant     Quant
	Overrides map[string]*Quant

	// MRopeSection splits the rotary frequencies among the temporal,
	// height and width components of a 3D position (rope_parameters'
	// mrope_section; MRopeInterleaved: every third frequency, as
	// Qwen3.5/3.6 does). A text token's three components are equal, so
	// text alone is plain RoPE.
	MRopeSection     [3]int
	MRopeInterleaved bool

	// Vision is the vision tower's configuration and the prompt's image
	// tokens: set from config.json's vision_config, and cleared by [Open]
	// when the checkpoint holds no vision tensors, so that after Open it
	// says whether the model can see ([Config.HasVision]).
	Vision *VisionConfig
}

// Limits on config values, so a hostile config cannot make the loader
// allocate absurd state before the tensors are checked.
const (
	maxDim    = 1 << 20
	maxLayers = 1024
	maxVocab  = 1 << 22
)

// textConfig mirrors the fields of transformers' Qwen3_5MoeTextConfig that
// the engine reads.
type textConfig struct {
	ModelType          string          `json:"model_type"`
	HiddenSize         int             `json:"hidden_size"`
	NumHiddenLayers    int             `json:"num_hidden_layers"`
	LayerTypes         []string        `json:"layer_types"`
	FullAttnInterval   int             `json:"full_attention_interval"`
	VocabSize          int             `json:"vocab_size"`
	RMSNormEps         float64         `json:"rms_norm_eps"`
	NumAttentionHeads  int             `json:"num_attention_heads"`
	NumKeyValueHeads   int             `json:"num_key_value_heads"`
	HeadDim            int             `json:"head_dim"`
	AttnOutputGate     *bool           `json:"attn_output_gate"`
	RopeTheta          float64         `json:"rope_theta"`
	PartialRotary      float64         `json:"partial_rotary_factor"`
	RopeParameters     *ropeParameters `json:"rope_parameters"`
	LinearNumKeyHeads  int             `json:"linear_num_key_heads"`
	LinearNumValHeads  int             `json:"linear_num_value_heads"`
	LinearKeyHeadDim   int             `json:"linear_key_head_dim"`
	LinearValueHeadDim int             `json:"linear_value_head_dim"`
	LinearConvKernel   int             `json:"linear_conv_kernel_dim"`
	NumExperts         int             `json:"num_experts"`
	NumExpertsPerTok   int             `json:"num_experts_per_tok"`
	MoEIntermediate    int             `json:"moe_intermediate_size"`
	SharedIntermediate int             `json:"shared_expert_intermediate_size"`
	NormTopKProb       *bool           `json:"norm_topk_prob"`
	MaxPositions       int             `json:"max_position_embeddings"`
	TieEmbeddings      bool            `json:"tie_word_embeddings"`
	EOS                json.RawMessage `json:"eos_token_id"`
}

type ropeParameters struct {
	RopeTheta        float64 `json:"rope_theta"`
	PartialRotary    float64 `json:"partial_rotary_factor"`
	MRopeSection     []int   `json:"mrope_section"`
	MRopeInterleaved bool    `json:"mrope_interleaved"`
}

type topConfig struct {
	textConfig
	visionTokens
	VisionConfig       *visionConfig              `json:"vision_config"`
	TextConfig         *textConfig                `json:"text_config"`
	Quantization       map[string]json.RawMessage `json:"quantization"`
	QuantizationConfig map[string]json.RawMessage `json:"quantization_config"`
}

// supportedTypes are the model_type values of this architecture: the
// multimodal wrapper and the text model.
var supportedTypes = map[string]bool{"qwen3_5_moe": true, "qwen3_5_moe_text": true}

// ReadConfig reads and checks dir/config.json.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses config.json contents.
func ParseConfig(data []byte) (*Config, error) {
	var top topConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		return nil, bad("not valid JSON: %v", err)
	}
	tc := &top.textConfig
	if top.TextConfig != nil {
		tc = top.TextConfig
		if !supportedTypes[top.ModelType] {
			return nil, bad("model_type %q is not a Qwen3.5/3.6 MoE model (want qwen3_5_moe)", top.ModelType)
		}
	}
	if !supportedTypes[tc.ModelType] && !(top.TextConfig != nil && tc.ModelType == "") {
		return nil, bad("model_type %q is not a Qwen3.5/3.6 MoE model (want qwen3_5_moe)", tc.ModelType)
	}
	c := &Config{
		ModelType:          top.ModelType,
		Hidden:             tc.HiddenSize,
		Vocab:              tc.VocabSize,
		RMSNormEps:         float32(tc.RMSNormEps),
		Heads:              tc.NumAttentionHeads,
		KVHeads:            tc.NumKeyValueHeads,
		HeadDim:            tc.HeadDim,
		AttnOutputGate:     tc.AttnOutputGate == nil || *tc.AttnOutputGate,
		LinearKeyHeads:     tc.LinearNumKeyHeads,
		LinearValueHeads:   tc.LinearNumValHeads,
		LinearKeyDim:       tc.LinearKeyHeadDim,
		LinearValueDim:     tc.LinearValueHeadDim,
		ConvKernel:         tc.LinearConvKernel,
		Experts:            tc.NumExperts,
		TopK:               tc.NumExpertsPerTok,
		ExpertIntermediate: tc.MoEIntermediate,
		SharedIntermediate: tc.SharedIntermediate,
		NormTopK:           tc.NormTopKProb == nil || *tc.NormTopKProb,
		MaxPositions:       tc.MaxPositions,
	}
	if c.ModelType == "" {
		c.ModelType = tc.ModelType
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if tc.TieEmbeddings {
		return nil, bad("tie_word_embeddings is true; this architecture has an untied lm_head")
	}
	if !c.AttnOutputGate {
		return nil, bad("attn_output_gate is false; only the gated attention of Qwen3.5/3.6 is supported")
	}
	theta, partial := tc.RopeTheta, tc.PartialRotary
	if rp := tc.RopeParameters; rp != nil {
		if rp.RopeTheta != 0 {
			theta = rp.RopeTheta
		}
		if rp.PartialRotary != 0 {
			partial = rp.PartialRotary
		}
	}
	if theta == 0 {
		theta = 1e7
	}
	if partial == 0 {
		partial = 0.25
	}
	c.RopeTheta = theta
	c.RotaryDim = int(float64(c.HeadDim) * partial)
	if rp := tc.RopeParameters; rp != nil && len(rp.MRopeSection) == 3 {
		c.MRopeSection = [3]int(rp.MRopeSection)
		c.MRopeInterleaved = rp.MRopeInterleaved
	}
	c.Vision = top.vision()
	if err := c.setLayers(tc); err != nil {
		return nil, err
	}
	if err := c.setEOS(top.EOS, tc.EOS); err != nil {
		return nil, err
	}
	q := top.Quantization
	if q == nil {
		q = top.QuantizationConfig
	}
	if err := c.setQuant(q); err != nil {
		return nil, err
	}
	return c, c.check()
}

func (c *Config) setLayers(tc *textConfig) error {
	n := tc.NumHiddenLayers
	if n <= 0 || n > maxLayers {
		return bad("num_hidden_layers is %d, want 1..%d", n, maxLayers)
	}
	c.Layers = make([]LayerKind, n)
	switch {
	case tc.LayerTypes != nil:
		if len(tc.LayerTypes) != n {
			return bad("layer_types has %d entries for %d layers", len(tc.LayerTypes), n)
		}
		for i, s := range tc.LayerTypes {
			switch s {
			case "full_attention":
				c.Layers[i] = Attention
			case "linear_attention":
				c.Layers[i] = DeltaNet
			default:
				return bad("layer_types[%d] is %q, want full_attention or linear_attention", i, s)
			}
		}
	default:
		every := tc.FullAttnInterval
		if every <= 0 {
			every = 4
		}
		for i := range c.Layers {
			if (i+1)%every == 0 {
				c.Layers[i] = Attention
			}
		}
	}
	return nil
}

func parseIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(raw, &one) == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, bad("eos_token_id %s is neither an id nor a list of ids", raw)
	}
	return many, nil
}

// setEOS takes the top-level eos_token_id, which wins over the text
// config's (the wrapper lists both end-of-turn and end-of-text).
func (c *Config) setEOS(top, text json.RawMessage) error {
	ids, err := parseIDs(top)
	if err != nil {
		return err
	}
	if ids == nil {
		if ids, err = parseIDs(text); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if id < 0 || id >= c.Vocab {
			return bad("eos_token_id %d is outside the vocabulary of %d", id, c.Vocab)
		}
	}
	c.EOS = ids
	return nil
}

func (c *Config) setQuant(block map[string]json.RawMessage) error {
	c.Overrides = map[string]*Quant{}
	if block == nil {
		return nil
	}
	for k, v := range block {
		switch k {
		case "bits":
			if err := json.Unmarshal(v, &c.Quant.Bits); err != nil {
				return bad("quantization.bits: %v", err)
			}
		case "group_size":
			if err := json.Unmarshal(v, &c.Quant.GroupSize); err != nil {
				return bad("quantization.group_size: %v", err)
			}
		case "mode":
			var mode string
			if err := json.Unmarshal(v, &mode); err != nil || mode != "affine" {
				return bad("quantization.mode is %s; only MLX affine quantization is supported", v)
			}
		default:
			if string(v) == "false" {
				c.Overrides[k] = nil
				continue
			}
			var q Quant
			if err := json.Unmarshal(v, &q); err != nil {
				// Non-module keys (e.g. quant_method) are not overrides.
				if len(v) > 0 && v[0] != '{' {
					continue
				}
				return bad("quantization[%q]: %v", k, err)
			}
			if err := checkQuant(q, "quantization["+k+"]"); err != nil {
				return err
			}
			c.Overrides[k] = &q
		}
	}
	if c.Quant.Bits != 0 || c.Quant.GroupSize != 0 {
		return checkQuant(c.Quant, "quantization")
	}
	return nil
}

func checkQuant(q Quant, what string) error {
	if q.Bits != 4 && q.Bits != 8 {
		return bad("%s: %d bits; only 4 and 8 are supported", what, q.Bits)
	}
	if q.GroupSize <= 0 || q.GroupSize%32 != 0 || q.GroupSize > 1024 {
		return bad("%s: group_size %d; want a positive multiple of 32 up to 1024", what, q.GroupSize)
	}
	return nil
}

// QuantFor returns the quantization of the module at path (without the
// ".weight" suffix): its override if the config has one, else the default.
// ok is false when the module is not quantized.
func (c *Config) QuantFor(path string) (q Quant, ok bool) {
	if o, has := c.Overrides[path]; has {
		if o == nil {
			return Quant{}, false
		}
		return *o, true
	}
	// Overrides may be keyed without the multimodal wrapper's prefix.
	if o, has := c.Overrides[strings.TrimPrefix(path, "language_model.")]; has && o != nil {
		return *o, true
	}
	return c.Quant, c.Quant.Bits != 0
}

func (c *Config) check() error {
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"vocab_size", c.Vocab},
		{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim},
		{"linear_num_key_heads", c.LinearKeyHeads}, {"linear_num_value_heads", c.LinearValueHeads},
		{"linear_key_head_dim", c.LinearKeyDim}, {"linear_value_head_dim", c.LinearValueDim},
		{"linear_conv_kernel_dim", c.ConvKernel},
		{"num_experts", c.Experts}, {"num_experts_per_tok", c.TopK},
		{"moe_intermediate_size", c.ExpertIntermediate}, {"shared_expert_intermediate_size", c.SharedIntermediate},
	}
	for _, p := range pos {
		if p.v <= 0 || p.v > maxDim {
			return bad("%s is %d, want 1..%d", p.name, p.v, maxDim)
		}
	}
	switch {
	case c.Vocab > maxVocab:
		return bad("vocab_size %d exceeds %d", c.Vocab, maxVocab)
	case c.Heads%c.KVHeads != 0:
		return bad("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	case c.LinearValueHeads%c.LinearKeyHeads != 0:
		return bad("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.LinearValueHeads, c.LinearKeyHeads)
	case c.TopK > c.Experts:
		return bad("num_experts_per_tok %d exceeds num_experts %d", c.TopK, c.Experts)
	case c.RotaryDim <= 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0:
		return bad("rotary dimension %d (head_dim x partial_rotary_factor) must be even and within head_dim %d", c.RotaryDim, c.HeadDim)
	case c.ConvKernel > 16:
		return bad("linear_conv_kernel_dim %d exceeds 16", c.ConvKernel)
	case !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0):
		return bad("rope_theta %v must be a finite number above 1", c.RopeTheta)
	case !(c.RMSNormEps > 0):
		return bad("rms_norm_eps %v must be positive", c.RMSNormEps)
	}
	return nil
}

// ConvChannels is the width of the DeltaNet convolution: q, k and v.
func (c *Config) ConvChannels() int {
	return 2*c.LinearKeyHeads*c.LinearKeyDim + c.LinearValueHeads*c.LinearValueDim
}
