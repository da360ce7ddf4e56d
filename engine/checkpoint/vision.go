package checkpoint

import (
	"fmt"
	"math"
	"strings"

	"petal/engine/safetensors"
)

// VisionConfig is the vision tower of a Qwen3.5/3.6 checkpoint
// (transformers' Qwen3_5MoeVisionConfig) and the ids of the prompt's
// image tokens.
type VisionConfig struct {
	Depth, Hidden, Intermediate, Heads int
	InChannels, Patch, TemporalPatch   int
	Merge                              int // spatial_merge_size: Merge² patches make one token
	OutHidden                          int // the merger's output: the text model's hidden size
	Positions                          int // learned position grid, Side² entries
	HiddenAct                          string

	// ImageToken is the id standing for one merged patch in a prompt,
	// VisionStart and VisionEnd the markers around an image's tokens.
	ImageToken, VisionStart, VisionEnd int
}

// HasVision reports whether the model takes images: after [Open], whether
// the checkpoint holds a vision tower.
func (c *Config) HasVision() bool { return c.Vision != nil }

// Side is the learned position grid's side.
func (v *VisionConfig) Side() int { return int(math.Round(math.Sqrt(float64(v.Positions)))) }

// HeadDim is one attention head's width.
func (v *VisionConfig) HeadDim() int { return v.Hidden / max(v.Heads, 1) }

// PatchDim is one patch's pixel values: channels x temporal x patch².
func (v *VisionConfig) PatchDim() int { return v.InChannels * v.TemporalPatch * v.Patch * v.Patch }

// visionConfig mirrors Qwen3_5MoeVisionConfig's fields in config.json.
type visionConfig struct {
	Depth          int    `json:"depth"`
	HiddenSize     int    `json:"hidden_size"`
	Intermediate   int    `json:"intermediate_size"`
	NumHeads       int    `json:"num_heads"`
	InChannels     int    `json:"in_channels"`
	PatchSize      int    `json:"patch_size"`
	TemporalPatch  int    `json:"temporal_patch_size"`
	SpatialMerge   int    `json:"spatial_merge_size"`
	OutHiddenSize  int    `json:"out_hidden_size"`
	NumPositions   int    `json:"num_position_embeddings"`
	HiddenAct      string `json:"hidden_act"`
	DeepstackIndex []int  `json:"deepstack_visual_indexes"`
}

// visionTokens are the wrapper config's token ids.
type visionTokens struct {
	ImageTokenID       *int `json:"image_token_id"`
	VisionStartTokenID *int `json:"vision_start_token_id"`
	VisionEndTokenID   *int `json:"vision_end_token_id"`
}

// Qwen3.5/3.6's values where config.json leaves a field out, as
// transformers' defaults fill them.
var visionDefaults = VisionConfig{
	Depth: 27, Hidden: 1152, Intermediate: 4304, Heads: 16, InChannels: 3, Patch: 16, TemporalPatch: 2,
	Merge: 2, Positions: 2304, HiddenAct: "gelu_pytorch_tanh",
	ImageToken: 248056, VisionStart: 248053, VisionEnd: 248054,
}

// vision is the config's vision tower with defaults filled in, nil when
// config.json has no vision_config; it is checked by [Open] only when the
// checkpoint holds the tower, so a text model loads whatever its
// vision_config says.
func (t *topConfig) vision() *VisionConfig {
	vc := t.VisionConfig
	if vc == nil {
		return nil
	}
	v := visionDefaults
	set := func(dst *int, src int) {
		if src != 0 {
			*dst = src
		}
	}
	set(&v.Depth, vc.Depth)
	set(&v.Hidden, vc.HiddenSize)
	set(&v.Intermediate, vc.Intermediate)
	set(&v.Heads, vc.NumHeads)
	set(&v.InChannels, vc.InChannels)
	set(&v.Patch, vc.PatchSize)
	set(&v.TemporalPatch, vc.TemporalPatch)
	set(&v.Merge, vc.SpatialMerge)
	set(&v.OutHidden, vc.OutHiddenSize)
	set(&v.Positions, vc.NumPositions)
	if vc.HiddenAct != "" {
		v.HiddenAct = vc.HiddenAct
	}
	if len(vc.DeepstackIndex) > 0 {
		// Qwen3-VL hands features to the text model's layers; Qwen3.5/3.6
		// has none, and a tower that does is not this architecture's.
		v.HiddenAct = "deepstack"
	}
	for _, id := range []struct {
		dst *int
		src *int
	}{{&v.ImageToken, t.ImageTokenID}, {&v.VisionStart, t.VisionStartTokenID}, {&v.VisionEnd, t.VisionEndTokenID}} {
		if id.src != nil {
			*id.dst = *id.src
		}
	}
	return &v
}

// Limits on a vision tower's config, checked before any tensor is read.
const (
	maxVisionDepth = 256
	maxPatch       = 64
)

// check validates the tower's sizes against the text model's.
func (v *VisionConfig) check(c *Config) error {
	for _, p := range []struct {
		name string
		v    int
	}{
		{"vision_config.depth", v.Depth}, {"vision_config.hidden_size", v.Hidden},
		{"vision_config.intermediate_size", v.Intermediate}, {"vision_config.num_heads", v.Heads},
		{"vision_config.in_channels", v.InChannels}, {"vision_config.patch_size", v.Patch},
		{"vision_config.temporal_patch_size", v.TemporalPatch}, {"vision_config.spatial_merge_size", v.Merge},
		{"vision_config.num_position_embeddings", v.Positions},
	} {
		if p.v <= 0 || p.v > maxDim {
			return bad("%s is %d, want 1..%d", p.name, p.v, maxDim)
		}
	}
	sec := c.MRopeSection
	switch {
	case v.Depth > maxVisionDepth:
		return bad("vision_config.depth %d exceeds %d", v.Depth, maxVisionDepth)
	case v.Patch > maxPatch || v.TemporalPatch > maxPatch || v.InChannels > 4 || v.Merge > maxPatch:
		return bad("vision_config: patch %d, temporal patch %d, %d channels or merge %d out of range", v.Patch, v.TemporalPatch, v.InChannels, v.Merge)
	case v.HiddenAct != "gelu_pytorch_tanh":
		return bad("vision_config: activation %q (or deepstack features); only Qwen3.5/3.6's gelu_pytorch_tanh tower without deepstack is supported", v.HiddenAct)
	case v.Hidden%v.Heads != 0 || v.HeadDim()%4 != 0:
		return bad("vision_config: hidden_size %d over %d heads must give a head width that is a multiple of 4 (2D rotary halves)", v.Hidden, v.Heads)
	case v.Side()*v.Side() != v.Positions:
		return bad("vision_config.num_position_embeddings %d is not a square grid", v.Positions)
	case v.OutHidden != c.Hidden:
		return bad("vision_config.out_hidden_size %d is not the text model's hidden size %d", v.OutHidden, c.Hidden)
	case min(sec[0], sec[1], sec[2]) < 0 || sec[0]+sec[1]+sec[2] != c.RotaryDim/2:
		return bad("mrope_section %v must split the %d rotary frequencies among time, height and width", sec, c.RotaryDim/2)
	case !c.MRopeInterleaved:
		return bad("mrope_interleaved is false; only Qwen3.5/3.6's interleaved mRoPE is supported")
	}
	for _, id := range []int{v.ImageToken, v.VisionStart, v.VisionEnd} {
		if id < 0 || id >= c.Vocab {
			return bad("vision token id %d is outside the vocabulary of %d", id, c.Vocab)
		}
	}
	return nil
}

// VisionBlock is one transformer block of the tower: pre-norm attention
// with a fused qkv, then a GELU MLP, each with biases.
type VisionBlock struct {
	Norm1, Norm1Bias, Norm2, Norm2Bias  Vector
	QKV, Proj, FC1, FC2                 Matrix
	QKVBias, ProjBias, FC1Bias, FC2Bias Vector
}

// VisionWeights are the vision tower's tensors.
type VisionWeights struct {
	// Patch is the Conv3d weight [out][in·temporal·patch²] as one matrix
	// whose columns follow the pixel values' order (channel, time, y, x):
	// ChannelsLast says the file stores it as mlx-vlm does, [out, t, p, p,
	// in], whose columns a reader must permute.
	Patch        Vector
	ChannelsLast bool
	PatchBias    Vector
	PosEmbed     Vector // [Positions][Hidden]
	Blocks       []VisionBlock
	// The merger: a LayerNorm of each patch, Merge² patches concatenated,
	// FC1, GELU, FC2 into the text model's width.
	MergerNorm, MergerNormBias   Vector
	MergerFC1, MergerFC2         Matrix
	MergerFC1Bias, MergerFC2Bias Vector
}

// visionPrefixes are where checkpoints keep the tower: mlx-vlm's layout
// and transformers'.
var visionPrefixes = []string{"vision_tower.", "model.visual."}

// bindVision binds the tower when the checkpoint holds one. Without one,
// or with one it cannot use (some tensors missing or malformed, a config
// it does not support), the model is text-only: the config's Vision is
// cleared and m.VisionErr says why, so that a text model whose files carry
// a stray or partial tower still loads, as the reference engine skips it.
func (b *binder) bindVision(m *Model) {
	if err := b.tower(m); err != nil {
		m.VisionErr = err
		m.Vision = nil
	}
	if m.Vision == nil && !b.shapeOnly {
		b.cfg.Vision = nil
	}
}

func (b *binder) tower(m *Model) error {
	prefix := ""
	for name := range b.tensors {
		for _, p := range visionPrefixes {
			if strings.HasPrefix(name, p) {
				prefix = p
			}
		}
	}
	v := b.cfg.Vision
	if prefix == "" || b.shapeOnly {
		return nil
	}
	if v == nil {
		return bad("the checkpoint holds %s tensors but config.json has no vision_config", prefix)
	}
	if err := v.check(b.cfg); err != nil {
		return err
	}
	saved := b.prefix
	b.prefix = prefix
	defer func() { b.prefix = saved }()
	w := &VisionWeights{Blocks: make([]VisionBlock, v.Depth)}
	h, in := v.Hidden, v.Intermediate
	var errs []error
	vec := func(dst *Vector, name string, n int) { errs = append(errs, b.vector(dst, name, n)) }
	mat := func(dst *Matrix, name string, rows, cols int) {
		var err error
		*dst, err = b.matrix(name, 0, rows, cols)
		errs = append(errs, err)
	}
	errs = append(errs, b.patchEmbed(w, v))
	vec(&w.PatchBias, "patch_embed.proj.bias", h)
	errs = append(errs, b.dense(&w.PosEmbed, "pos_embed.weight", v.Positions, h))
	for i := range w.Blocks {
		bl := &w.Blocks[i]
		p := fmt.Sprintf("blocks.%d.", i)
		vec(&bl.Norm1, p+"norm1.weight", h)
		vec(&bl.Norm1Bias, p+"norm1.bias", h)
		vec(&bl.Norm2, p+"norm2.weight", h)
		vec(&bl.Norm2Bias, p+"norm2.bias", h)
		mat(&bl.QKV, p+"attn.qkv", 3*h, h)
		vec(&bl.QKVBias, p+"attn.qkv.bias", 3*h)
		mat(&bl.Proj, p+"attn.proj", h, h)
		vec(&bl.ProjBias, p+"attn.proj.bias", h)
		mat(&bl.FC1, p+"mlp.linear_fc1", in, h)
		vec(&bl.FC1Bias, p+"mlp.linear_fc1.bias", in)
		mat(&bl.FC2, p+"mlp.linear_fc2", h, in)
		vec(&bl.FC2Bias, p+"mlp.linear_fc2.bias", h)
	}
	mh := h * v.Merge * v.Merge
	vec(&w.MergerNorm, "merger.norm.weight", h)
	vec(&w.MergerNormBias, "merger.norm.bias", h)
	mat(&w.MergerFC1, "merger.linear_fc1", mh, mh)
	vec(&w.MergerFC1Bias, "merger.linear_fc1.bias", mh)
	mat(&w.MergerFC2, "merger.linear_fc2", v.OutHidden, mh)
	vec(&w.MergerFC2Bias, "merger.linear_fc2.bias", v.OutHidden)
	if err := joinFirst(errs); err != nil {
		return err
	}
	m.Vision = w
	return nil
}

// patchEmbed binds the Conv3d weight in either layout: mlx-vlm's
// channels-last [out, t, p, p, in] or transformers' [out, in, t, p, p].
func (b *binder) patchEmbed(w *VisionWeights, v *VisionConfig) error {
	t, full := b.lookup("patch_embed.proj.weight")
	mlx := []int{v.Hidden, v.TemporalPatch, v.Patch, v.Patch, v.InChannels}
	torch := []int{v.Hidden, v.InChannels, v.TemporalPatch, v.Patch, v.Patch}
	switch {
	case t == nil:
		return bad("tensor %q is missing (want %v)", full, mlx)
	case t.DType != safetensors.BF16 && t.DType != safetensors.F32:
		return bad("%s: tensor %q: dtype %s, want BF16 or F32", where(t), full, t.DType)
	case shapeEq(t.Shape, mlx...):
		w.ChannelsLast = true
	case shapeEq(t.Shape, torch...):
	default:
		return bad("%s: tensor %q: shape %v, want %v or %v", where(t), full, t.Shape, mlx, torch)
	}
	w.Patch = Vector{Name: full, T: t}
	return nil
}

// dense binds an unquantized [rows, cols] table.
func (b *binder) dense(dst *Vector, name string, rows, cols int) error {
	t, full := b.lookup(name)
	switch {
	case t == nil:
		return bad("tensor %q is missing (want [%d, %d])", full, rows, cols)
	case t.DType != safetensors.BF16 && t.DType != safetensors.F32:
		return bad("%s: tensor %q: dtype %s, want BF16 or F32", where(t), full, t.DType)
	case !shapeEq(t.Shape, rows, cols):
		return bad("%s: tensor %q: shape %v, want [%d, %d]", where(t), full, t.Shape, rows, cols)
	}
	*dst = Vector{Name: full, T: t}
	return nil
}
