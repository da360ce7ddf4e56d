package fit

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"petal/engine/checkpoint"
	"petal/engine/gpumodel"
)

// Defaults and limits of a check.
const (
	// DefaultContext is the context asked for when none is named: what
	// coding agents need at least, and the service's default.
	DefaultContext = 32768
	// MinContext is the shortest context worth running; a machine that
	// cannot hold it gets the verdict [No].
	MinContext = 4096
	// DefaultCachedSessions is how many sessions besides the generating
	// one keep their DeltaNet state resident.
	DefaultCachedSessions = 4
	// MaxCachedSessions bounds the sessions a check accepts.
	MaxCachedSessions = 1024
	// RuntimeOverheadBytes is a margin for what Go cannot count: Metal's
	// own objects, compiled pipelines and command buffers, the tokenizer,
	// the Go heap.
	RuntimeOverheadBytes = 512 << 20
	// unstatedMaxContext is the longest context checked for a model whose
	// config states no maximum.
	unstatedMaxContext = 1 << 20
	// MaxStatedContext bounds the maximum a config may state: 64 times the
	// 35B model's 262144, and far enough below 2^63 bytes that no
	// footprint overflows (a stated 2^62 made negative sizes).
	MaxStatedContext = 1 << 24
	// firstCapacity is the smallest KV capacity a sequence has (the
	// backend starts its caches at 256 positions).
	firstCapacity = 256
)

// Verdict is the answer of a check.
type Verdict string

// The three verdicts.
const (
	Fits    Verdict = "fits"    // at the asked context
	Reduced Verdict = "reduced" // only at a shorter context, at least MinContext
	No      Verdict = "no"      // not even at MinContext
)

// Model is what a check needs to know of a model.
type Model struct {
	Name   string
	Config *checkpoint.Config
	// WeightsBytes are the weights as mapped: the shards' sizes.
	WeightsBytes int64
	// CopiedBytes are the weights the GPU backend copies at load, on top
	// of the mapping, because they lie misaligned for its kernels
	// (checkpoint.MisalignedBytes): 0 for a folder stored aligned, as
	// petal pull stores it.
	CopiedBytes int64
	// DraftHead: the folder holds the MTP head (checkpoint.MTPFile), with
	// which sequences draft unless speculation is off.
	DraftHead bool
}

// Qwen36 is the model Petal ships for, sized from its shape: every
// matrix's packed bytes and the vectors at bf16, as the shards hold them.
// It is sized once; its Config is shared and must not be changed.
func Qwen36() (Model, error) { return qwen36() }

var qwen36 = sync.OnceValues(func() (Model, error) {
	cfg := checkpoint.Qwen36()
	w, err := storedBytes(cfg)
	if err != nil {
		return Model{}, err
	}
	return Model{Name: "Qwen3.6-35B-A3B-4bit", Config: cfg, WeightsBytes: w}, nil
})

// bf16 is the size of a stored vector element.
const bf16 = 2

func storedBytes(cfg *checkpoint.Config) (int64, error) {
	m, err := checkpoint.ShapeOnly(cfg)
	if err != nil {
		return 0, err
	}
	n := m.Embed.Bytes() + m.LMHead.Bytes()
	vec := func(vs ...*checkpoint.Vector) {
		for _, v := range vs {
			e := int64(1)
			for _, d := range v.T.Shape {
				e *= int64(d)
			}
			n += e * bf16
		}
	}
	vec(&m.FinalNorm)
	for _, l := range m.Layers {
		vec(&l.InputNorm, &l.PostNorm)
		if a := l.Attn; a != nil {
			n += a.Q.Bytes() + a.K.Bytes() + a.V.Bytes() + a.O.Bytes()
			vec(&a.QNorm, &a.KNorm)
		}
		if d := l.Delta; d != nil {
			n += d.QKV.Bytes() + d.Z.Bytes() + d.B.Bytes() + d.A.Bytes() + d.Out.Bytes()
			vec(&d.Conv, &d.ALog, &d.DtBias, &d.Norm)
		}
		e := &l.MoE
		n += e.Router.Bytes() + e.Gate.Bytes() + e.Up.Bytes() + e.Down.Bytes()
		n += e.SharedGate.Bytes() + e.SharedUp.Bytes() + e.SharedDown.Bytes() + e.SharedExpertGate.Bytes()
	}
	return n, nil
}

// FromCheckpoint is the model in dir, sized by its shard files.
func FromCheckpoint(dir string) (Model, error) {
	cfg, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return Model{}, err
	}
	shards, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return Model{}, err
	}
	if len(shards) == 0 {
		return Model{}, fmt.Errorf("fit: %s holds no .safetensors files", dir)
	}
	var n int64
	for _, s := range shards {
		st, err := os.Stat(s)
		if err != nil {
			return Model{}, err
		}
		n += st.Size()
	}
	copied, err := checkpoint.MisalignedBytes(dir)
	if err != nil {
		return Model{}, err
	}
	_, err = os.Stat(filepath.Join(dir, checkpoint.MTPFile))
	head := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Model{}, err
	}
	return Model{Name: filepath.Base(dir), Config: cfg, WeightsBytes: n, CopiedBytes: copied, DraftHead: head}, nil
}

// Request is what a check asks.
type Request struct {
	Context int // 0: DefaultContext
	// CachedSessions are the sessions besides the generating one (petal
	// fit assumes DefaultCachedSessions).
	CachedSessions int
	// NoDrafts: speculation is off (--speculative off, the setting's
	// "off"), so a model's head keeps nothing; the zero value is auto,
	// the default, under which decoding sequences may draft.
	NoDrafts bool
}

// Report is a check's answer, with every term of the sum.
type Report struct {
	Model            string  `json:"model"`
	Verdict          Verdict `json:"verdict"`
	Context          int     `json:"context"`
	MaxContext       int     `json:"max_context"`
	WorkingSetBytes  int64   `json:"working_set_bytes"`
	WorkingSetSource string  `json:"working_set_source"`
	WeightsBytes     int64   `json:"weights_bytes"`
	// MisalignedCopyBytes are the weights copied at load because they lie
	// misaligned in the shards (Model.CopiedBytes).
	MisalignedCopyBytes int64  `json:"misaligned_copy_bytes"`
	ModelVectorBytes    int64  `json:"model_vector_bytes"`
	KVBytesPerToken     int64  `json:"kv_bytes_per_token"`
	KVDType             string `json:"kv_dtype"`
	// KVCapacity is the positions the caches are allocated for at Context.
	KVCapacity  int   `json:"kv_capacity"`
	KVBytes     int64 `json:"kv_bytes"`
	KVGrowBytes int64 `json:"kv_grow_bytes"`
	// Sessions are the resident sequences: the generating one and the
	// cached ones, each with its own DeltaNet state and activations.
	Sessions            int   `json:"sessions"`
	SessionStateBytes   int64 `json:"session_state_bytes"`
	SessionScratchBytes int64 `json:"session_scratch_bytes"`
	// DraftBytes is what a decoding sequence that drafts holds besides:
	// each DeltaNet layer's conv window and recurrent state after the
	// first token of a verify step (kept for the exact rewind) and the
	// head's own KV cache (one attention layer) at Context; 0 for a model
	// without a head or with speculation off.
	DraftBytes int64 `json:"draft_bytes"`
	// PrefillScratchBytes are the chunk activations of the prompt being
	// processed; they and KVGrowBytes are never held at once, so the
	// total counts the larger.
	PrefillScratchBytes int64 `json:"prefill_scratch_bytes"`
	OverheadBytes       int64 `json:"overhead_bytes"`
	TotalBytes          int64 `json:"total_bytes"`
	// HeadroomBytes is the working set left at Context (negative when it
	// does not fit): the most a prefix cache may hold.
	HeadroomBytes int64  `json:"headroom_bytes"`
	Advice        string `json:"advice"`
	// mac: the budget was a Mac's (Budget.Mac), for Guidance's words.
	mac bool
}

// Check decides whether m fits budget at the asked context.
func Check(m Model, budget Budget, req Request) (Report, error) {
	cfg := m.Config
	if cfg == nil {
		return Report{}, errors.New("fit: model without a config")
	}
	if m.WeightsBytes <= 0 || budget.Bytes <= 0 {
		return Report{}, fmt.Errorf("fit: weights of %d bytes against a budget of %d bytes", m.WeightsBytes, budget.Bytes)
	}
	ctx := req.Context
	if ctx == 0 {
		ctx = DefaultContext
	}
	maxPos, err := maxContext(cfg)
	if err != nil {
		return Report{}, err
	}
	if ctx < 1 || ctx > maxPos {
		return Report{}, fmt.Errorf("fit: context %d is outside 1..%d, the model's maximum", ctx, maxPos)
	}
	if req.CachedSessions < 0 || req.CachedSessions > MaxCachedSessions {
		return Report{}, fmt.Errorf("fit: %d cached sessions is outside 0..%d", req.CachedSessions, MaxCachedSessions)
	}
	fps, contexts, err := measure(cfg, ctx)
	if err != nil {
		return Report{}, err
	}
	return check(m, budget, ctx, 1+req.CachedSessions, m.DraftHead && !req.NoDrafts, fps, contexts), nil
}

// measure counts the footprint at every capacity the caches can have, then
// at ctx (last): the largest context that fits is the largest capacity
// that fits.
func measure(cfg *checkpoint.Config, ctx int) ([]gpumodel.Footprint, []int, error) {
	maxPos, err := maxContext(cfg)
	if err != nil {
		return nil, nil, err
	}
	var contexts []int
	for c := firstCapacity; c < maxPos; c *= 2 {
		contexts = append(contexts, c)
	}
	contexts = append(contexts, maxPos, ctx)
	fps, err := footprints.get(cfg, contexts)
	return fps, contexts, err
}

// footprints keeps the footprints measured, which the Setup screen asks for
// on every GET /manage/fit: each context of a shape is recorded once (a
// whole model on the recording driver) instead of on every request. They
// are keyed on the config's contents, as the screen reads a new Config
// from the installed checkpoint each time.
var footprints = &footprintCache{measure: gpumodel.MeasureFootprints, byKey: map[footprintKey]gpumodel.Footprint{}}

// maxCachedFootprints bounds the contexts footprintCache keeps, so that
// requests for ever new contexts cannot grow it without end; past it, the
// missing ones are measured and not kept.
const maxCachedFootprints = 256

type footprintCache struct {
	measure func(*checkpoint.Config, []int) ([]gpumodel.Footprint, error)
	mu      sync.Mutex
	byKey   map[footprintKey]gpumodel.Footprint
}

type footprintKey struct {
	config  [sha256.Size]byte // of the Config's JSON
	context int
}

// get is c.measure(cfg, contexts), measuring only the contexts it does not
// hold for cfg's contents.
func (c *footprintCache) get(cfg *checkpoint.Config, contexts []int) ([]gpumodel.Footprint, error) {
	text, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("fit: keying the config: %w", err)
	}
	shape := sha256.Sum256(text)
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing []int
	for _, ctx := range contexts {
		if _, ok := c.byKey[footprintKey{shape, ctx}]; !ok && !slices.Contains(missing, ctx) {
			missing = append(missing, ctx)
		}
	}
	measured := map[int]gpumodel.Footprint{}
	if len(missing) > 0 {
		fps, err := c.measure(cfg, missing)
		if err != nil {
			return nil, err
		}
		for i, ctx := range missing {
			measured[ctx] = fps[i]
			if len(c.byKey) < maxCachedFootprints {
				c.byKey[footprintKey{shape, ctx}] = fps[i]
			}
		}
	}
	out := make([]gpumodel.Footprint, len(contexts))
	for i, ctx := range contexts {
		f, ok := c.byKey[footprintKey{shape, ctx}]
		if !ok {
			f = measured[ctx]
		}
		out[i] = f
	}
	return out, nil
}

// check is Check on measured footprints.
func check(m Model, budget Budget, ctx, sessions int, drafts bool, fps []gpumodel.Footprint, contexts []int) Report {
	draft := func(gpumodel.Footprint) int64 { return 0 }
	if drafts {
		draft = func(f gpumodel.Footprint) int64 { return draftBytes(m.Config, f) }
	}
	// The caches grow before a prompt's chunk activations are made, and
	// those are released when the prompt is through, so the two peaks
	// never meet.
	total := func(f gpumodel.Footprint) int64 {
		return m.WeightsBytes + m.CopiedBytes + f.ModelBytes + f.KVBytes + f.ScratchBytes + max(f.GrowthBytes, f.PrefillBytes) +
			int64(sessions)*(f.StateBytes+f.ActivationBytes) + draft(f) + RuntimeOverheadBytes
	}
	maxCtx := 0
	for i, f := range fps[:len(fps)-1] {
		if total(f) <= budget.Bytes {
			maxCtx = contexts[i]
		}
	}
	f := fps[len(fps)-1]
	r := Report{
		Model: m.Name, Context: ctx, MaxContext: maxCtx,
		WorkingSetBytes: budget.Bytes, WorkingSetSource: budget.Source,
		WeightsBytes: m.WeightsBytes, MisalignedCopyBytes: m.CopiedBytes, ModelVectorBytes: f.ModelBytes,
		KVBytesPerToken: f.KVBytesPerPosition(), KVDType: gpumodel.KVDType,
		KVCapacity: f.Capacity, KVBytes: f.KVBytes + f.ScratchBytes, KVGrowBytes: f.GrowthBytes,
		Sessions: sessions, SessionStateBytes: f.StateBytes, SessionScratchBytes: f.ActivationBytes, DraftBytes: draft(f),
		PrefillScratchBytes: f.PrefillBytes,
		OverheadBytes:       RuntimeOverheadBytes, TotalBytes: total(f), mac: budget.Mac,
	}
	r.HeadroomBytes = budget.Bytes - r.TotalBytes
	switch {
	case r.TotalBytes <= budget.Bytes:
		r.Verdict = Fits
		r.Advice = fmt.Sprintf("Fits: %s of the %s available at %d tokens of context, %s left.",
			FormatBytes(r.TotalBytes), FormatBytes(budget.Bytes), ctx, FormatBytes(r.HeadroomBytes))
	case maxCtx >= MinContext:
		r.Verdict = Reduced
		r.Advice = fmt.Sprintf("Does not fit at %d tokens of context (%s of the %s available); fits at up to %d tokens.",
			ctx, FormatBytes(r.TotalBytes), FormatBytes(budget.Bytes), maxCtx)
	default:
		r.Verdict = No
		r.Advice = fmt.Sprintf("Does not fit: even %d tokens of context need more than the %s available (the weights alone are %s).",
			MinContext, FormatBytes(budget.Bytes), FormatBytes(m.WeightsBytes))
	}
	return r
}

// draftBytes is what a drafting sequence keeps at f: one more copy of the
// DeltaNet states (a verify step of the pick and one draft keeps them
// after its first token) and one attention layer's KV cache at f's
// capacity, the head's.
func draftBytes(cfg *checkpoint.Config, f gpumodel.Footprint) int64 {
	attn := int64(0)
	for _, k := range cfg.Layers {
		if k == checkpoint.Attention {
			attn++
		}
	}
	if attn == 0 {
		return f.StateBytes
	}
	return f.StateBytes + f.KVBytes/attn
}

// MacSizes are the memory sizes, in GB, Apple silicon Macs are sold with
// that [Guidance] walks through.
var MacSizes = []float64{16, 18, 24, 32, 36, 48, 64, 96, 128, 192, 256, 512}

// guidanceMacGB is the Mac size, one of [MacSizes], whose context
// [Guidance] spells out: the commonest that can run the 35B model.
const guidanceMacGB = 32

// Guidance says plainly, in one paragraph, what r's verdict leaves to do;
// r is a check of m. A model that fits at the asked context needs no
// advice, only where the whole context needs more memory; one that fits
// only at a shorter context gets that context and the advice to leave it
// memory; one that does not fit gets what would run it. On a Mac (the
// budget's Budget.Mac) that is which Macs: the smallest, what a 32 GB Mac
// gets, and the smallest that holds the whole context; off a Mac, Macs
// are no answer, so it is the memory the whole context needs.
func Guidance(m Model, r Report) (string, error) {
	maxPos, err := maxContext(m.Config)
	if err != nil {
		return "", err
	}
	fps, contexts, err := measure(m.Config, maxPos)
	if err != nil {
		return "", err
	}
	if !r.mac {
		whole := check(m, Budget{Bytes: r.WorkingSetBytes}, maxPos, r.Sessions, r.DraftBytes > 0, fps, contexts).TotalBytes
		wholeNeeds := fmt.Sprintf("The whole %d-token context needs %s.", maxPos, FormatBytes(whole))
		switch r.Verdict {
		case Fits:
			if r.MaxContext < maxPos {
				return fmt.Sprintf("Contexts of up to %d tokens fit here. %s", r.MaxContext, wholeNeeds), nil
			}
		case Reduced:
			return fmt.Sprintf("Ask for %d tokens of context at most (petal serve lowers a longer one by itself); quit other memory-hungry programs while it runs. %s",
				r.MaxContext, wholeNeeds), nil
		case No:
			return fmt.Sprintf("Free memory for it (quit other memory-hungry programs) or run it on a machine with more. %s", wholeNeeds), nil
		}
		return "", nil
	}
	smallest, full := 0.0, 0.0
	var atGuide Report
	for _, gb := range MacSizes {
		b, err := SimulatedMac(gb)
		if err != nil {
			return "", err
		}
		mac := check(m, b, maxPos, r.Sessions, r.DraftBytes > 0, fps, contexts)
		if smallest == 0 && mac.Verdict != No {
			smallest = gb
		}
		if full == 0 && mac.Verdict == Fits {
			full = gb
		}
		if gb == guidanceMacGB {
			atGuide = mac
		}
	}
	whole := fmt.Sprintf("No Mac of up to %g GB holds the whole %d-token context.", MacSizes[len(MacSizes)-1], maxPos)
	if full > 0 {
		whole = fmt.Sprintf("The whole %d-token context needs a Mac of %g GB or more.", maxPos, full)
	}
	var lines []string
	switch r.Verdict {
	case Fits:
		if r.MaxContext < maxPos {
			lines = append(lines, fmt.Sprintf("Contexts of up to %d tokens fit here.", r.MaxContext), whole)
		}
	case Reduced:
		lines = append(lines, fmt.Sprintf("Ask for %d tokens of context at most (petal serve lowers a longer one by itself); quit other memory-hungry apps while it runs.", r.MaxContext), whole)
	case No:
		if atGuide.Verdict == No {
			lines = append(lines, fmt.Sprintf("A %d GB Mac cannot run %s: its GPU may use %s and the weights alone are %s.",
				guidanceMacGB, m.Name, FormatBytes(atGuide.WorkingSetBytes), FormatBytes(m.WeightsBytes)))
		} else {
			lines = append(lines, fmt.Sprintf("A %d GB Mac runs %s at up to %d tokens of context (its GPU may use %s; the weights take %s, and each token of context %d bytes of KV cache); quit other memory-hungry apps while it runs.",
				guidanceMacGB, m.Name, atGuide.MaxContext, FormatBytes(atGuide.WorkingSetBytes), FormatBytes(m.WeightsBytes), atGuide.KVBytesPerToken))
		}
		if smallest > 0 {
			lines = append(lines, fmt.Sprintf("Macs with less than %g GB cannot run it.", smallest), whole)
		} else {
			lines = append(lines, fmt.Sprintf("No Mac of up to %g GB runs it.", MacSizes[len(MacSizes)-1]))
		}
	}
	return strings.Join(lines, " "), nil
}

// maxContext is the longest context of cfg. A negative or absurd stated
// maximum is refused rather than read as unstated or counted past int64.
func maxContext(cfg *checkpoint.Config) (int, error) {
	switch {
	case cfg.MaxPositions == 0:
		return unstatedMaxContext, nil
	case cfg.MaxPositions < 0 || cfg.MaxPositions > MaxStatedContext:
		return 0, fmt.Errorf("fit: the config's max_position_embeddings %d is outside 1..%d", cfg.MaxPositions, MaxStatedContext)
	}
	return cfg.MaxPositions, nil
}
