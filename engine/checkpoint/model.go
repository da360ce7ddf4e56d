package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"petal/engine/damaged"
	"petal/engine/safetensors"
)

// ErrBadModel marks every error caused by the checkpoint's files (config,
// index, shards, tensors), so a caller can offer to fetch them again; it is
// also [damaged.Err].
var ErrBadModel = damaged.New("bad model files")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadModel, fmt.Sprintf(format, args...))
}

// skipPrefixes are tensors a text-only engine may find and ignore: the
// vision tower and the multi-token-prediction head.
var skipPrefixes = []string{"vision_tower.", "model.visual.", "mtp.", "language_model.mtp.", "model.mtp."}

// Matrix is a linear weight [Rows, Cols] (or a stack of Experts of them),
// either MLX affine-quantized (Bits 4 or 8) or dense (Bits 0: BF16 or F32).
type Matrix struct {
	Name      string // module path, without ".weight"
	Experts   int    // 0 for a single matrix
	Rows      int
	Cols      int
	Bits      int
	GroupSize int
	Weight    *safetensors.Tensor
	Scales    *safetensors.Tensor // nil when dense
	Biases    *safetensors.Tensor // nil when dense
}

// Vector is a small unquantized tensor (norm gains, conv taps, gates).
type Vector struct {
	Name string
	T    *safetensors.Tensor
}

// AttentionWeights are a gated full-attention layer's weights.
type AttentionWeights struct {
	Q, K, V, O   Matrix // Q has Heads*2*HeadDim rows: per head [query | gate]
	QNorm, KNorm Vector
}

// DeltaNetWeights are a Gated DeltaNet layer's weights.
type DeltaNetWeights struct {
	QKV, Z, B, A, Out Matrix
	Conv              Vector // [channels, kernel] in either stored layout
	DtBias, ALog      Vector
	Norm              Vector
}

// MoEWeights are a sparse MoE block: router, stacked experts, shared expert.
type MoEWeights struct {
	Router                           Matrix
	Gate, Up, Down                   Matrix // Experts > 0
	SharedGate, SharedUp, SharedDown Matrix
	SharedExpertGate                 Matrix // one row
}

// Layer is one decoder layer.
type Layer struct {
	Kind                LayerKind
	InputNorm, PostNorm Vector
	Attn                *AttentionWeights
	Delta               *DeltaNetWeights
	MoE                 MoEWeights
}

// Model is an opened checkpoint: config, mapped shards, and every weight.
type Model struct {
	Dir       string
	Config    *Config
	Embed     Matrix
	LMHead    Matrix
	FinalNorm Vector
	Layers    []Layer
	// MTP is the multi-token-prediction head, from MTPFile when the folder
	// has it; nil otherwise.
	MTP    *MTPWeights
	Shards []*safetensors.File
	// Vision is the vision tower; nil for a text-only checkpoint, where
	// VisionErr says why when the files hold a tower it could not bind.
	Vision    *VisionWeights
	VisionErr error
}

// Close unmaps every shard.
func (m *Model) Close() error {
	var first error
	for _, s := range m.Shards {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	m.Shards = nil
	return first
}

// Open reads the checkpoint in dir and validates every tensor.
func Open(dir string) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	files, err := shardFiles(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Dir: dir, Config: cfg}
	tensors := map[string]*safetensors.Tensor{}
	for _, p := range files {
		f, err := safetensors.Open(p)
		if err != nil {
			m.Close()
			if errors.Is(err, safetensors.ErrCorrupt) {
				return nil, fmt.Errorf("%w: %w", ErrBadModel, err)
			}
			return nil, err
		}
		m.Shards = append(m.Shards, f)
		for _, t := range f.Tensors() {
			if prev := tensors[t.Name]; prev != nil {
				m.Close()
				return nil, bad("tensor %q is in both %s and %s", t.Name, prev.File.Path, p)
			}
			tensors[t.Name] = t
		}
	}
	b := &binder{cfg: cfg, tensors: tensors, used: map[string]bool{}}
	if err := b.bind(m); err != nil {
		m.Close()
		return nil, err
	}
	if err := b.bindMTP(m); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// shardFiles lists the safetensors files: those named by the index, else
// the single model.safetensors.
func shardFiles(dir string) ([]string, error) {
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	data, err := os.ReadFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(single); err != nil {
			return nil, bad("%s: neither model.safetensors.index.json nor model.safetensors is present", dir)
		}
		return []string{single}, nil
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, bad("%s: %v", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, bad("%s: weight_map is empty", idxPath)
	}
	seen := map[string]bool{}
	var out []string
	for name, f := range idx.WeightMap {
		if f == "" || filepath.Base(f) != f || f == "." || f == ".." {
			return nil, bad("%s: tensor %q maps to %q, which is not a file in the model folder", idxPath, name, f)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, filepath.Join(dir, f))
		}
	}
	sort.Strings(out)
	return out, nil
}

type binder struct {
	// shapeOnly fabricates every tensor (see ShapeOnly) instead of
	// looking it up.
	shapeOnly bool
	cfg       *Config
	tensors   map[string]*safetensors.Tensor
	used      map[string]bool
	prefix    string // "language_model." for the multimodal layout, else ""
}

func (b *binder) bind(m *Model) error {
	c := b.cfg
	switch {
	case b.shapeOnly:
	case b.tensors["language_model.model.embed_tokens.weight"] != nil:
		b.prefix = "language_model."
	case b.tensors["model.embed_tokens.weight"] != nil:
	default:
		return bad("no embedding tensor: want language_model.model.embed_tokens.weight or model.embed_tokens.weight")
	}
	var errs []error
	var err error
	m.Embed, err = b.matrix("model.embed_tokens", 0, c.Vocab, c.Hidden)
	errs = append(errs, err, b.vector(&m.FinalNorm, "model.norm.weight", c.Hidden))
	m.LMHead, err = b.matrix("lm_head", 0, c.Vocab, c.Hidden)
	errs = append(errs, err)
	m.Layers = make([]Layer, len(c.Layers))
	for i, kind := range c.Layers {
		errs = append(errs, b.layer(&m.Layers[i], i, kind)...)
	}
	b.bindVision(m)
	var unused []string
	for name := range b.tensors {
		if !b.used[name] && !skipped(name) {
			unused = append(unused, name)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		more := ""
		if len(unused) > maxReported {
			more = fmt.Sprintf(" and %d more", len(unused)-maxReported)
			unused = unused[:maxReported]
		}
		errs = append(errs, bad("unknown tensors %s%s (in %s): not part of this architecture", strings.Join(unused, ", "), more, b.tensors[unused[0]].File.Path))
	}
	return joinFirst(errs)
}

func skipped(name string) bool {
	for _, p := range skipPrefixes {
		if strings.HasPrefix(name, p) || strings.HasPrefix(name, "language_model."+p) {
			return true
		}
	}
	return false
}

// maxReported bounds how many tensor errors one message lists; a wrong
// folder can otherwise produce thousands.
const maxReported = 8

// joinFirst joins the first few non-nil errors and counts the rest.
func joinFirst(errs []error) error {
	var kept []error
	n := 0
	for _, e := range errs {
		if e == nil {
			continue
		}
		if n < maxReported {
			kept = append(kept, e)
		}
		n++
	}
	if n > maxReported {
		kept = append(kept, fmt.Errorf("and %d more tensor errors", n-maxReported))
	}
	return errors.Join(kept...)
}

func (b *binder) layer(l *Layer, i int, kind LayerKind) []error {
	return b.layerAt(l, fmt.Sprintf("model.layers.%d.", i), kind)
}

// layerAt binds the decoder layer whose tensors are named p+...
func (b *binder) layerAt(l *Layer, p string, kind LayerKind) []error {
	c := b.cfg
	l.Kind = kind
	var errs []error
	vec := func(v *Vector, name string, n int) { errs = append(errs, b.vector(v, p+name, n)) }
	mat := func(mp *Matrix, name string, experts, rows, cols int) {
		var err error
		*mp, err = b.matrix(p+name, experts, rows, cols)
		errs = append(errs, err)
	}
	vec(&l.InputNorm, "input_layernorm.weight", c.Hidden)
	vec(&l.PostNorm, "post_attention_layernorm.weight", c.Hidden)
	switch kind {
	case Attention:
		a := &AttentionWeights{}
		l.Attn = a
		mat(&a.Q, "self_attn.q_proj", 0, c.Heads*c.HeadDim*2, c.Hidden)
		mat(&a.K, "self_attn.k_proj", 0, c.KVHeads*c.HeadDim, c.Hidden)
		mat(&a.V, "self_attn.v_proj", 0, c.KVHeads*c.HeadDim, c.Hidden)
		mat(&a.O, "self_attn.o_proj", 0, c.Hidden, c.Heads*c.HeadDim)
		vec(&a.QNorm, "self_attn.q_norm.weight", c.HeadDim)
		vec(&a.KNorm, "self_attn.k_norm.weight", c.HeadDim)
	case DeltaNet:
		d := &DeltaNetWeights{}
		l.Delta = d
		vd := c.LinearValueHeads * c.LinearValueDim
		mat(&d.QKV, "linear_attn.in_proj_qkv", 0, c.ConvChannels(), c.Hidden)
		mat(&d.Z, "linear_attn.in_proj_z", 0, vd, c.Hidden)
		mat(&d.B, "linear_attn.in_proj_b", 0, c.LinearValueHeads, c.Hidden)
		mat(&d.A, "linear_attn.in_proj_a", 0, c.LinearValueHeads, c.Hidden)
		mat(&d.Out, "linear_attn.out_proj", 0, c.Hidden, vd)
		errs = append(errs, b.conv(&d.Conv, p+"linear_attn.conv1d.weight"))
		vec(&d.DtBias, "linear_attn.dt_bias", c.LinearValueHeads)
		vec(&d.ALog, "linear_attn.A_log", c.LinearValueHeads)
		vec(&d.Norm, "linear_attn.norm.weight", c.LinearValueDim)
	}
	moe := &l.MoE
	mat(&moe.Router, "mlp.gate", 0, c.Experts, c.Hidden)
	mat(&moe.Gate, "mlp.switch_mlp.gate_proj", c.Experts, c.ExpertIntermediate, c.Hidden)
	mat(&moe.Up, "mlp.switch_mlp.up_proj", c.Experts, c.ExpertIntermediate, c.Hidden)
	mat(&moe.Down, "mlp.switch_mlp.down_proj", c.Experts, c.Hidden, c.ExpertIntermediate)
	mat(&moe.SharedGate, "mlp.shared_expert.gate_proj", 0, c.SharedIntermediate, c.Hidden)
	mat(&moe.SharedUp, "mlp.shared_expert.up_proj", 0, c.SharedIntermediate, c.Hidden)
	mat(&moe.SharedDown, "mlp.shared_expert.down_proj", 0, c.Hidden, c.SharedIntermediate)
	mat(&moe.SharedExpertGate, "mlp.shared_expert_gate", 0, 1, c.Hidden)
	return errs
}

// lookup finds a tensor by its name under the layout's prefix and marks it
// used.
func (b *binder) lookup(name string) (*safetensors.Tensor, string) {
	full := b.prefix + name
	t := b.tensors[full]
	if t != nil {
		b.used[full] = true
	}
	return t, full
}

func where(t *safetensors.Tensor) string { return t.File.Path }

func shapeEq(s []int, want ...int) bool {
	if len(s) != len(want) {
		return false
	}
	for i := range s {
		if s[i] != want[i] {
			return false
		}
	}
	return true
}

func (b *binder) vector(v *Vector, name string, n int) error {
	if b.shapeOnly {
		*v = Vector{Name: b.prefix + name, T: fake(b.prefix+name, safetensors.F32, true, n)}
		return nil
	}
	t, full := b.lookup(name)
	if t == nil {
		return bad("tensor %q is missing (want a [%d] vector)", full, n)
	}
	if t.DType != safetensors.BF16 && t.DType != safetensors.F32 {
		return bad("%s: tensor %q: dtype %s, want BF16 or F32", where(t), full, t.DType)
	}
	if !shapeEq(t.Shape, n) {
		return bad("%s: tensor %q: shape %v, want [%d]", where(t), full, t.Shape, n)
	}
	*v = Vector{Name: full, T: t}
	return nil
}

// conv binds the depthwise conv taps, stored [C, K, 1] by MLX or [C, 1, K]
// by transformers; both put channel c's taps at c*K..c*K+K-1.
func (b *binder) conv(v *Vector, name string) error {
	c := b.cfg
	ch, k := c.ConvChannels(), c.ConvKernel
	if b.shapeOnly {
		*v = Vector{Name: b.prefix + name, T: fake(b.prefix+name, safetensors.F32, true, ch, k)}
		return nil
	}
	t, full := b.lookup(name)
	if t == nil {
		return bad("tensor %q is missing (want [%d, %d, 1])", full, ch, k)
	}
	if t.DType != safetensors.BF16 && t.DType != safetensors.F32 {
		return bad("%s: tensor %q: dtype %s, want BF16 or F32", where(t), full, t.DType)
	}
	if !shapeEq(t.Shape, ch, k, 1) && !shapeEq(t.Shape, ch, 1, k) && !shapeEq(t.Shape, ch, k) {
		return bad("%s: tensor %q: shape %v, want [%d, %d, 1]", where(t), full, t.Shape, ch, k)
	}
	*v = Vector{Name: full, T: t}
	return nil
}

func (b *binder) matrix(name string, experts, rows, cols int) (Matrix, error) {
	if b.shapeOnly {
		m := Matrix{Name: b.prefix + name, Experts: experts, Rows: rows, Cols: cols}
		q, ok := b.cfg.QuantFor(m.Name)
		if !ok {
			return m, bad("shape of %q: the config does not quantize it", m.Name)
		}
		m.Bits, m.GroupSize = q.Bits, q.GroupSize
		n := max(experts, 1) * rows
		m.Weight = fake(m.Name+".weight", safetensors.U32, false, n, cols*q.Bits/32)
		m.Scales = fake(m.Name+".scales", safetensors.BF16, false, n, cols/q.GroupSize)
		m.Biases = fake(m.Name+".biases", safetensors.BF16, false, n, cols/q.GroupSize)
		return m, nil
	}
	w, full := b.lookup(name + ".weight")
	m := Matrix{Name: b.prefix + name, Experts: experts, Rows: rows, Cols: cols, Weight: w}
	lead := []int{}
	if experts > 0 {
		lead = []int{experts}
	}
	dims := func(last ...int) []int { return append(append([]int{}, lead...), last...) }
	if w == nil {
		return m, bad("tensor %q is missing (want %v)", full, dims(rows, cols))
	}
	scales, sname := b.lookup(name + ".scales")
	biases, bname := b.lookup(name + ".biases")
	if scales == nil {
		if biases != nil {
			return m, bad("%s: tensor %q has biases but no %q", where(w), full, sname)
		}
		if w.DType != safetensors.BF16 && w.DType != safetensors.F32 {
			return m, bad("%s: tensor %q: dtype %s without scales; want a quantized U32 triple or dense BF16/F32", where(w), full, w.DType)
		}
		if !shapeEq(w.Shape, dims(rows, cols)...) {
			return m, bad("%s: tensor %q: shape %v, want %v", where(w), full, w.Shape, dims(rows, cols))
		}
		return m, nil
	}
	if biases == nil {
		return m, bad("%s: tensor %q is missing (quantized %q needs scales and biases)", where(w), bname, full)
	}
	q, ok := b.cfg.QuantFor(m.Name)
	if !ok {
		return m, bad("%s: tensor %q has scales but the config's quantization block does not quantize %q", where(w), full, m.Name)
	}
	m.Bits, m.GroupSize = q.Bits, q.GroupSize
	if cols%q.GroupSize != 0 {
		return m, bad("%s: tensor %q: %d input columns are not a multiple of group size %d", where(w), full, cols, q.GroupSize)
	}
	if w.DType != safetensors.U32 {
		return m, bad("%s: tensor %q: dtype %s, want U32 packed codes", where(w), full, w.DType)
	}
	if want := dims(rows, cols*q.Bits/32); !shapeEq(w.Shape, want...) {
		return m, bad("%s: tensor %q: shape %v, want %v (%d-bit codes of %v)", where(w), full, w.Shape, want, q.Bits, dims(rows, cols))
	}
	for _, sb := range []struct {
		t    *safetensors.Tensor
		name string
	}{{scales, sname}, {biases, bname}} {
		if sb.t.DType != safetensors.BF16 {
			return m, bad("%s: tensor %q: dtype %s, want BF16", where(sb.t), sb.name, sb.t.DType)
		}
		if want := dims(rows, cols/q.GroupSize); !shapeEq(sb.t.Shape, want...) {
			return m, bad("%s: tensor %q: shape %v, want %v (groups of %d)", where(sb.t), sb.name, sb.t.Shape, want, q.GroupSize)
		}
	}
	m.Scales, m.Biases = scales, biases
	return m, nil
}

// ShapeOnly builds a Model of cfg's shape whose quantized matrices have no
// data (their tensors have a nil File and Data) and whose vectors are zero
// float32 values. It serves to count what a step reads and encodes for a
// checkpoint that is not on this machine; nothing can compute with it.
func ShapeOnly(cfg *Config) (*Model, error) {
	m := &Model{Config: cfg}
	b := &binder{shapeOnly: true, cfg: cfg, prefix: "language_model."}
	if err := b.bind(m); err != nil {
		return nil, err
	}
	return m, nil
}

// fake is a tensor with no file, of the given dtype and shape, holding
// zeros when withData is set and no data otherwise.
func fake(name string, dtype safetensors.DType, withData bool, shape ...int) *safetensors.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	t := &safetensors.Tensor{Info: safetensors.Info{Name: name, DType: dtype, Shape: shape, End: n * int64(dtype.Size())}}
	if withData {
		t.Data = make([]byte, t.End)
	}
	return t
}
