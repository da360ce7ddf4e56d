package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/internal/hub/mlxquant"
)

// MTPSourceRepo is the original checkpoint of [DefaultRepo]: the bf16
// repository whose mtp.* tensors the 4-bit MLX conversion dropped.
const MTPSourceRepo = "Qwen/Qwen3.6-35B-A3B"

// mtpSources maps a model repository to the original its MTP head comes
// from.
var mtpSources = map[string]string{DefaultRepo: MTPSourceRepo}

// Bits the MLX conversion gives the MTP head's matrices: 8 for the router
// and the shared expert's gate (as for every main layer's), 4 otherwise.
const (
	mtpBits     = 4
	mtpGateBits = 8
)

// mtpPrefix is what the MLX layout puts before the original's names.
const mtpPrefix = "language_model."

// TensorSource says where tensors fetched by range come from.
type TensorSource struct {
	// Endpoint defaults to the pull's.
	Endpoint string
	Repo     string
	// Manifest pins the commit and every tensor's hash; a source without
	// one is refused.
	Manifest *TensorManifest
}

// derivedFile records, in a model folder's manifest, a file Petal made
// from tensors of another repository.
type derivedFile struct {
	Repo   string `json:"repo"`
	SHA    string `json:"sha"`
	Filter string `json:"filter"`
}

// mtpSource is where o's MTP head comes from: o.MTP, else the pinned
// default for o.Repo; nil when there is none to fetch.
func mtpSource(o Options) (*TensorSource, error) {
	if o.NoMTP {
		return nil, nil
	}
	if o.MTP != nil {
		if o.MTP.Manifest == nil {
			return nil, fmt.Errorf("%w: the MTP tensors of %s have no pinned manifest; Petal fetches no weights it cannot check", ErrNotPinned, o.MTP.Repo)
		}
		return o.MTP, nil
	}
	orig, ok := mtpSources[o.Repo]
	if !ok {
		return nil, nil
	}
	m, err := PinnedManifest(orig, MTPTensors)
	if errors.Is(err, ErrNotPinned) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &TensorSource{Repo: orig, Manifest: m}, nil
}

// MTPNotice says, for a pull of opts, why its MTP head will not be
// fetched when it would be but for a missing pinned manifest; "" otherwise.
func MTPNotice(opts Options) string {
	if opts.NoMTP || opts.MTP != nil {
		return ""
	}
	repo := opts.Repo
	if repo == "" {
		repo = DefaultRepo
	}
	orig, ok := mtpSources[repo]
	if !ok {
		return ""
	}
	if _, err := PinnedManifest(orig, MTPTensors); errors.Is(err, ErrNotPinned) {
		return fmt.Sprintf("MTP weights are not fetched: no pinned manifest of %s's mtp.* tensor hashes is committed (internal/hub/pinned/%s), and Petal installs no weights it cannot check. The model runs without its draft head; a maintainer with network access makes the manifest with `go run ./tools/tensormanifest`.",
			orig, PinnedName(orig, MTPTensors))
	}
	return ""
}

// hasFile reports whether dir's manifest lists name.
func hasFile(dir, name string) bool {
	m, err := readManifest(dir)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(m.Files, func(f File) bool { return f.Name == name })
}

// tensorStaging is where a tensor fetch for dir keeps its work.
func tensorStaging(dir string, filter TensorFilter) string {
	parent, base := filepath.Split(dir)
	return filepath.Join(parent, petalPrefix+base+"."+filter.Name+".staging")
}

// removeTensorStagings removes the staging folders of every tensor fetch
// for dir (see tensorStaging), whatever its filter.
func removeTensorStagings(dir string) error {
	parent, base := filepath.Split(dir)
	entries, err := os.ReadDir(parent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	prefix := petalPrefix + base + "."
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".staging") && n != prefix+"staging" {
			if err := os.RemoveAll(filepath.Join(parent, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// derivedNames are the files Petal derives into a model folder (see
// pullDerived), which Verify holds to the manifest too.
var derivedNames = []string{checkpoint.MTPFile}

// pullMTP fetches the MTP head of a finished model folder from src,
// converts it to MLX's layout and stores it as checkpoint.MTPFile; the
// lock is held. A folder that has it already is left alone.
func pullMTP(ctx context.Context, o Options, src *TensorSource) error {
	return pullDerived(ctx, o, src, MTPTensors, checkpoint.MTPFile, convertMTP)
}

// pullDerived fetches filter's tensors of src by range requests, verified
// against src's pinned manifest, turns them into a shard with convert and
// stores it in the finished model folder o.Dir as name, listed in its
// manifest. The vision tower (issue 34) comes the same way, with its own
// filter, name and conversion.
func pullDerived(ctx context.Context, o Options, src *TensorSource, filter TensorFilter, name string,
	convert func(*tensorFetch) ([]safetensors.NewTensor, error)) error {
	if hasFile(o.Dir, name) {
		return nil
	}
	if src.Repo != src.Manifest.Repo {
		return fmt.Errorf("%w: the %s manifest pins %s, not %s", ErrInput, filter.Name, src.Manifest.Repo, src.Repo)
	}
	endpoint := strings.TrimRight(src.Endpoint, "/")
	if endpoint == "" {
		endpoint = o.Endpoint
	}
	p := &puller{o: o, c: o.client()}
	tf := &tensorFetch{p: p, endpoint: endpoint, repo: src.Repo, sha: src.Manifest.SHA, filter: filter, staging: tensorStaging(o.Dir, filter)}
	defer tf.close()
	p.emit(Event{Phase: FetchingTensors, File: src.Repo})
	if err := tf.fetch(ctx, src.Manifest); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	ts, err := convert(tf)
	if err != nil {
		return err
	}
	part := filepath.Join(tf.staging, name)
	size, sum, err := writeAlignedShard(part, ts)
	if err != nil {
		return err
	}
	if err := installDerived(o.Dir, part, name, File{Name: name, Size: size, SHA256: sum},
		derivedFile{Repo: src.Repo, SHA: src.Manifest.SHA, Filter: filter.Name}); err != nil {
		return err
	}
	if err := os.RemoveAll(tf.staging); err != nil {
		return err
	}
	p.emit(Event{Phase: Done, Done: size, Total: size})
	return nil
}

// installDerived moves a file Petal made into the model folder dir, checks
// that the folder still opens as a checkpoint with it (removing it if
// not: a head that does not bind is never left installed) and lists it in
// the manifest, so Verify and Delete treat it like the Hub's files.
func installDerived(dir, part, name string, f File, from derivedFile) error {
	m, err := readManifest(dir)
	if err != nil {
		return err
	}
	dst := filepath.Join(dir, name)
	if err := os.Rename(part, dst); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		cm, err := checkpoint.Open(dir)
		if err != nil {
			os.Remove(dst)
			return fmt.Errorf("hub: %s from %s@%s is not a head the model can load (removed): %w", name, from.Repo, from.SHA, err)
		}
		cm.Close()
	}
	m.Files = append(slices.DeleteFunc(m.Files, func(x File) bool { return x.Name == name }), f)
	if m.Derived == nil {
		m.Derived = map[string]derivedFile{}
	}
	m.Derived[name] = from
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, manifestName), data)
}

// Names of the original's routed experts: one tensor per expert and
// projection, or (as transformers 5 writes Qwen3.5/3.6) gate and up fused
// in one [E, 2I, H] tensor and down in one [E, H, I], without ".weight".
var (
	perExpert   = regexp.MustCompile(`^(mtp\.layers\.\d+\.mlp)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$`)
	fusedExpert = regexp.MustCompile(`^(mtp\.layers\.\d+\.mlp)\.experts\.(gate_up_proj|down_proj)(\.weight)?$`)
)

// maxExperts bounds the expert index read from a name.
const maxExperts = 4096

// convertMTP turns the original's mtp.* tensors into MLX's layout, as
// mlx-lm's conversion treats the main layers: names under
// language_model., the routed experts stacked as switch_mlp, every norm
// with 1 added (the original's RMSNorms scale by 1+w, MLX's by w),
// matrices quantized affine with group 64 (8 bits for the router and the
// shared expert's gate, 4 otherwise), other vectors kept, all in bf16.
func convertMTP(tf *tensorFetch) ([]safetensors.NewTensor, error) {
	var out []safetensors.NewTensor
	experts := map[string]map[string][]tensorSpan{} // mlp prefix -> projection -> per-expert spans
	fused := map[string]map[string]tensorSpan{}     // mlp prefix -> gate_up_proj / down_proj
	for _, s := range tf.spans {
		if m := perExpert.FindStringSubmatch(s.Name); m != nil {
			e, err := strconv.Atoi(m[2])
			if err != nil || e >= maxExperts {
				return nil, fmt.Errorf("%w: MTP tensor %s: expert index", ErrBadListing, s.Name)
			}
			if experts[m[1]] == nil {
				experts[m[1]] = map[string][]tensorSpan{}
			}
			list := experts[m[1]][m[3]]
			for len(list) <= e {
				list = append(list, tensorSpan{})
			}
			list[e] = s
			experts[m[1]][m[3]] = list
			continue
		}
		if m := fusedExpert.FindStringSubmatch(s.Name); m != nil {
			if fused[m[1]] == nil {
				fused[m[1]] = map[string]tensorSpan{}
			}
			fused[m[1]][m[2]] = s
			continue
		}
		ts, err := convertPlain(tf, s)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	for _, mlp := range slices.Sorted(maps.Keys(experts)) {
		if fused[mlp] != nil {
			return nil, fmt.Errorf("%w: %s has its experts both fused and one by one", ErrBadListing, mlp)
		}
		for _, proj := range []string{"gate_proj", "up_proj", "down_proj"} {
			ts, err := stackExperts(tf, mtpPrefix+mlp+".switch_mlp."+proj, experts[mlp][proj])
			if err != nil {
				return nil, fmt.Errorf("%s.experts.*.%s: %w", mlp, proj, err)
			}
			out = append(out, ts...)
		}
	}
	for _, mlp := range slices.Sorted(maps.Keys(fused)) {
		ts, err := splitFused(tf, mlp, fused[mlp])
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	slices.SortFunc(out, func(a, b safetensors.NewTensor) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// convertPlain converts a tensor that is not a routed expert's.
func convertPlain(tf *tensorFetch, s tensorSpan) ([]safetensors.NewTensor, error) {
	var n int64 = 1
	for _, d := range s.Shape {
		n *= d
	}
	w, err := tf.floats(s, 0, n)
	if err != nil {
		return nil, err
	}
	name := mtpPrefix + s.Name
	switch len(s.Shape) {
	case 1:
		// Every RMSNorm of the head scales by 1+w in the original (vLLM's
		// GemmaRMSNorm), including pre_fc_norm_embedding and _hidden.
		if isNorm(s.Name) {
			for i := range w {
				w[i]++
			}
		}
		return []safetensors.NewTensor{{Name: name, DType: safetensors.BF16, Shape: []int{int(s.Shape[0])}, Data: bf16Bytes(w)}}, nil
	case 2:
		base, ok := strings.CutSuffix(name, ".weight")
		if !ok {
			return nil, fmt.Errorf("%w: MTP tensor %s is a matrix not named .weight", ErrBadListing, s.Name)
		}
		bits := mtpBits
		if strings.HasSuffix(s.Name, "mlp.gate.weight") || strings.HasSuffix(s.Name, "mlp.shared_expert_gate.weight") {
			bits = mtpGateBits
		}
		return quantized(base, 0, w, int(s.Shape[0]), int(s.Shape[1]), bits)
	}
	return nil, fmt.Errorf("%w: MTP tensor %s has shape %v", ErrBadListing, s.Name, s.Shape)
}

// isNorm reports whether a vector is an RMSNorm's weight: its module's
// name says norm.
func isNorm(name string) bool {
	module := strings.TrimSuffix(name, ".weight")
	return strings.Contains(module[strings.LastIndex(module, ".")+1:], "norm")
}

// stackExperts quantizes per-expert matrices and stacks them [E, ...],
// one expert in memory at a time. MLX quantizes row by row, so this is
// quantizing the stacked tensor.
func stackExperts(tf *tensorFetch, base string, spans []tensorSpan) ([]safetensors.NewTensor, error) {
	if len(spans) == 0 || len(spans[0].Shape) != 2 {
		return nil, fmt.Errorf("%w: no experts, or expert 0 not a matrix", ErrBadListing)
	}
	rows, cols := int(spans[0].Shape[0]), int(spans[0].Shape[1])
	st := &qStack{base: base, experts: len(spans), rows: rows, cols: cols, bits: mtpBits}
	for e, s := range spans {
		if s.Name == "" || !slices.Equal(s.Shape, spans[0].Shape) {
			return nil, fmt.Errorf("%w: expert %d missing or not %v", ErrBadListing, e, spans[0].Shape)
		}
		w, err := tf.floats(s, 0, int64(rows*cols))
		if err != nil {
			return nil, err
		}
		if err := st.add(w); err != nil {
			return nil, err
		}
	}
	return st.tensors(), nil
}

// splitFused splits gate_up_proj [E, 2I, H] into gate (rows [0, I)) and up
// (rows [I, 2I)) of each expert, as vLLM and mlx-lm do, and quantizes
// them and down_proj [E, H, I] stacked, one expert in memory at a time.
func splitFused(tf *tensorFetch, mlp string, t map[string]tensorSpan) ([]safetensors.NewTensor, error) {
	gu, ok1 := t["gate_up_proj"]
	down, ok2 := t["down_proj"]
	if !ok1 || !ok2 || len(gu.Shape) != 3 || len(down.Shape) != 3 || gu.Shape[1]%2 != 0 || gu.Shape[0] != down.Shape[0] {
		return nil, fmt.Errorf("%w: %s.experts: want gate_up_proj [E, 2I, H] and down_proj [E, H, I], have %v and %v", ErrBadListing, mlp, gu.Shape, down.Shape)
	}
	e, half, h := int(gu.Shape[0]), int(gu.Shape[1]/2), int(gu.Shape[2])
	base := mtpPrefix + mlp + ".switch_mlp."
	gate := &qStack{base: base + "gate_proj", experts: e, rows: half, cols: h, bits: mtpBits}
	up := &qStack{base: base + "up_proj", experts: e, rows: half, cols: h, bits: mtpBits}
	dn := &qStack{base: base + "down_proj", experts: e, rows: int(down.Shape[1]), cols: int(down.Shape[2]), bits: mtpBits}
	for x := range e {
		w, err := tf.floats(gu, int64(x*2*half*h), int64(2*half*h))
		if err != nil {
			return nil, err
		}
		if err := gate.add(w[:half*h]); err != nil {
			return nil, err
		}
		if err := up.add(w[half*h:]); err != nil {
			return nil, err
		}
		n := int64(dn.rows * dn.cols)
		if w, err = tf.floats(down, int64(x)*n, n); err != nil {
			return nil, err
		}
		if err := dn.add(w); err != nil {
			return nil, err
		}
	}
	return slices.Concat(gate.tensors(), up.tensors(), dn.tensors()), nil
}

// quantized is base's .weight, .scales and .biases for rows of cols
// values, stacked [experts, rows/experts, ...] when experts > 0.
func quantized(base string, experts int, w []float32, rows, cols, bits int) ([]safetensors.NewTensor, error) {
	st := &qStack{base: base, experts: experts, rows: rows, cols: cols, bits: bits}
	if experts > 0 {
		st.rows = rows / experts
	}
	if err := st.add(w); err != nil {
		return nil, err
	}
	return st.tensors(), nil
}

// qStack quantizes the matrices of a stack one after another.
type qStack struct {
	base             string
	experts          int // 0: one matrix, no leading dimension
	rows, cols, bits int // of one matrix
	codes            []byte
	scales, biases   []uint16
}

func (st *qStack) add(w []float32) error {
	q, err := mlxquant.Quantize(w, st.cols, st.bits)
	if err != nil {
		return fmt.Errorf("%s: %w", st.base, err)
	}
	for _, c := range q.Codes {
		st.codes = binary.LittleEndian.AppendUint32(st.codes, c)
	}
	st.scales = append(st.scales, q.Scales...)
	st.biases = append(st.biases, q.Biases...)
	return nil
}

func (st *qStack) tensors() []safetensors.NewTensor {
	shape := func(last int) []int {
		if st.experts > 0 {
			return []int{st.experts, st.rows, last}
		}
		return []int{st.rows, last}
	}
	return []safetensors.NewTensor{
		{Name: st.base + ".weight", DType: safetensors.U32, Shape: shape(st.cols * st.bits / 32), Data: st.codes},
		{Name: st.base + ".scales", DType: safetensors.BF16, Shape: shape(st.cols / mlxquant.GroupSize), Data: u16Bytes(st.scales)},
		{Name: st.base + ".biases", DType: safetensors.BF16, Shape: shape(st.cols / mlxquant.GroupSize), Data: u16Bytes(st.biases)},
	}
}

// floats reads n values of a fetched tensor from element first on,
// widened to float32 from BF16, F16 or F32.
func (tf *tensorFetch) floats(s tensorSpan, first, n int64) ([]float32, error) {
	var elems int64 = 1
	for _, d := range s.Shape {
		elems *= d
	}
	size := int64(safetensors.DType(s.DType).Size())
	if size == 0 || elems*size != s.End-s.Begin || first < 0 || n < 0 || first+n > elems {
		return nil, fmt.Errorf("%w: MTP tensor %s: %s %v in %d bytes", ErrBadListing, s.Name, s.DType, s.Shape, s.End-s.Begin)
	}
	b := make([]byte, n*size)
	if _, err := tf.raw.ReadAt(b, s.Raw+first*size); err != nil {
		return nil, fmt.Errorf("hub: reading %s back: %w", s.Name, err)
	}
	w := make([]float32, n)
	switch safetensors.DType(s.DType) {
	case safetensors.BF16:
		for i := range w {
			w[i] = mlxquant.FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case safetensors.F16:
		for i := range w {
			w[i] = mlxquant.FromF16(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case safetensors.F32:
		for i := range w {
			w[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	default:
		return nil, fmt.Errorf("%w: MTP tensor %s is %s, not a float type", ErrBadListing, s.Name, s.DType)
	}
	return w, nil
}

func bf16Bytes(w []float32) []byte {
	h := make([]uint16, len(w))
	for i, v := range w {
		h[i] = mlxquant.BF16(v)
	}
	return u16Bytes(h)
}

func u16Bytes(h []uint16) []byte {
	b := make([]byte, 2*len(h))
	for i, v := range h {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return b
}

// writeAlignedShard writes tensors as a shard stored the way a pull
// stores the Hub's (see "Realigned shards" in the package doc: the header
// padded to 16 bytes, tensors ordered so each sits on the largest power
// of two up to 16 dividing its size, no gaps) and returns its size and
// sha256.
func writeAlignedShard(path string, ts []safetensors.NewTensor) (int64, string, error) {
	infos := make([]safetensors.Info, len(ts))
	readers := make([]io.Reader, len(ts))
	for i, t := range ts {
		infos[i] = safetensors.Info{Name: t.Name, DType: t.DType, Shape: t.Shape}
		readers[i] = bytes.NewReader(t.Data)
	}
	head, err := safetensors.MLXHead(infos, map[string]string{"format": "mlx"})
	if err != nil {
		return 0, "", err
	}
	size := int64(len(head))
	for _, t := range ts {
		size += int64(len(t.Data))
	}
	lay, err := planLayout(head, size)
	if err != nil {
		return 0, "", err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	if _, err := writeRealigned(f, io.MultiReader(readers...), lay, io.Discard); err != nil {
		return 0, "", err
	}
	if err := f.Sync(); err != nil {
		return 0, "", err
	}
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, lay.size))
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
