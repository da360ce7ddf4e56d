package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"petal/engine/safetensors"
)

// MTPFile is the extra shard that holds the multi-token-prediction head
// in the model folder: the original checkpoint's mtp.* tensors converted
// as MLX converts the main layers (the mlx-community checkpoints drop
// them). An index need not list it; a folder without it has no head.
const MTPFile = "model-mtp.safetensors"

// mtpGateBits is the precision of the MTP layer's router and shared-expert
// gate when the config names no override for them: 8 bits, as MLX
// quantizes every layer's gates.
const mtpGateBits = 8

// MTPWeights are the multi-token-prediction head: from the main model's
// last hidden state at position t and the embedding of the token at t+1
// it predicts the token at t+2, through its own decoder layer (a gated
// full-attention MoE layer with its own KV cache) and the shared LM head.
type MTPWeights struct {
	// PreNormEmbed and PreNormHidden normalize the two inputs of FC.
	PreNormEmbed, PreNormHidden Vector
	// FC maps [normed embedding | normed hidden] (2*Hidden) to Hidden.
	FC    Matrix
	Layer Layer
	// Norm is the final norm before the shared LM head.
	Norm Vector
}

// bindMTP opens MTPFile when the folder has it and binds the head into
// m.MTP from its tensors. A shard that is damaged, misses a tensor or holds one that is not
// the head's is an ErrBadModel naming the tensor: a half-installed head
// is refused, never run.
func (b *binder) bindMTP(m *Model) error {
	path := filepath.Join(m.Dir, MTPFile)
	listed := false
	for _, s := range m.Shards {
		listed = listed || s.Path == path
	}
	if !listed {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		f, err := safetensors.Open(path)
		if err != nil {
			if errors.Is(err, safetensors.ErrCorrupt) {
				return fmt.Errorf("%w: %w", ErrBadModel, err)
			}
			return err
		}
		m.Shards = append(m.Shards, f)
		for _, t := range f.Tensors() {
			if !strings.HasPrefix(t.Name, b.prefix+"mtp.") {
				return bad("%s: tensor %q is not part of the MTP head (want names under %q)", path, t.Name, b.prefix+"mtp.")
			}
			// A main shard's own mtp.* tensors (an unconverted head, which
			// the main binding skips) give way to the converted ones.
			b.tensors[t.Name] = t
		}
	}
	c := b.cfg
	mb := *b
	mb.cfg = mtpConfig(c, b.prefix)
	w := &MTPWeights{}
	var err error
	errs := []error{
		mb.vector(&w.PreNormEmbed, "mtp.pre_fc_norm_embedding.weight", c.Hidden),
		mb.vector(&w.PreNormHidden, "mtp.pre_fc_norm_hidden.weight", c.Hidden),
		mb.vector(&w.Norm, "mtp.norm.weight", c.Hidden),
	}
	w.FC, err = mb.matrix("mtp.fc", 0, c.Hidden, 2*c.Hidden)
	errs = append(errs, err)
	errs = append(errs, mb.layerAt(&w.Layer, "mtp.layers.0.", Attention)...)
	var unused []string
	for name := range b.tensors {
		if t := b.tensors[name]; t.File != nil && t.File.Path == path && !b.used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	for _, name := range unused {
		errs = append(errs, bad("%s: tensor %q is not part of the MTP head (one layer)", path, name))
	}
	if err := joinFirst(errs); err != nil {
		return fmt.Errorf("MTP head (%s): %w", MTPFile, err)
	}
	m.MTP = w
	return nil
}

// mtpConfig is c with the MTP layer's gates at mtpGateBits unless c
// quantizes them otherwise: the converted checkpoints' configs list the
// main layers' gates only.
func mtpConfig(c *Config, prefix string) *Config {
	mc := *c
	mc.Overrides = make(map[string]*Quant, len(c.Overrides)+2)
	for k, v := range c.Overrides {
		mc.Overrides[k] = v
	}
	for _, g := range []string{"mtp.layers.0.mlp.gate", "mtp.layers.0.mlp.shared_expert_gate"} {
		if _, has := c.Overrides[prefix+g]; has {
			continue
		}
		if _, has := c.Overrides[g]; has {
			continue
		}
		mc.Overrides[prefix+g] = &Quant{Bits: mtpGateBits, GroupSize: c.Quant.GroupSize}
	}
	return &mc
}
