package fit

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/gpumodel"
)

// reference is the fit of Qwen3.6-35B-A3B worked out from MODEL.md's
// shapes, independently of gpumodel's measurement, with the KV caches in
// fp16 and the attention scratch and DeltaNet state in float32, as the
// backend stores them.
func reference(weights int64, ctx, sessions int) int64 {
	const f16, f32 = 2, 4
	capacity := 256
	for capacity < ctx {
		capacity *= 2
	}
	kvRow := int64(2 * 256 * f16) // KV heads x head dim, one position of one K or V cache
	kv := 10 * 2 * kvRow * int64(capacity)
	blocks := int64((capacity + 255) / 256)
	scratch := int64(0)
	if blocks > 1 {
		scratch = 16 * blocks * (256 + 2) * f32
	}
	growth := int64(0)
	if capacity > 256 {
		growth = kvRow * int64(capacity/2) // the last old buffer during the copy
	}
	state := int64(30 * (32*128*128*f32 + (2*16*128+32*128)*3*f32))
	return weights + kv + scratch + max(growth, prefill(ctx)) + int64(sessions)*state + RuntimeOverheadBytes
}

// prefill is the prompt chunk's activations for the 35B shape: per token
// the float32 rows of the decode step's vectors (residual, norm and delta
// 3x2048; q with gate 8192; k, v 2x512; q, gate, o 3x4096; DeltaNet
// qkv before and after the conv 2x8192, z and out 2x4096, b and a 2x32;
// router 256; top-8 ids, weights and routing maps 4x8; expert gate, up,
// hidden 3x8x512 and outputs 8x2048; shared expert 3x512, 2048 and its
// gate), for the run rounded up to a power of two and at most a 512-token
// chunk. The routing blocks are left to slack.
func prefill(ctx int) int64 {
	if ctx < 4 {
		return 0
	}
	const floats = 3*2048 + 8192 + 2*512 + 3*4096 + 2*8192 + 2*4096 + 2*32 + 256 + 4*8 + 3*8*512 + 8*2048 + 3*512 + 2048 + 1
	n := 1
	for n < ctx {
		n *= 2
	}
	return int64(min(n, 512)) * floats * 4
}

// slack covers what reference leaves out: the model's float32 vectors
// (about 4.6 MB), per-step activations (about 1.5 MB a session), the
// prefill's routing blocks, and the scratch sizes the growth peak nets
// out.
const slack = 48 << 20

func TestQwen36Weights(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	// MODEL.md: about 19.4 GB (18.1 GiB) on disk.
	if m.WeightsBytes < 19.3e9 || m.WeightsBytes > 19.6e9 {
		t.Errorf("weights %d bytes, MODEL.md says about 19.4 GB", m.WeightsBytes)
	}
}

func TestCheckMacs(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	contexts := []int{4096, 32768, 65536, 131072, 262144}
	for _, gb := range []float64{16, 24, 32, 36, 48, 64, 128} {
		b, err := SimulatedMac(gb)
		if err != nil {
			t.Fatal(err)
		}
		for _, ctx := range contexts {
			r, err := Check(m, b, Request{Context: ctx, CachedSessions: DefaultCachedSessions})
			if err != nil {
				t.Fatal(err)
			}
			sessions := 1 + DefaultCachedSessions
			want := reference(m.WeightsBytes, ctx, sessions)
			if d := r.TotalBytes - want; d < 0 || d > slack {
				t.Errorf("%g GB, context %d: total %d bytes, reference %d", gb, ctx, r.TotalBytes, want)
			}
			wantMax := 0
			for c := 256; c <= 262144; c *= 2 {
				if reference(m.WeightsBytes, c, sessions)+slack < b.Bytes {
					wantMax = c
				}
			}
			wantVerdict := No
			switch {
			case want+slack < b.Bytes:
				wantVerdict = Fits
			case wantMax >= MinContext:
				wantVerdict = Reduced
			}
			if r.Verdict != wantVerdict || r.MaxContext != wantMax {
				t.Errorf("%g GB, context %d: %s up to %d, want %s up to %d", gb, ctx, r.Verdict, r.MaxContext, wantVerdict, wantMax)
			}
			// MODEL.md: 10 layers x 2 (K, V) x 2 heads x 256 x 2 bytes.
			if r.KVBytesPerToken != 20480 || r.KVDType != "float16" {
				t.Errorf("KV %d bytes per token in %s, want 20480 in float16", r.KVBytesPerToken, r.KVDType)
			}
			if r.HeadroomBytes != b.Bytes-r.TotalBytes {
				t.Errorf("headroom %d, want %d", r.HeadroomBytes, b.Bytes-r.TotalBytes)
			}
		}
	}
}

// TestThirtyTwoGB pins the guidance users act on: what MODEL.md's
// numbers say a 32 GB Mac can do with Petal's fp16 KV cache.
func TestThirtyTwoGB(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	b, err := SimulatedMac(32)
	if err != nil {
		t.Fatal(err)
	}
	// 21.33 GiB: 18.17 GiB of weights, 0.31 GiB of DeltaNet state for 5
	// sessions and the 0.5 GiB margin leave about 2.35 GiB; at 20,480
	// bytes a token 64K costs 1.25 GiB of KV, 128K 2.5 GiB, each plus
	// 0.16 GiB for a prompt's chunk activations: 64K fits (20.39 GiB),
	// 128K does not (21.65 GiB). The whole 256K context takes 5 GiB of
	// KV, 24.15 GiB in all: more than a 32 GB Mac's 21.33 GiB, less than
	// a 36 GB Mac's 27 GiB.
	if want := int64(32) * GiB * 2 / 3; b.Bytes != want {
		t.Fatalf("32 GB budget %d, want %d", b.Bytes, want)
	}
	r, err := Check(m, b, Request{Context: 65536, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Fits || r.MaxContext != 65536 {
		t.Errorf("32 GB at 64K: %s up to %d, want fits up to 65536", r.Verdict, r.MaxContext)
	}
	r, err = Check(m, b, Request{Context: 131072, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Reduced || r.MaxContext != 65536 {
		t.Errorf("32 GB at 128K: %s up to %d, want reduced up to 65536", r.Verdict, r.MaxContext)
	}
	small, err := SimulatedMac(16)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = Check(m, small, Request{Context: 65536, CachedSessions: DefaultCachedSessions}); err != nil {
		t.Fatal(err)
	}
	g, err := Guidance(m, r)
	if err != nil {
		t.Fatal(err)
	}
	// The 32 GB Mac's 21.33 GiB are 22.9 GB, the unit the UI writes.
	for _, want := range []string{"32 GB Mac runs", "65536 tokens", "22.9 GB", "20480 bytes", "less than 32 GB", "36 GB or more"} {
		if !strings.Contains(g, want) {
			t.Errorf("guidance %q lacks %q", g, want)
		}
	}
}

// TestGuidancePerVerdict: petal fit ended every verdict, 64 GB included,
// with the same paragraph on quitting apps and Macs of less than 32 GB
// (issue 28 B.7). Each verdict now gets what applies to it.
func TestGuidancePerVerdict(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		gb         float64
		context    int
		verdict    Verdict
		want, lack []string
	}{
		{64, 32768, Fits, nil, []string{"quit", "less than 32 GB", "32 GB Mac", "needs a Mac"}},
		{32, 32768, Fits, []string{"up to 65536 tokens fit here", "needs a Mac of 36 GB or more"}, []string{"quit", "less than 32 GB", "cannot"}},
		{32, 131072, Reduced, []string{"65536 tokens of context at most", "quit other memory-hungry apps", "needs a Mac of 36 GB or more"}, []string{"less than 32 GB", "cannot"}},
		{16, 32768, No, []string{"A 32 GB Mac runs", "quit other memory-hungry apps", "Macs with less than 32 GB cannot run it", "36 GB or more"}, nil},
	} {
		b, err := SimulatedMac(c.gb)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Check(m, b, Request{Context: c.context, CachedSessions: DefaultCachedSessions})
		if err != nil {
			t.Fatal(err)
		}
		g, err := Guidance(m, r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != c.verdict {
			t.Fatalf("%g GB at %d: verdict %s, want %s", c.gb, c.context, r.Verdict, c.verdict)
		}
		if c.want == nil && g != "" {
			t.Errorf("%g GB at %d (%s): guidance %q, want none", c.gb, c.context, r.Verdict, g)
		}
		for _, w := range c.want {
			if !strings.Contains(g, w) {
				t.Errorf("%g GB at %d (%s): guidance %q lacks %q", c.gb, c.context, r.Verdict, g, w)
			}
		}
		for _, w := range c.lack {
			if strings.Contains(g, w) {
				t.Errorf("%g GB at %d (%s): guidance %q says %q", c.gb, c.context, r.Verdict, g, w)
			}
		}
	}
}

func TestSimulatedMac(t *testing.T) {
	for _, tc := range []struct {
		gb   float64
		want int64
	}{
		{16, 16 * GiB * 2 / 3}, {24, 16 * GiB}, {32, 32 * GiB * 2 / 3},
		{36, 27 * GiB}, {64, 48 * GiB}, {128, 96 * GiB},
	} {
		b, err := SimulatedMac(tc.gb)
		if err != nil {
			t.Fatal(err)
		}
		if b.Bytes != tc.want {
			t.Errorf("%g GB: %d bytes, want %d", tc.gb, b.Bytes, tc.want)
		}
	}
	for _, gb := range []float64{0, 4, -32, 1024, math.NaN(), math.Inf(1)} {
		if _, err := SimulatedMac(gb); err == nil {
			t.Errorf("%g GB accepted", gb)
		}
	}
}

func TestCheckRejects(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SimulatedMac(64)
	for _, req := range []Request{
		{Context: -1}, {Context: 262145}, {CachedSessions: -1}, {CachedSessions: MaxCachedSessions + 1},
	} {
		if _, err := Check(m, b, req); err == nil {
			t.Errorf("%+v accepted", req)
		}
	}
	if _, err := Check(m, Budget{}, Request{}); err == nil {
		t.Error("an empty budget accepted")
	}
	if _, err := Check(Model{Name: "x"}, b, Request{}); err == nil {
		t.Error("a model without config accepted")
	}
	// A stated maximum that is no length, or one whose footprints overflow
	// int64 (2^62 gave negative sizes and took a context of 5.7e17).
	for _, maxPos := range []int{-1, 1 << 62, MaxStatedContext + 1} {
		cfg := *m.Config
		cfg.MaxPositions = maxPos
		bad := Model{Name: "x", Config: &cfg, WeightsBytes: m.WeightsBytes}
		for _, ctx := range []int{0, 1 << 59} {
			if r, err := Check(bad, b, Request{Context: ctx}); err == nil {
				t.Errorf("max_position_embeddings %d, context %d: accepted: %s", maxPos, ctx, r.Advice)
			}
		}
		if g, err := Guidance(bad, Report{Verdict: No, Sessions: 1}); err == nil {
			t.Errorf("max_position_embeddings %d: guidance %q", maxPos, g)
		}
	}
	r, err := Check(m, b, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Context != DefaultContext {
		t.Errorf("default context %d, want %d", r.Context, DefaultContext)
	}
}

func TestFromCheckpoint(t *testing.T) {
	dir := filepath.Join("..", "..", "engine", "testdata", "fixtures", "tiny-a")
	m, err := FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
	var want int64
	for _, s := range shards {
		st, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		want += st.Size()
	}
	if len(shards) != 3 || m.WeightsBytes != want {
		t.Errorf("weights %d bytes over %d shards, want %d", m.WeightsBytes, len(shards), want)
	}
	if _, err := FromCheckpoint(t.TempDir()); err == nil {
		t.Error("an empty folder gave a model")
	}
}

func TestMemAvailable(t *testing.T) {
	n, err := memAvailable(strings.NewReader("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"))
	if err != nil || n != 2048*1024 {
		t.Errorf("got %d, %v; want %d", n, err, 2048*1024)
	}
	for _, bad := range []string{"", "MemTotal: 1 kB\n", "MemAvailable: x kB\n", "MemAvailable: 12 MB\n", "MemAvailable: -5 kB\n", "MemAvailable: 99999999999999999999 kB\n"} {
		if _, err := memAvailable(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestHost(t *testing.T) {
	b, err := Host()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		if err == nil {
			t.Error("a budget on an OS without a probe")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if b.Bytes <= 0 || b.Source == "" {
		t.Errorf("host budget %+v", b)
	}
}

// TestQwenFootprintsOnce: checks of the 35B shape, as GET /manage/fit
// runs one per request, record each context's footprint once, and answer
// as a fresh measurement does.
func TestQwenFootprintsOnce(t *testing.T) {
	asked := countMeasures(t)
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	budget := Budget{Bytes: 24 << 30, Source: "a test's budget"}
	first, err := Check(m, budget, Request{Context: 8192, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Check(m, budget, Request{Context: 8192, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	if len(*asked) != 1 || first != again {
		t.Fatalf("a second check measured again (%v) or answered otherwise: %+v, %+v", *asked, first, again)
	}
	other, err := Check(m, budget, Request{Context: 3000, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	if len(*asked) != 2 || !slices.Equal((*asked)[1], []int{3000}) {
		t.Errorf("a new context measured %v, want [3000] alone", (*asked)[1:])
	}
	asked = countMeasures(t) // empty: measured afresh
	want, err := Check(m, budget, Request{Context: 3000, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	if other != want || len(*asked) != 1 {
		t.Errorf("from the cache %+v, measured %+v (measurements %v)", other, want, *asked)
	}
}

// TestFootprintsKeyedOnContents: the Setup screen reads the installed
// checkpoint's config anew on every GET /manage/fit; the second check of
// the same folder records nothing, and another shape is measured.
func TestFootprintsKeyedOnContents(t *testing.T) {
	asked := countMeasures(t)
	dir := filepath.Join("..", "..", "engine", "testdata", "fixtures", "tiny-a")
	budget := Budget{Bytes: 64 << 30, Source: "a test's budget"}
	var reports []Report
	for range 2 {
		m, err := FromCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Check(m, budget, Request{Context: 4096})
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	if len(*asked) != 1 || reports[0] != reports[1] {
		t.Fatalf("the second check of %s measured %v, answered %+v then %+v", dir, *asked, reports[0], reports[1])
	}
	m, err := FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Config.Experts *= 2
	if _, err := Check(m, budget, Request{Context: 4096}); err != nil {
		t.Fatal(err)
	}
	if len(*asked) != 2 {
		t.Errorf("a config with twice the experts measured %d times in all, want 2", len(*asked))
	}
}

// countMeasures makes the footprint cache an empty one for the test and
// returns the contexts each measurement it makes asks for.
func countMeasures(t *testing.T) *[][]int {
	asked := new([][]int)
	c := &footprintCache{byKey: map[footprintKey]gpumodel.Footprint{}, measure: func(cfg *checkpoint.Config, contexts []int) ([]gpumodel.Footprint, error) {
		*asked = append(*asked, contexts)
		return gpumodel.MeasureFootprints(cfg, contexts)
	}}
	old := footprints
	footprints = c
	t.Cleanup(func() { footprints = old })
	return asked
}

// TestNoMacWordsOffAMac: petal fit and the Setup screen spoke of Metal's
// working set and of which Mac to buy on Linux, and in GiB where the UI
// writes GB (issue 28 B.3). A budget that is no Mac's gets each verdict's
// advice in decimal GB without a word of Macs, the whole context's need
// in their place.
func TestNoMacWordsOffAMac(t *testing.T) {
	m, err := Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	mac, err := SimulatedMac(32)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Check(m, mac, Request{Context: 262144, CachedSessions: DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	needs := "The whole 262144-token context needs " + FormatBytes(whole.TotalBytes) + "."
	for _, c := range []struct {
		bytes   int64
		context int
		verdict Verdict
		want    []string
	}{
		{64 * GiB, 32768, Fits, nil},
		{mac.Bytes, 32768, Fits, []string{"up to 65536 tokens fit here", needs}},
		{mac.Bytes, 131072, Reduced, []string{"65536 tokens of context at most", "quit other memory-hungry programs", needs}},
		{16 * GiB, 32768, No, []string{"a machine with more", needs}},
	} {
		r, err := Check(m, Budget{Bytes: c.bytes, Source: "the memory this machine has available"}, Request{Context: c.context, CachedSessions: DefaultCachedSessions})
		if err != nil {
			t.Fatal(err)
		}
		g, err := Guidance(m, r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != c.verdict {
			t.Fatalf("%s at %d: verdict %s, want %s", FormatBytes(c.bytes), c.context, r.Verdict, c.verdict)
		}
		if c.want == nil && g != "" {
			t.Errorf("%s at %d: guidance %q, want none", FormatBytes(c.bytes), c.context, g)
		}
		for _, w := range c.want {
			if !strings.Contains(g, w) {
				t.Errorf("%s at %d: guidance %q lacks %q", FormatBytes(c.bytes), c.context, g, w)
			}
		}
		for _, said := range []string{r.Advice, g} {
			for _, lack := range []string{"Mac", "Metal", "working set", "GiB", "apps"} {
				if strings.Contains(said, lack) {
					t.Errorf("%s at %d: %q says %q", FormatBytes(c.bytes), c.context, said, lack)
				}
			}
		}
		if !strings.Contains(r.Advice, FormatBytes(c.bytes)+" available") {
			t.Errorf("advice %q does not give the budget as the UI writes it", r.Advice)
		}
	}
}

// TestFormatBytes: sizes are written as the web UI's formatBytes writes
// them (frontend/src/lib/format.ts), so the two agree on every screen.
func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 1000: "1.0 KB", 4_600_000: "4.6 MB", 536_870_912: "537 MB",
		19_508_787_456: "19.5 GB", 99_940_000_000: "99.9 GB", 100_000_000_000: "100 GB", 2_500_000_000_000: "2.5 TB", -2_700_000_000: "-2.7 GB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
