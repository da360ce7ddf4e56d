package runtime

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/backend"
	"petal/gpu"
	"petal/internal/fit"
	"petal/internal/models"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

func TestCacheBudget(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		requested, headroom, want int64
	}{
		{2 * gib, 5 * gib, 2 * gib}, // the asked size when it fits
		{2 * gib, gib, gib},         // never more than the headroom
		{2 * gib, 0, -1},            // nothing left: off
		{2 * gib, -gib, -1},         // over budget (an unchecked caller)
		{0, 5 * gib, -1},            // turned off
	} {
		if got := cacheBudget(tc.requested, tc.headroom); got != tc.want {
			t.Errorf("cacheBudget(%d, %d) = %d, want %d", tc.requested, tc.headroom, got, tc.want)
		}
	}
}

// slack is the headroom the small budgets leave at the context that fits.
const slack = 3 << 20

// budgetAt makes the CPU backend's budget hold dir's model at context
// tokens plus slack, and not at twice the context; it is restored when the
// test ends.
func budgetAt(t *testing.T, dir string, context int) {
	t.Helper()
	m, err := fit.FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	total := func(ctx int) int64 {
		r, err := fit.Check(m, fit.Budget{Bytes: 1 << 40}, fit.Request{Context: ctx, CachedSessions: fit.DefaultCachedSessions})
		if err != nil {
			t.Fatal(err)
		}
		return r.TotalBytes
	}
	b := fit.Budget{Bytes: total(context) + slack, Source: "a test's budget"}
	if total(2*context) <= b.Bytes {
		t.Fatalf("the budget for %d tokens holds %d as well", context, 2*context)
	}
	setBudget(t, b)
}

func setBudget(t *testing.T, b fit.Budget) { setBackendBudget(t, "cpu", b) }

func setBackendBudget(t *testing.T, backend string, b fit.Budget) {
	old := budgets[backend]
	budgets[backend] = func() (fit.Budget, error) { return b, nil }
	t.Cleanup(func() { budgets[backend] = old })
}

// TestGPULoadsChecked shows that both GPU backends check the fit before
// they open a device: a budget too small is refused on any machine, and
// Metal's own budget cannot be had without Metal.
func TestGPULoadsChecked(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	m, err := fit.FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if goruntime.GOOS != "darwin" {
		// Said as Metal needing a Mac, without suggesting --memory-gb,
		// which would not make it run.
		if _, err := Load(LoadRequest{Dir: dir, Backend: "metal"}, io.Discard); !errors.Is(err, gpu.ErrUnsupported) || strings.Contains(err.Error(), "--memory-gb") {
			t.Errorf("metal without Metal: %v, want gpu.ErrUnsupported", err)
		}
	}
	for _, backend := range []string{"sim", "metal"} {
		setBackendBudget(t, backend, fit.Budget{Bytes: m.WeightsBytes, Source: "a test's budget"})
		if _, err := Load(LoadRequest{Dir: dir, Backend: backend}, io.Discard); !errors.Is(err, fit.ErrDoesNotFit) {
			t.Errorf("%s on too little memory: %v", backend, err)
		}
	}
}

func TestLoadModelFit(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	budgetAt(t, dir, 8192)
	const asked = 2 << 30

	// The model's own context (262144) does not fit; 8192 does.
	var out bytes.Buffer
	l, err := Load(LoadRequest{Dir: dir, Backend: "cpu", CacheBytes: asked, Parallel: 1}, &out)
	if err != nil {
		t.Fatal(err)
	}
	l.Model.Close()
	if l.Context != 8192 || l.CacheBytes != slack || l.Report.HeadroomBytes != slack {
		t.Errorf("context %d, cache %d bytes, headroom %d; want 8192 and %d", l.Context, l.CacheBytes, l.Report.HeadroomBytes, slack)
	}
	if !strings.Contains(out.String(), "context lowered from 262144 to 8192 tokens") {
		t.Errorf("output %q does not say the context was lowered", out.String())
	}
	if got := DescribeCache(l, asked); got != "prefix cache: 3 MiB, the memory left beside the model and one request at 8192 tokens of context (2048 MiB asked)" {
		t.Errorf("cache line %q", got)
	}

	// A context that fits is kept, silently, with more room for the cache.
	out.Reset()
	l, err = Load(LoadRequest{Dir: dir, Backend: "cpu", Context: 4096, CacheBytes: asked, Parallel: 1}, &out)
	if err != nil {
		t.Fatal(err)
	}
	l.Model.Close()
	if l.Context != 4096 || out.Len() != 0 || l.CacheBytes <= slack || l.CacheBytes != min(asked, l.Report.HeadroomBytes) {
		t.Errorf("at 4096: context %d, cache %d, output %q", l.Context, l.CacheBytes, out.String())
	}

	// No room for even the shortest context: refused, with the verdict.
	m, err := fit.FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	setBudget(t, fit.Budget{Bytes: m.WeightsBytes, Source: "a test's budget"})
	_, err = Load(LoadRequest{Dir: dir, Backend: "cpu", CacheBytes: asked}, &out)
	if !errors.Is(err, fit.ErrDoesNotFit) || !strings.Contains(err.Error(), `verdict "no"`) {
		t.Errorf("a budget of the weights alone: %v", err)
	}

	// A simulated Mac's budget replaces the machine's: 8 GB holds this
	// small model whole, and a size no Mac has is refused.
	l, err = Load(LoadRequest{Dir: dir, Backend: "cpu", CacheBytes: asked, MemoryGB: 8}, &out)
	if err != nil {
		t.Fatal(err)
	}
	l.Model.Close()
	if want, _ := fit.SimulatedMac(8); l.Context != 262144 || l.Report.WorkingSetBytes != want.Bytes {
		t.Errorf("on a simulated 8 GB Mac: context %d, budget %d", l.Context, l.Report.WorkingSetBytes)
	}
	if _, err := Load(LoadRequest{Dir: dir, Backend: "cpu", MemoryGB: 3}, &out); err == nil {
		t.Error("a 3 GB Mac accepted")
	}
}

func TestLoadModelUnchecked(t *testing.T) {
	dir, tok := servicetest.Folder(t)
	t.Cleanup(backend.Register("scripted", func(string) (engine.Model, error) {
		return servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "x" })), nil
	}))
	l, err := Load(LoadRequest{Dir: dir, Backend: "scripted", Context: 1000, CacheBytes: 5 << 20}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l.Context != 1000 || l.CacheBytes != 5<<20 || l.Report != nil {
		t.Errorf("unchecked load: %+v", l)
	}
	if l, _ = Load(LoadRequest{Dir: dir, Backend: "scripted"}, io.Discard); l.CacheBytes != -1 || DescribeCache(l, 0) != "prefix cache: off" {
		t.Errorf("cache asked off: %d", l.CacheBytes)
	}
}

// TestOpenFit opens a runtime on the CPU backend with a small budget: it
// serves at the lowered context and says so, and a budget too small for
// the model is refused before anything listens.
func TestOpenFit(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	budgetAt(t, dir, 8192)
	var notes bytes.Buffer
	cfg := Config{Load: LoadRequest{Dir: dir, Backend: "cpu", CacheBytes: 2 << 30}, Addr: "127.0.0.1:0",
		SettingsPath: t.TempDir() + "/s.json", Notes: &notes}
	rt, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startup := rt.Startup()
	info := rt.Info()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(notes.String(), "context lowered from 262144 to 8192 tokens") ||
		info.ContextLength != 8192 || !strings.HasPrefix(startup[0], "prefix cache: 3 MiB") {
		t.Errorf("notes %q, context %d, startup %q", notes.String(), info.ContextLength, startup)
	}

	m, err := fit.FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	setBudget(t, fit.Budget{Bytes: m.WeightsBytes, Source: "a test's budget"})
	if _, err := Open(cfg); !errors.Is(err, fit.ErrDoesNotFit) {
		t.Errorf("Open on too little memory: %v", err)
	}
}

// TestGPULoadSizedByDevice: a GPU backend's load is checked against the
// working set of the device it then runs on (the sim stands in for Metal
// here, its host budget set aside), and the Setup screen's verdict takes
// the same device's figure.
func TestGPULoadSizedByDevice(t *testing.T) {
	old := budgets["sim"]
	delete(budgets, "sim")
	t.Cleanup(func() { budgets["sim"] = old })
	l, err := Load(LoadRequest{Dir: servicetest.FixtureFolder(t, "tiny-a"), Backend: "sim", Context: 4096}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Model.Close()
	if l.Report == nil || !strings.Contains(l.Report.WorkingSetSource, "Petal sim") {
		t.Fatalf("the load was not sized by its device: %+v", l.Report)
	}
	b, err := l.budget()()
	if err != nil || b.Bytes != l.Report.WorkingSetBytes || b.Source != l.Report.WorkingSetSource {
		t.Errorf("the Setup screen's budget %+v (%v), the load's %d (%s)", b, err, l.Report.WorkingSetBytes, l.Report.WorkingSetSource)
	}
}

// TestLoadParallel: how many requests decode together. Left to the check
// (0), it is as many sequences as the memory left at the context holds,
// at most fit.MaxAutoParallel, and the prefix cache gets what they leave;
// asked for, it is served as asked, with a note when their caches could
// outgrow the memory; outside 0..service.MaxParallel it is refused.
func TestLoadParallel(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	const ctx, asked = 4096, 2 << 30
	fm, err := fit.FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := fit.Check(fm, fit.Budget{Bytes: 1 << 40}, fit.Request{Context: ctx, CachedSessions: fit.DefaultCachedSessions})
	if err != nil {
		t.Fatal(err)
	}
	seq := r.SequenceBytes()
	bit := seq / 2
	load := func(parallel int) (Loaded, string) {
		t.Helper()
		var out bytes.Buffer
		l, err := Load(LoadRequest{Dir: dir, Backend: "cpu", Context: ctx, CacheBytes: asked, Parallel: parallel}, &out)
		if err != nil {
			t.Fatal(err)
		}
		l.Model.Close()
		return l, out.String()
	}

	// Room for two more sequences and a bit: three together, the cache
	// the bit.
	setBudget(t, fit.Budget{Bytes: r.TotalBytes + 2*seq + bit, Source: "a test's budget"})
	if l, out := load(0); l.Parallel != 3 || l.CacheBytes != bit || out != "" {
		t.Errorf("auto with room for 3: %d together, cache %d (want %d), output %q", l.Parallel, l.CacheBytes, bit, out)
	}
	if l, _ := load(1); l.Parallel != 1 || l.CacheBytes != 2*seq+bit {
		t.Errorf("one at a time: %d together, cache %d, want %d", l.Parallel, l.CacheBytes, 2*seq+bit)
	}
	l, out := load(service.MaxParallel)
	if l.Parallel != service.MaxParallel || l.CacheBytes != -1 || !strings.Contains(out, "the memory may run out") {
		t.Errorf("%d asked: %d together, cache %d, output %q", service.MaxParallel, l.Parallel, l.CacheBytes, out)
	}
	// Room for many: fit.MaxAutoParallel.
	setBudget(t, fit.Budget{Bytes: r.TotalBytes + 100*seq, Source: "a test's budget"})
	if l, _ := load(0); l.Parallel != fit.MaxAutoParallel {
		t.Errorf("auto with room for 100: %d together, want %d", l.Parallel, fit.MaxAutoParallel)
	}
	// None beside the one: one at a time.
	setBudget(t, fit.Budget{Bytes: r.TotalBytes + seq - 1, Source: "a test's budget"})
	if l, _ := load(0); l.Parallel != 1 {
		t.Errorf("auto without room: %d together", l.Parallel)
	}
	for _, n := range []int{-1, service.MaxParallel + 1} {
		if _, err := Load(LoadRequest{Dir: dir, Backend: "cpu", Context: ctx, Parallel: n}, io.Discard); err == nil {
			t.Errorf("parallel %d loaded", n)
		}
	}
}

// TestLoadParallelDemo: the demo model on this machine's own budget
// gets the auto count of its own check.
func TestLoadParallelDemo(t *testing.T) {
	demo, err := models.DemoDir()
	if err != nil {
		t.Fatal(err)
	}
	l, err := Load(LoadRequest{Dir: demo, Backend: "cpu", CacheBytes: service.DefaultCacheBytes}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	l.Model.Close()
	r := *l.Report
	t.Logf("the demo at %d tokens on %s (%s): %s left, %s a sequence: %d together", l.Context, fit.FormatBytes(r.WorkingSetBytes),
		r.WorkingSetSource, fit.FormatBytes(r.HeadroomBytes), fit.FormatBytes(r.SequenceBytes()), l.Parallel)
	if l.Parallel != fit.AutoParallel(r) || l.CacheBytes != cacheBudget(service.DefaultCacheBytes, r.HeadroomBytes-fit.ParallelBytes(r, l.Parallel)) {
		t.Errorf("the demo: %d together, cache %d", l.Parallel, l.CacheBytes)
	}
}

// TestLoadParallelUnchecked: a backend without a fit check runs one at a
// time unless asked.
func TestLoadParallelUnchecked(t *testing.T) {
	dir, tok := servicetest.Folder(t)
	t.Cleanup(backend.Register("scripted", func(string) (engine.Model, error) {
		return servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "x" })), nil
	}))
	for asked, want := range map[int]int{0: 1, 1: 1, 5: 5} {
		l, err := Load(LoadRequest{Dir: dir, Backend: "scripted", Parallel: asked}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		l.Model.Close()
		if l.Parallel != want {
			t.Errorf("unchecked, %d asked: %d together, want %d", asked, l.Parallel, want)
		}
	}
}

// TestLoadNoDrafts: a model with an MTP head leaves room for drafting
// (its kept DeltaNet states and the head's cache, per sequence) unless
// speculation is off, when the memory goes to one more sequence.
func TestLoadNoDrafts(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	head, err := os.ReadFile(filepath.Join("..", "..", "engine", "testdata", "mtp", "tiny-a", "model-mtp.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model-mtp.safetensors"), head, 0o644); err != nil {
		t.Fatal(err)
	}
	const ctx = 4096
	fm, err := fit.FromCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	req := fit.Request{Context: ctx, CachedSessions: fit.DefaultCachedSessions, NoDrafts: true}
	r, err := fit.Check(fm, fit.Budget{Bytes: 1 << 40}, req)
	if err != nil {
		t.Fatal(err)
	}
	// Room for exactly two more sequences that do not draft.
	setBudget(t, fit.Budget{Bytes: r.TotalBytes + 2*r.SequenceBytes(), Source: "a test's budget"})
	load := func(noDrafts bool) int {
		t.Helper()
		l, err := Load(LoadRequest{Dir: dir, Backend: "cpu", Context: ctx, NoDrafts: noDrafts}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		l.Model.Close()
		return l.Parallel
	}
	if off, drafting := load(true), load(false); off != 3 || drafting >= off {
		t.Errorf("speculation off: %d together (want 3); drafting: %d (want fewer)", off, drafting)
	}
}
