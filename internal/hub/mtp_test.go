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
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/internal/hub/hubtest"
	"petal/internal/hub/mlxquant"
)

// origRepo is the fake original checkpoint's name.
const origRepo = "petal-test/orig"

// origTensor is a tensor of the fake original, as float32 values (bf16
// exactly) before they are written.
type origTensor struct {
	name  string
	shape []int
	w     []float32
}

// original is a small bf16 "original" checkpoint holding tiny-a's MTP head
// under the original's names, in two shards, with other tensors around
// them (which a fetch must skip), its experts one tensor per expert or
// fused as transformers 5 writes them.
type original struct {
	dir     string
	tensors map[string]origTensor
	shards  map[string][]string // shard -> tensor names in file order
	// mtpBytes is the bytes of every mtp.* tensor; headers the length
	// prefixes and headers of the shards holding them; index the index's.
	mtpBytes, headers, index int64
	pinned                   *TensorManifest
}

// tiny-a's dimensions (engine/testdata/fixtures/tiny-a/config.json).
const (
	tinyHidden, tinyHeads, tinyKVHeads, tinyHeadDim = 128, 4, 2, 64
	tinyExperts, tinyExpertI, tinySharedI           = 8, 64, 64
)

func writeOriginal(t *testing.T, fused bool) *original {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 5))
	o := &original{dir: t.TempDir(), tensors: map[string]origTensor{}, shards: map[string][]string{}}
	add := func(shard, name string, std float64, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		w := make([]float32, n)
		for i := range w {
			w[i] = mlxquant.FromBF16(mlxquant.BF16(float32(rng.NormFloat64() * std)))
		}
		o.tensors[name] = origTensor{name, shape, w}
		o.shards[shard] = append(o.shards[shard], name)
	}
	h, p := tinyHidden, "mtp.layers.0."
	s1, s2 := "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	add(s1, "model.language_model.embed_tokens.weight", 0.02, 96, h)
	add(s1, "mtp.fc.weight", 0.05, h, 2*h)
	add(s1, "mtp.norm.weight", 0.1, h)
	add(s1, "model.language_model.norm.weight", 0.1, h) // between two MTP runs
	add(s1, "mtp.pre_fc_norm_embedding.weight", 0.1, h)
	add(s1, "mtp.pre_fc_norm_hidden.weight", 0.1, h)
	add(s2, p+"input_layernorm.weight", 0.1, h)
	add(s2, p+"post_attention_layernorm.weight", 0.1, h)
	add(s2, p+"self_attn.q_proj.weight", 0.05, 2*tinyHeads*tinyHeadDim, h)
	add(s2, p+"self_attn.k_proj.weight", 0.05, tinyKVHeads*tinyHeadDim, h)
	add(s2, p+"self_attn.v_proj.weight", 0.05, tinyKVHeads*tinyHeadDim, h)
	add(s2, p+"self_attn.o_proj.weight", 0.05, h, tinyHeads*tinyHeadDim)
	add(s2, p+"self_attn.q_norm.weight", 0.1, tinyHeadDim)
	add(s2, p+"self_attn.k_norm.weight", 0.1, tinyHeadDim)
	add(s2, "model.visual.patch_embed.weight", 0.02, 64, 64)
	add(s2, p+"mlp.gate.weight", 0.05, tinyExperts, h)
	if fused {
		add(s2, p+"mlp.experts.gate_up_proj", 0.05, tinyExperts, 2*tinyExpertI, h)
		add(s2, p+"mlp.experts.down_proj", 0.05, tinyExperts, h, tinyExpertI)
	} else {
		for e := range tinyExperts {
			add(s2, fmt.Sprintf(p+"mlp.experts.%d.gate_proj.weight", e), 0.05, tinyExpertI, h)
			add(s2, fmt.Sprintf(p+"mlp.experts.%d.up_proj.weight", e), 0.05, tinyExpertI, h)
			add(s2, fmt.Sprintf(p+"mlp.experts.%d.down_proj.weight", e), 0.05, h, tinyExpertI)
		}
	}
	add(s2, p+"mlp.shared_expert.gate_proj.weight", 0.05, tinySharedI, h)
	add(s2, p+"mlp.shared_expert.up_proj.weight", 0.05, tinySharedI, h)
	add(s2, p+"mlp.shared_expert.down_proj.weight", 0.05, h, tinySharedI)
	add(s2, p+"mlp.shared_expert_gate.weight", 0.05, 1, h)

	weightMap := map[string]string{}
	o.pinned = &TensorManifest{Format: TensorManifestFormat, Repo: origRepo, SHA: hubtest.SHA, Filter: "mtp"}
	for shard, names := range o.shards {
		var ts []safetensors.NewTensor
		for _, name := range names {
			x := o.tensors[name]
			ts = append(ts, safetensors.NewTensor{Name: name, DType: safetensors.BF16, Shape: x.shape, Data: bf16Bytes(x.w)})
			weightMap[name] = shard
			if strings.HasPrefix(name, "mtp.") {
				sum := sha256.Sum256(bf16Bytes(x.w))
				shape := make([]int64, len(x.shape))
				for i, d := range x.shape {
					shape[i] = int64(d)
				}
				o.pinned.Tensors = append(o.pinned.Tensors, PinnedTensor{Name: name, Shard: shard, DType: "BF16", Shape: shape, SHA256: hex.EncodeToString(sum[:])})
				o.mtpBytes += int64(2 * len(x.w))
			}
		}
		var buf bytes.Buffer
		if err := safetensors.EncodeMLX(&buf, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		o.headers += 8 + int64(binary.LittleEndian.Uint64(buf.Bytes()))
		if err := os.WriteFile(filepath.Join(o.dir, shard), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(o.pinned.Tensors, func(a, b PinnedTensor) int { return strings.Compare(a.Name, b.Name) })
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	o.index = int64(len(idx))
	if err := os.WriteFile(filepath.Join(o.dir, indexName), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return o
}

// serve serves the original as origRepo.
func (o *original) serve(t *testing.T) *hubtest.Server {
	s := hubtest.New(t, o.dir)
	s.Repo = origRepo
	return s
}

// mtpOptions pulls tiny-a from main with its MTP head from orig.
func mtpOptions(t *testing.T, main, orig *hubtest.Server, o *original) Options {
	opts := options(t, main)
	opts.MTP = &TensorSource{Endpoint: orig.URL(), Repo: origRepo, Manifest: o.pinned}
	return opts
}

// rangeBytes is what a fetch of the head from o serves: the index, the
// two shards' headers (length prefix, then JSON) and the head's bytes.
func (o *original) rangeBytes() int64 { return o.index + o.headers + o.mtpBytes }

// want is the converted head worked out here from the original's values,
// apart from the code under test: names under language_model., norms +1,
// experts stacked (the fused gate_up split in halves), matrices quantized
// whole by mlxquant.
func (o *original) want(t *testing.T) map[string]safetensors.NewTensor {
	t.Helper()
	out := map[string]safetensors.NewTensor{}
	q := func(base string, experts int, w []float32, rows, cols, bits int) {
		ts, err := quantized(base, experts, w, rows, cols, bits)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			out[x.Name] = x
		}
	}
	experts := map[string][]float32{}
	for name, x := range o.tensors {
		if !strings.HasPrefix(name, "mtp.") {
			continue
		}
		switch {
		case strings.Contains(name, ".experts."):
			rest := name[strings.Index(name, ".experts.")+len(".experts."):]
			switch {
			case rest == "gate_up_proj":
				per := 2 * tinyExpertI * tinyHidden
				for e := range tinyExperts {
					experts["gate_proj"] = append(experts["gate_proj"], x.w[e*per:e*per+per/2]...)
					experts["up_proj"] = append(experts["up_proj"], x.w[e*per+per/2:(e+1)*per]...)
				}
			case rest == "down_proj":
				experts["down_proj"] = x.w
			}
		case len(x.shape) == 1:
			w := slices.Clone(x.w)
			for i := range w {
				w[i]++
			}
			out["language_model."+name] = safetensors.NewTensor{Name: "language_model." + name, DType: safetensors.BF16, Shape: x.shape, Data: bf16Bytes(w)}
		default:
			bits := 4
			if strings.HasSuffix(name, "mlp.gate.weight") || strings.HasSuffix(name, "shared_expert_gate.weight") {
				bits = 8
			}
			q("language_model."+strings.TrimSuffix(name, ".weight"), 0, x.w, x.shape[0], x.shape[1], bits)
		}
	}
	if len(experts) == 0 {
		for e := range tinyExperts {
			for _, proj := range []string{"gate_proj", "up_proj", "down_proj"} {
				experts[proj] = append(experts[proj], o.tensors[fmt.Sprintf("mtp.layers.0.mlp.experts.%d.%s.weight", e, proj)].w...)
			}
		}
	}
	base := "language_model.mtp.layers.0.mlp.switch_mlp."
	q(base+"gate_proj", tinyExperts, experts["gate_proj"], tinyExperts*tinyExpertI, tinyHidden, 4)
	q(base+"up_proj", tinyExperts, experts["up_proj"], tinyExperts*tinyExpertI, tinyHidden, 4)
	q(base+"down_proj", tinyExperts, experts["down_proj"], tinyExperts*tinyHidden, tinyExpertI, 4)
	return out
}

// checkMTP asserts dir holds the head converted from o: every tensor as
// worked out from the original, every one aligned, listed in the
// manifest, passing Verify, bound by the checkpoint loader.
func checkMTP(t *testing.T, o *original, dir string) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, checkpoint.MTPFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := o.want(t)
	if got := len(f.Tensors()); got != len(want) {
		t.Errorf("%d tensors in %s, want %d", got, checkpoint.MTPFile, len(want))
	}
	for name, w := range want {
		x := f.Tensor(name)
		if x == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if x.DType != w.DType || !slices.Equal(x.Shape, w.Shape) || !bytes.Equal(x.Data, w.Data) {
			t.Errorf("%s: %s %v, want %s %v (or its bytes differ)", name, x.DType, x.Shape, w.DType, w.Shape)
		}
		if !x.Aligned(int(wantAlign(int64(len(x.Data))))) {
			t.Errorf("%s of %d bytes at offset %d is not aligned", name, len(x.Data), x.Offset)
		}
	}
	m, err := readManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := m.Derived[checkpoint.MTPFile]; !ok || d.Repo != origRepo || d.SHA != hubtest.SHA || !hasFile(dir, checkpoint.MTPFile) {
		t.Errorf("manifest does not list %s from %s: %+v", checkpoint.MTPFile, origRepo, m.Derived)
	}
	if err := Verify(dir); err != nil {
		t.Errorf("Verify: %v", err)
	}
	cm, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	if cm.MTP == nil {
		t.Error("the checkpoint loader did not bind the head")
	}
}

func TestPullMTP(t *testing.T) {
	for _, fused := range []bool{false, true} {
		t.Run(fmt.Sprintf("fused=%v", fused), func(t *testing.T) {
			o := writeOriginal(t, fused)
			main, orig := hubtest.New(t, fixture), o.serve(t)
			opts := mtpOptions(t, main, orig, o)
			var phases []Phase
			opts.Progress = func(ev Event) {
				if len(phases) == 0 || phases[len(phases)-1] != ev.Phase {
					phases = append(phases, ev.Phase)
				}
			}
			dir := pullWhole(t, main, opts)
			checkMTP(t, o, dir)
			if got, want := orig.Served(), o.rangeBytes(); got != want {
				t.Errorf("the original served %d bytes; the index, headers and head are %d (its shards %d)", got, want, orig.Total())
			}
			if !slices.Contains(phases, FetchingTensors) {
				t.Errorf("phases %v lack %q", phases, FetchingTensors)
			}
			// Pulled: pulling again asks nothing of either server.
			listings, served := main.Listings(), orig.Served()
			if _, err := Pull(t.Context(), opts); err != nil {
				t.Fatal(err)
			}
			if main.Listings() != listings || orig.Served() != served {
				t.Error("pulling a finished folder again fetched something")
			}
			// Verify catches a changed head; Delete removes it all.
			path := filepath.Join(dir, checkpoint.MTPFile)
			data, _ := os.ReadFile(path)
			data[len(data)-1] ^= 1
			os.WriteFile(path, data, 0o644)
			if err := Verify(dir); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), checkpoint.MTPFile) {
				t.Errorf("Verify of a changed head: %v", err)
			}
			if err := Delete(dir); err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
				t.Errorf("%d entries left after Delete", len(entries))
			}
		})
	}
}

// TestPullMTPAfterMain: a folder pulled without the head (--no-mtp) gets
// it on the next pull, the main files untouched.
func TestPullMTPAfterMain(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	opts := mtpOptions(t, main, orig, o)
	opts.NoMTP = true
	dir := pullWhole(t, main, opts)
	if fileExists(filepath.Join(dir, checkpoint.MTPFile)) || orig.Served() != 0 {
		t.Fatal("--no-mtp fetched the head")
	}
	opts.NoMTP = false
	if _, err := Pull(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	checkMTP(t, o, dir)
	if main.Served() != main.Total() {
		t.Errorf("the main files were fetched again: %d bytes for %d", main.Served(), main.Total())
	}
}

// TestPullMTPResumesAfterCut: a connection dropped inside a range resumes
// from the byte it stopped at; nothing is fetched twice.
func TestPullMTPResumesAfterCut(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	orig.CutAfter("model-00002-of-00002.safetensors", 20<<10)
	dir := pullWhole(t, main, mtpOptions(t, main, orig, o))
	checkMTP(t, o, dir)
	if got, want := orig.Served(), o.rangeBytes(); got != want {
		t.Errorf("served %d bytes, want %d: bytes were fetched twice", got, want)
	}
}

// TestPullMTPResumesAfterStop: a pull stopped mid-range keeps its partial
// file and the ranges done; the next fetches only the rest.
func TestPullMTPResumesAfterStop(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	orig.StallAfter("model-00002-of-00002.safetensors", 30<<10)
	opts := mtpOptions(t, main, orig, o)
	opts.Parallel = 1
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() {
		<-orig.WhenStalled()
		cancel(ErrPaused)
	}()
	dir, err := Pull(ctx, opts)
	if !errors.Is(err, ErrPaused) {
		t.Fatalf("stopped pull: %q, %v", dir, err)
	}
	if !Finished(opts.Dir) || fileExists(filepath.Join(opts.Dir, checkpoint.MTPFile)) {
		t.Fatal("after a stop, want the model in place without a head")
	}
	data, err := os.ReadFile(filepath.Join(tensorStaging(opts.Dir, MTPTensors), tensorStateName))
	if err != nil {
		t.Fatal(err)
	}
	var st tensorState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	var kept int64
	for _, d := range st.Done {
		kept += d
	}
	if kept == 0 {
		t.Fatal("the stopped fetch kept no bytes")
	}
	before := orig.Served()
	if _, err := Pull(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	checkMTP(t, o, opts.Dir)
	// The second run reads the index and headers again, and only the bytes
	// the state did not have.
	if got, want := orig.Served()-before, o.index+o.headers+o.mtpBytes-kept; got != want {
		t.Errorf("the resumed fetch served %d bytes, want %d (%d were kept)", got, want, kept)
	}
	if fileExists(tensorStaging(opts.Dir, MTPTensors)) {
		t.Error("the staging folder outlived the install")
	}
}

// TestPullMTPServerIgnoresRange: a server that answers a range with the
// whole shard is refused with ErrNoRanges, the model left without a head.
func TestPullMTPServerIgnoresRange(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	orig.IgnoreRange("model-00001-of-00002.safetensors")
	opts := mtpOptions(t, main, orig, o)
	_, err := Pull(t.Context(), opts)
	if !errors.Is(err, ErrNoRanges) {
		t.Fatalf("pull from a server ignoring Range: %v", err)
	}
	if !Finished(opts.Dir) || fileExists(filepath.Join(opts.Dir, checkpoint.MTPFile)) || hasFile(opts.Dir, checkpoint.MTPFile) {
		t.Error("want the model in place without a head")
	}
}

// TestPullMTPWrongHash: a tensor that does not hash as pinned is refused
// and never installed; its range is dropped, so the next pull fetches it
// anew.
func TestPullMTPWrongHash(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	good := o.pinned.Tensors[0].SHA256
	bad := *o.pinned
	bad.Tensors = slices.Clone(o.pinned.Tensors)
	bad.Tensors[0].SHA256 = strings.Repeat("0", 64)
	opts := mtpOptions(t, main, orig, o)
	opts.MTP.Manifest = &bad
	_, err := Pull(t.Context(), opts)
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), bad.Tensors[0].Name) {
		t.Fatalf("pull with a wrong pinned hash: %v", err)
	}
	if fileExists(filepath.Join(opts.Dir, checkpoint.MTPFile)) || hasFile(opts.Dir, checkpoint.MTPFile) {
		t.Fatal("a head that failed its hash was installed")
	}
	bad.Tensors[0].SHA256 = good
	before := orig.Served()
	if _, err := Pull(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	checkMTP(t, o, opts.Dir)
	if got := orig.Served() - before; got <= o.index+o.headers || got >= o.rangeBytes() {
		t.Errorf("the second pull served %d bytes: want the dropped range alone beyond the index and headers (%d), less than all (%d)", got, o.index+o.headers, o.rangeBytes())
	}
}

// TestPullMTPCancel: cancelling a download while the head is coming
// removes the fetch's staging folder; the finished model stays.
func TestPullMTPCancel(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	orig.StallAfter("model-00002-of-00002.safetensors", 10<<10)
	opts := mtpOptions(t, main, orig, o)
	d := Start(t.Context(), opts)
	await(t, orig.WhenStalled())
	if err := d.Cancel(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(opts.Dir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{petalPrefix + "tiny.lock", "tiny"}) && !slices.Equal(names, []string{"tiny"}) {
		t.Errorf("after Cancel: %v, want the model folder alone", names)
	}
	if fileExists(filepath.Join(opts.Dir, checkpoint.MTPFile)) {
		t.Error("a cancelled head was installed")
	}
}

// TestPullMTPNeedsPinnedManifest: no fetch without a manifest to check
// against; the default model's missing manifest is said in words.
func TestPullMTPNeedsPinnedManifest(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	opts := mtpOptions(t, main, orig, o)
	opts.MTP.Manifest = nil
	if _, err := Pull(t.Context(), opts); !errors.Is(err, ErrNotPinned) {
		t.Errorf("pull with no pinned manifest: %v", err)
	}
	if orig.Served() != 0 || main.Served() != 0 {
		t.Error("something was fetched without a manifest")
	}
	if _, err := PinnedManifest(MTPSourceRepo, MTPTensors); errors.Is(err, ErrNotPinned) {
		if n := MTPNotice(Options{}); !strings.Contains(n, "MTP weights are not fetched") || !strings.Contains(n, "tensormanifest") {
			t.Errorf("notice for the default model without a manifest: %q", n)
		}
	} else if err != nil {
		t.Errorf("the committed manifest: %v", err)
	}
	if n := MTPNotice(Options{NoMTP: true}); n != "" {
		t.Errorf("notice with --no-mtp: %q", n)
	}
}

// TestMakeTensorManifest: the manifest tools/tensormanifest writes is the
// one worked out here from the original's tensors.
func TestMakeTensorManifest(t *testing.T) {
	o := writeOriginal(t, true)
	orig := o.serve(t)
	m, err := MakeTensorManifest(t.Context(), Options{Endpoint: orig.URL(), Repo: origRepo, Revision: hubtest.SHA,
		MaxRetries: 1, RetryBase: 1, FreeSpace: func(string) (int64, error) { return 1 << 50, nil }}, MTPTensors, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(m)
	want, _ := json.Marshal(o.pinned)
	if !bytes.Equal(got, want) {
		t.Errorf("manifest\n%s\nwant\n%s", got, want)
	}
	if _, err := ParseTensorManifest(got); err != nil {
		t.Error(err)
	}
}

func TestParseTensorManifestRefuses(t *testing.T) {
	o := writeOriginal(t, false)
	for name, edit := range map[string]func(*TensorManifest){
		"format":   func(m *TensorManifest) { m.Format = 2 },
		"commit":   func(m *TensorManifest) { m.SHA = "main" },
		"sha256":   func(m *TensorManifest) { m.Tensors[1].SHA256 = "xyz" },
		"upper":    func(m *TensorManifest) { m.Tensors[1].SHA256 = strings.ToUpper(m.Tensors[1].SHA256) },
		"unsorted": func(m *TensorManifest) { m.Tensors[0], m.Tensors[1] = m.Tensors[1], m.Tensors[0] },
		"shard":    func(m *TensorManifest) { m.Tensors[0].Shard = "../x" },
		"empty":    func(m *TensorManifest) { m.Tensors = nil },
	} {
		m := *o.pinned
		m.Tensors = slices.Clone(o.pinned.Tensors)
		edit(&m)
		data, _ := json.Marshal(m)
		if _, err := ParseTensorManifest(data); !errors.Is(err, ErrBadListing) && !errors.Is(err, ErrInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestPartialRange: only a 206 for exactly the bytes asked, of the length
// asked, is taken.
func TestPartialRange(t *testing.T) {
	resp := func(status int, cr string, n int64) *http.Response {
		r := &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{}, ContentLength: n}
		if cr != "" {
			r.Header.Set("Content-Range", cr)
		}
		return r
	}
	if total, err := partialRange(resp(206, "bytes 8-15/100", 8), "s", 8, 16); err != nil || total != 100 {
		t.Errorf("a right answer: %d, %v", total, err)
	}
	for name, r := range map[string]*http.Response{
		"200":            resp(200, "", 100),
		"other start":    resp(206, "bytes 0-15/100", 16),
		"shorter":        resp(206, "bytes 8-11/100", 4),
		"longer":         resp(206, "bytes 8-31/100", 24),
		"no size":        resp(206, "bytes 8-15/*", 8),
		"wrong length":   resp(206, "bytes 8-15/100", 9),
		"no range":       resp(206, "", 8),
		"past the end":   resp(206, "bytes 8-15/12", 8),
		"garbled header": resp(206, "bytes eight-15/100", 8),
	} {
		if _, err := partialRange(r, "s", 8, 16); !errors.Is(err, ErrNoRanges) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzParseTensorManifest: a manifest read from disk never panics the
// parser, and one it takes has the checks a fetch relies on.
func FuzzParseTensorManifest(f *testing.F) {
	f.Add([]byte(`{"format":1,"repo":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","filter":"mtp","tensors":[{"name":"mtp.x","shard":"s.safetensors","dtype":"BF16","shape":[2],"sha256":"` + strings.Repeat("ab", 32) + `"}]}`))
	f.Add([]byte(`{"format":1,"tensors":[{"shard":"../x"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseTensorManifest(data)
		if err != nil {
			return
		}
		for i, x := range m.Tensors {
			if checkName(x.Shard) != nil || len(x.SHA256) != 2*sha256.Size || (i > 0 && m.Tensors[i-1].Name >= x.Name) {
				t.Errorf("took %+v", x)
			}
		}
	})
}

// TestPullMTPInstallCutBeforeListing: a head renamed into the folder by an
// install cut short before the manifest listed it is not taken as pulled:
// Verify names it, and the next pull fetches (from the staging's bytes)
// and lists it.
func TestPullMTPInstallCutBeforeListing(t *testing.T) {
	o := writeOriginal(t, false)
	main, orig := hubtest.New(t, fixture), o.serve(t)
	opts := mtpOptions(t, main, orig, o)
	dir := pullWhole(t, main, opts)
	m, err := readManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Files = slices.DeleteFunc(m.Files, func(f File) bool { return f.Name == checkpoint.MTPFile })
	delete(m.Derived, checkpoint.MTPFile)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileSync(filepath.Join(dir, manifestName), data); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), checkpoint.MTPFile) {
		t.Errorf("Verify with the head unlisted: %v, want ErrChecksum naming %s", err, checkpoint.MTPFile)
	}
	if _, err := Pull(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	checkMTP(t, o, dir)
}
