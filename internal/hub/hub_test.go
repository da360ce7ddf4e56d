package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
	"petal/internal/hub/hubtest"
)

const fixture = "../../engine/testdata/fixtures/tiny-a"

// options pulls h's repository into a fresh folder, with small chunks and
// quick retries so faults show within a test's time.
func options(t *testing.T, h *hubtest.Server) Options {
	return Options{
		Endpoint: h.URL(), Token: "secret-token", Repo: h.Repo, Revision: hubtest.SHA,
		Dir: filepath.Join(t.TempDir(), "models", "tiny"), NoHFCache: true,
		Parallel: 3, ChunkBytes: 64 << 10, StallTimeout: 5 * time.Second,
		MaxRetries: 3, RetryBase: time.Millisecond,
		FreeSpace: func(string) (int64, error) { return 1 << 50, nil },
	}
}

// checkPulled asserts dir holds the served files, shards in their aligned
// form, and opens as a checkpoint.
func checkPulled(t *testing.T, h *hubtest.Server, dir string) {
	t.Helper()
	for name, want := range h.Files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.HasSuffix(name, ".safetensors") {
			checkAlignedShard(t, name, got, want)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes; want the served %d bytes", name, len(got), len(want))
		}
	}
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatalf("pulled folder does not open: %v", err)
	}
	m.Close()
	if _, err := readManifest(dir); err != nil {
		t.Error(err)
	}
	for _, n := range []string{stateName, headsDir} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s left in the finished folder", n)
		}
	}
}

// checkAlignedShard asserts that got holds the tensors of want, the
// served shard, with the same dtypes, shapes and bytes, its data section
// starting on a 16-byte boundary and every tensor on the largest power of
// two up to 16 that divides its size.
func checkAlignedShard(t *testing.T, name string, got, want []byte) {
	t.Helper()
	gh, err := safetensors.ParseHeader(got, int64(len(got)))
	if err != nil {
		t.Errorf("%s: stored shard: %v", name, err)
		return
	}
	wh, err := safetensors.ParseHeader(want, int64(len(want)))
	if err != nil {
		t.Fatalf("%s: served shard: %v", name, err)
	}
	if gh.DataOffset%16 != 0 {
		t.Errorf("%s: data section at %d", name, gh.DataOffset)
	}
	if len(gh.Tensors) != len(wh.Tensors) || !maps.Equal(gh.Metadata, wh.Metadata) {
		t.Errorf("%s: %d tensors, metadata %v; served %d, %v", name, len(gh.Tensors), gh.Metadata, len(wh.Tensors), wh.Metadata)
	}
	served := map[string]safetensors.Info{}
	for _, ti := range wh.Tensors {
		served[ti.Name] = ti
	}
	for _, ti := range gh.Tensors {
		w, ok := served[ti.Name]
		if !ok || w.DType != ti.DType || !slices.Equal(w.Shape, ti.Shape) {
			t.Errorf("%s: stored %s %s%v; served %+v", name, ti.Name, ti.DType, ti.Shape, w)
			continue
		}
		off := gh.DataOffset + ti.Begin
		if !bytes.Equal(got[off:gh.DataOffset+ti.End], want[wh.DataOffset+w.Begin:wh.DataOffset+w.End]) {
			t.Errorf("%s: %s: bytes differ from the served ones", name, ti.Name)
		}
		if size := ti.End - ti.Begin; off%wantAlign(size) != 0 {
			t.Errorf("%s: %s (%d bytes) at file offset %d", name, ti.Name, size, off)
		}
	}
}

// pullWhole pulls with o from h, which must serve every byte once (a
// resumed connection fetches nothing twice), and checks the result.
func pullWhole(t *testing.T, h *hubtest.Server, o Options) string {
	t.Helper()
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	if got := h.Served(); got != h.Total() {
		t.Errorf("served %d bytes for %d: bytes were fetched twice", got, h.Total())
	}
	return dir
}

// checkAbsent asserts that no model folder exists: nothing half-made looks
// complete.
func checkAbsent(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists after a failed pull", dir)
	}
	if _, lock := stagingPaths(dir); fileExists(lock) {
		t.Errorf("the lock file %s is left after a failed pull", lock)
	}
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestPull(t *testing.T) {
	h := hubtest.New(t, fixture)
	o := options(t, h)
	var mu sync.Mutex
	var last Event
	o.Progress = func(ev Event) {
		mu.Lock()
		last = ev
		mu.Unlock()
	}
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if dir != o.Dir {
		t.Errorf("pulled into %s, asked %s", dir, o.Dir)
	}
	checkPulled(t, h, dir)
	if got := h.Served(); got != h.Total() {
		t.Errorf("served %d bytes for %d bytes of files", got, h.Total())
	}
	if hub, cdn := h.SawToken(); !hub || cdn {
		t.Errorf("Authorization seen by hub %v, cdn %v: want the hub only", hub, cdn)
	}
	if last.Phase != Done || last.Done != h.Total() || last.Total != h.Total() {
		t.Errorf("last event %+v", last)
	}
	// Pulling again finds the finished folder without asking the Hub.
	before := h.Listings()
	if _, err := Pull(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	if h.Listings() != before {
		t.Error("a finished pull asked the Hub again")
	}
}

func TestPullResumesAfterCuts(t *testing.T) {
	h := hubtest.New(t, fixture)
	for name := range h.Files {
		if h.LFS[name] {
			h.CutAfter(name, int64(len(h.Files[name])/3))
		}
	}
	o := options(t, h)
	o.ChunkBytes = 1 << 20 // one chunk a file: cuts land mid-chunk
	pullWhole(t, h, o)
}

func TestPullStalledServer(t *testing.T) {
	h := hubtest.New(t, fixture)
	shard := "model-00002-of-00003.safetensors"
	h.StallAfter(shard, 1000)
	o := options(t, h)
	o.StallTimeout = 200 * time.Millisecond
	start := time.Now()
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > h.StallHold {
		t.Error("the stall was waited out, not detected")
	}
	checkPulled(t, h, dir)
	if got := h.Served(); got != h.Total() {
		t.Errorf("served %d bytes for %d", got, h.Total())
	}
}

// TestPullResumesAfterStop stops a pull midway, as a crash, a reboot or a
// pause would, and checks that the next one fetches only the rest.
func TestPullResumesAfterStop(t *testing.T) {
	h := hubtest.New(t, fixture)
	shard := "model-00001-of-00003.safetensors"
	h.StallAfter(shard, 30<<10) // this shard hangs 30 KiB in
	o := options(t, h)
	o.Parallel = 1
	ctx, cancel := context.WithCancelCause(t.Context())
	o.Progress = func(ev Event) {
		if ev.Phase == Downloading && h.Served() >= 200<<10 {
			cancel(ErrPaused)
		}
	}
	if _, err := Pull(ctx, o); !errors.Is(err, ErrPaused) {
		t.Fatalf("stopped pull: %v, want ErrPaused", err)
	}
	checkAbsent(t, o.Dir)
	first := h.Served()
	if first == 0 || first >= h.Total() {
		t.Fatalf("first run served %d of %d bytes", first, h.Total())
	}
	o.Progress = nil
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	if got := h.Served(); got != h.Total() {
		t.Errorf("two runs served %d bytes for %d: %d fetched again", got, h.Total(), got-h.Total())
	}
}

func TestPullWrongHash(t *testing.T) {
	h := hubtest.New(t, fixture)
	shard := "model-00003-of-00003.safetensors"
	h.Corrupt(shard, true)
	o := options(t, h)
	_, err := Pull(t.Context(), o)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("pull of a corrupt file: %v, want ErrChecksum", err)
	}
	checkAbsent(t, o.Dir)
	staging, _ := stagingPaths(o.Dir)
	for _, n := range []string{shard, shard + partSuffix} {
		if _, err := os.Stat(filepath.Join(staging, n)); err == nil {
			t.Errorf("%s kept after its hash failed", n)
		}
	}
	// Once the server is fixed, the next pull fetches that file anew and
	// keeps the verified others.
	h.Corrupt(shard, false)
	before := h.Served()
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	if got := h.Served() - before; got > h.Total()-int64(len(h.Files["model-00001-of-00003.safetensors"])) {
		t.Errorf("second pull fetched %d bytes: verified files were fetched again", got)
	}
}

func TestPullNotFound(t *testing.T) {
	h := hubtest.New(t, fixture)
	h.Missing("config.json")
	o := options(t, h)
	_, err := Pull(t.Context(), o)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("pull of a missing file: %v, want ErrNotFound", err)
	}
	if n := h.Resolves()["config.json"]; n != 1 {
		t.Errorf("a 404 was asked %d times; it is not worth retrying", n)
	}
	checkAbsent(t, o.Dir)

	o.Repo = "petal-test/absent"
	if _, err := Pull(t.Context(), o); !errors.Is(err, ErrNotFound) {
		t.Errorf("pull of an unknown repository: %v, want ErrNotFound", err)
	}
}

func TestPullFullDisk(t *testing.T) {
	h := hubtest.New(t, fixture)
	o := options(t, h)
	o.FreeSpace = func(string) (int64, error) { return DiskMargin + h.Total()/2, nil }
	if _, err := Pull(t.Context(), o); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("pull onto a small disk: %v, want ErrNoSpace", err)
	}
	if n := totalResolves(h); n != 0 {
		t.Errorf("%d files requested before the free-space check failed", n)
	}
	checkAbsent(t, o.Dir)

	// The disk fills up while writing.
	o = options(t, h)
	var written atomic.Int64
	o.beforeWrite = func(n int) error {
		if written.Add(int64(n)) > h.Total()/2 {
			return syscall.ENOSPC
		}
		return nil
	}
	if _, err := Pull(t.Context(), o); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrNoSpace) {
		t.Fatalf("pull onto a disk that fills: %v, want ErrNoSpace and ENOSPC", err)
	}
	checkAbsent(t, o.Dir)
	first := h.Served()
	o.beforeWrite = nil
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	if again := h.Served() - first; again >= h.Total() {
		t.Errorf("after the disk was freed the pull fetched %d of %d bytes: it started over", again, h.Total())
	}
}

func TestPullHostileNames(t *testing.T) {
	for _, name := range []string{
		"../../x", "/etc/passwd", "a/../../b", "a/./b", "a//b", `C:\x`, `a\b`, "c:x",
		".petal-state.json", "x" + partSuffix, "", " config.json", "a\x00b", "a\nb",
		"model\u202Enosj.safetensors", "a\u2066b", "a\u200fb",
		string(make([]byte, MaxNameBytes+1)),
	} {
		t.Run("", func(t *testing.T) {
			h := hubtest.New(t, fixture)
			h.EditListing(func(m *hubtest.Listing) { m.Siblings[0].Name = name })
			o := options(t, h)
			parent := filepath.Dir(o.Dir)
			_, err := Pull(t.Context(), o)
			if !errors.Is(err, ErrBadListing) {
				t.Fatalf("listing with %q: %v, want ErrBadListing", name, err)
			}
			if n := totalResolves(h); n != 0 {
				t.Errorf("%d files requested from a hostile listing", n)
			}
			// Nothing was left next to the model folder, not even the lock.
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				t.Errorf("%s left behind", e.Name())
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(parent), "x")); err == nil {
				t.Error("a file escaped the model folder")
			}
		})
	}
	t.Run("case-insensitive duplicate", func(t *testing.T) {
		h := hubtest.New(t, fixture)
		h.EditListing(func(m *hubtest.Listing) { m.Siblings[1].Name = "CONFIG.json"; m.Siblings[0].Name = "config.JSON" })
		if _, err := Pull(t.Context(), options(t, h)); !errors.Is(err, ErrBadListing) {
			t.Fatalf("duplicate names: %v, want ErrBadListing", err)
		}
	})
	t.Run("a file and a folder of the same name", func(t *testing.T) {
		h := hubtest.New(t, fixture)
		h.EditListing(func(m *hubtest.Listing) { m.Siblings[0].Name = "a"; m.Siblings[1].Name = "A/b" })
		_, err := Pull(t.Context(), options(t, h))
		if !errors.Is(err, ErrBadListing) || !strings.Contains(err.Error(), `"a" is listed as a file and as the folder of "A/b"`) {
			t.Fatalf("a and A/b: %v, want ErrBadListing naming both", err)
		}
	})
	t.Run("another commit", func(t *testing.T) {
		h := hubtest.New(t, fixture)
		h.EditListing(func(m *hubtest.Listing) { m.SHA = "fedcba9876543210fedcba9876543210fedcba98" })
		if _, err := Pull(t.Context(), options(t, h)); !errors.Is(err, ErrBadListing) {
			t.Fatalf("listing of another commit: %v, want ErrBadListing", err)
		}
	})
	t.Run("huge size", func(t *testing.T) {
		h := hubtest.New(t, fixture)
		h.EditListing(func(m *hubtest.Listing) { *m.Siblings[0].Size = MaxFileBytes + 1; m.Siblings[0].LFS = nil })
		if _, err := Pull(t.Context(), options(t, h)); !errors.Is(err, ErrBadListing) {
			t.Fatalf("listing with a huge file: %v, want ErrBadListing", err)
		}
	})
}

// TestPullRedirectKeepsToken checks the other side of the token rule: a
// redirect back to the endpoint's own host still carries it.
func TestTokenOnlyToItsHost(t *testing.T) {
	h := hubtest.New(t, fixture)
	o := options(t, h)
	o.Token = ""
	if _, err := Pull(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	if hub, cdn := h.SawToken(); hub || cdn {
		t.Error("an Authorization header without a token")
	}
}

func TestImportFromHFCache(t *testing.T) {
	h := hubtest.New(t, fixture)
	cache, blobs := h.HFCache(t)
	// One cached file is damaged: it must be downloaded, not imported.
	damaged := "model-00002-of-00003.safetensors"
	bad := append([]byte(nil), h.Files[damaged]...)
	bad[len(bad)-10] ^= 1
	if err := os.WriteFile(blobs[damaged], bad, 0o644); err != nil {
		t.Fatal(err)
	}

	o := options(t, h)
	o.NoHFCache, o.HFCache = false, cache
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	for name, n := range h.Resolves() {
		if name != damaged {
			t.Errorf("%s downloaded %d times though the cache holds it", name, n)
		}
	}
	if h.Resolves()[damaged] == 0 {
		t.Error("the damaged cached file was imported")
	}
	a, _ := os.Stat(filepath.Join(dir, "config.json"))
	b, _ := os.Stat(blobs["config.json"])
	if !os.SameFile(a, b) {
		t.Error("config.json was copied, not linked")
	}
}

func TestHFCacheDirFromEnvironment(t *testing.T) {
	t.Setenv(EnvHubCache, "")
	t.Setenv(EnvHome, "/hf-home")
	if got := hfCacheDir(); got != filepath.Join("/hf-home", "hub") {
		t.Errorf("with HF_HOME: %s", got)
	}
	t.Setenv(EnvHubCache, "/hub-cache")
	if got := hfCacheDir(); got != "/hub-cache" {
		t.Errorf("with HF_HUB_CACHE: %s", got)
	}
}

func TestEndpointAndTokenFromEnvironment(t *testing.T) {
	t.Setenv(EnvEndpoint, "https://mirror.example/")
	t.Setenv(EnvToken, "tok")
	t.Setenv(EnvModels, "/models-root")
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Endpoint != "https://mirror.example" || o.Token != "tok" || o.Dir != filepath.Join("/models-root", "Qwen3.6-35B-A3B-4bit") ||
		o.Repo != DefaultRepo || o.Revision != DefaultRevision {
		t.Errorf("defaults %+v", o)
	}
	for _, bad := range []Options{
		{Endpoint: "ftp://x"}, {Endpoint: "https://user:pw@x"}, {Repo: "../x"}, {Repo: "a/b/c"},
		{Revision: "../main"}, {Parallel: MaxParallel + 1}, {ChunkBytes: 10},
	} {
		if _, err := bad.withDefaults(); !errors.Is(err, ErrInput) {
			t.Errorf("%+v: %v, want ErrInput", bad, err)
		}
	}
}

func TestDownloadPauseResumeCancel(t *testing.T) {
	h := hubtest.New(t, fixture)
	h.StallAfter("model-00001-of-00003.safetensors", 10<<10)
	o := options(t, h)
	o.Parallel = 1
	tr := &watchedTransport{base: http.DefaultTransport}
	o.Transport = tr
	var onDisk atomic.Int64
	progressed := make(chan struct{}, 1)
	o.Progress = func(ev Event) {
		onDisk.Store(ev.Done)
		select {
		case progressed <- struct{}{}:
		default:
		}
	}
	d := Start(t.Context(), o)
	// Pause while a connection hangs, once what it sent is on disk.
	await(t, h.WhenStalled())
	for onDisk.Load() != h.Served() {
		await(t, progressed)
	}
	if tr.open() == 0 {
		t.Fatal("the stalled request is not counted open")
	}
	d.Pause()
	if _, err := d.Wait(); !errors.Is(err, ErrPaused) {
		t.Fatalf("paused download: %v", err)
	}
	// Once Pause returns, every request of the pull has ended and its body
	// is closed: no byte can come after it.
	if n := tr.open(); n != 0 {
		t.Errorf("%d requests or bodies still open after Pause: bytes could keep coming", n)
	}
	d.Resume(t.Context())
	dir, err := d.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	if got := h.Served(); got != h.Total() {
		t.Errorf("pause and resume served %d bytes for %d", got, h.Total())
	}

	// Cancel removes what was written; Delete removes a finished model.
	h2 := hubtest.New(t, fixture)
	h2.StallAfter("model-00001-of-00003.safetensors", 10<<10)
	o2 := options(t, h2)
	d2 := Start(t.Context(), o2)
	await(t, h2.WhenStalled())
	if err := d2.Cancel(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(o2.Dir))
	if len(entries) != 0 {
		t.Errorf("%d entries left after Cancel", len(entries))
	}
	if err := Delete(t.TempDir()); !errors.Is(err, ErrInput) {
		t.Errorf("Delete of a folder Petal did not pull: %v", err)
	}
	if err := Delete(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ = os.ReadDir(filepath.Dir(dir))
	if len(entries) != 0 {
		t.Errorf("%d entries left after Delete", len(entries))
	}
}

func TestPullIntoOccupiedFolder(t *testing.T) {
	h := hubtest.New(t, fixture)
	o := options(t, h)
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(t.Context(), o); !errors.Is(err, ErrExists) {
		t.Fatalf("pull into a folder that holds something: %v, want ErrExists", err)
	}
	if got, err := os.ReadFile(filepath.Join(o.Dir, "notes.txt")); err != nil || string(got) != "mine" {
		t.Errorf("the folder's file after a refused pull: %q, %v", got, err)
	}
	// An empty folder is taken as if absent.
	if err := os.Remove(filepath.Join(o.Dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatalf("pull into an empty folder: %v", err)
	}
	checkPulled(t, h, dir)
}

func totalResolves(h *hubtest.Server) int {
	n := 0
	for _, c := range h.Resolves() {
		n += c
	}
	return n
}

// await waits for c to close, or fails the test after 10 s.
func await(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
}

// watchedTransport counts the requests in flight and the response bodies
// not yet closed.
type watchedTransport struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (w *watchedTransport) open() int64 { return w.n.Load() }

func (w *watchedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w.n.Add(1)
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		w.n.Add(-1)
		return nil, err
	}
	resp.Body = &watchedBody{ReadCloser: resp.Body, n: &w.n}
	return resp, nil
}

type watchedBody struct {
	io.ReadCloser
	n    *atomic.Int64
	once sync.Once
}

func (b *watchedBody) Close() error {
	b.once.Do(func() { b.n.Add(-1) })
	return b.ReadCloser.Close()
}

// TestPullResumesFromStaleState stands for a crash between two saves of
// the resume state: the state on disk claims fewer bytes than the part
// files hold. The next pull fetches from what the state claims, no more,
// and the result is whole.
func TestPullResumesFromStaleState(t *testing.T) {
	h := hubtest.New(t, fixture)
	shard := "model-00001-of-00003.safetensors"
	h.StallAfter(shard, 30<<10)
	o := options(t, h)
	o.Parallel = 1
	ctx, cancel := context.WithCancelCause(t.Context())
	o.Progress = func(ev Event) {
		if ev.Phase == Downloading && h.Stalled() && ev.Done == h.Served() {
			cancel(ErrPaused)
		}
	}
	if _, err := Pull(ctx, o); !errors.Is(err, ErrPaused) {
		t.Fatalf("stopped pull: %v, want ErrPaused", err)
	}
	staging, _ := stagingPaths(o.Dir)
	path := filepath.Join(staging, stateName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	fs := st.Files[shard]
	// The header region came in requests of its own before the stalled one.
	if fs == nil || fs.Verified || fs.Chunks[0] < 30<<10 || fs.Chunks[0] > 40<<10 {
		t.Fatalf("state of the stopped shard: %+v", fs)
	}
	fs.Chunks[0] -= 20 << 10 // the last save before the "crash"
	if data, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	first := h.Served()
	o.Progress = nil
	dir, err := Pull(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, h, dir)
	if again, want := h.Served()-first, h.Total()-first+20<<10; again != want {
		t.Errorf("resumed pull fetched %d bytes, want %d (the rest and the 20 KiB the state did not claim)", again, want)
	}
}

func TestLockExclusiveAndRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".petal-x.lock")
	unlock, err := lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock(path); !errors.Is(err, ErrBusy) {
		t.Fatalf("second lock while held: %v, want ErrBusy", err)
	}
	unlock()
	if fileExists(path) {
		t.Fatal("the lock file is left after unlock")
	}
	again, err := lock(path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again()
}

// TestPullOverstatedSize: a listing entry far larger than the file served
// fails on the server's own size, leaving no part file of the listed size.
func TestPullOverstatedSize(t *testing.T) {
	h := hubtest.New(t, fixture)
	const listed = 40 << 30
	var name string
	h.EditListing(func(m *hubtest.Listing) {
		for i, s := range m.Siblings {
			if s.Name == "logits.f32" {
				name = s.Name
				if s.LFS != nil {
					m.Siblings[i].LFS.Size = listed
				}
				*m.Siblings[i].Size = listed
			}
		}
	})
	o := options(t, h)
	_, err := Pull(t.Context(), o)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("a listing overstating %s: %v, want ErrChecksum", name, err)
	}
	staging, _ := stagingPaths(o.Dir)
	filepath.WalkDir(staging, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, partSuffix) {
			if info, err := d.Info(); err == nil && info.Size() > int64(len(h.Files[name])) {
				t.Errorf("%s is %d bytes: the listing's size was allocated", p, info.Size())
			}
		}
		return nil
	})
}
