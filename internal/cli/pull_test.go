package cli

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"petal/engine/checkpoint"
	"petal/internal/hub"
	"petal/internal/hub/hubtest"
)

// TestPull pulls a fixture from a fake Hub whose connection to one shard
// is cut midway, and loads the result.
func TestPull(t *testing.T) {
	h := hubtest.New(t, "../../engine/testdata/fixtures/tiny-a")
	h.CutAfter("model-00002-of-00003.safetensors", 100<<10)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil { // an empty --dir is taken
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := Run([]string{"pull", "--endpoint", h.URL(), "--repo", h.Repo, "--revision", hubtest.SHA, "--dir", dir, "--no-hf-cache"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), dir) {
		t.Errorf("output %q does not name %s", out.String(), dir)
	}
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if h.Served() != h.Total() {
		t.Errorf("served %d bytes for %d", h.Served(), h.Total())
	}
}

// TestPullSaysMTPNotFetched: pulling the default model while no pinned
// manifest of its original's MTP tensors is committed installs the model
// and says, after it, that the head was not fetched and why; --no-mtp
// says nothing.
func TestPullSaysMTPNotFetched(t *testing.T) {
	if _, err := hub.PinnedManifest(hub.MTPSourceRepo, hub.MTPTensors); err == nil {
		t.Skip("a pinned MTP manifest is committed: the pull fetches the head (internal/hub's TestPullMTP covers it)")
	}
	for _, noMTP := range []bool{false, true} {
		h := hubtest.New(t, "../../engine/testdata/fixtures/tiny-a")
		h.Repo = hub.DefaultRepo
		args := []string{"pull", "--endpoint", h.URL(), "--revision", hubtest.SHA, "--dir", filepath.Join(t.TempDir(), "m"), "--no-hf-cache"}
		if noMTP {
			args = append(args, "--no-mtp")
		}
		var out bytes.Buffer
		var err error
		printed := stderrOf(t, func() { err = Run(args, &out) })
		if err != nil {
			t.Fatal(err)
		}
		says := strings.Contains(printed, "MTP weights are not fetched") && strings.Contains(printed, "tools/tensormanifest")
		if says == noMTP {
			t.Errorf("--no-mtp %v: stderr %q", noMTP, printed)
		}
	}
}

// TestPullImport imports an MLX-layout snapshot of a Hugging Face cache
// with `petal pull --import`, into an empty folder given with --dir, and
// checks the result loads and verifies.
func TestPullImport(t *testing.T) {
	h := hubtest.New(t, hubtest.MLXLayout(t, "../../engine/testdata/fixtures/tiny-a", 3))
	cache, _ := h.HFCache(t)
	snap := filepath.Join(cache, "models--petal-test--tiny", "snapshots", hubtest.SHA)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run([]string{"pull", "--import", snap, "--dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("is in %s: %d files, 3 shards realigned, %[2]d hashes checked", dir, len(h.Files)); !strings.Contains(out.String(), want) {
		t.Errorf("output %q lacks %q", out.String(), want)
	}
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := hub.Verify(dir); err != nil {
		t.Fatal(err)
	}
	if err := Run([]string{"pull", "--import", snap, "--repo", "a/b"}, &out); err == nil || !strings.Contains(err.Error(), "--repo") {
		t.Errorf("--import with --repo: %v", err)
	}
}

// TestPullImportInPlace runs what the GPU backend's startup line says for
// a folder under the models folder that is not aligned: `petal pull
// --import DIR` realigns it where it is.
func TestPullImportInPlace(t *testing.T) {
	src := hubtest.MLXLayout(t, "../../engine/testdata/fixtures/tiny-a", 5)
	root := t.TempDir()
	t.Setenv(hub.EnvModels, root)
	dir := filepath.Join(root, "tiny")
	if err := os.Rename(src, dir); err != nil {
		t.Fatal(err)
	}
	before, err := checkpoint.MisalignedBytes(dir)
	if err != nil || before == 0 {
		t.Fatalf("the MLX-layout folder copies %d bytes at load (%v); want some", before, err)
	}
	var out bytes.Buffer
	if err := Run([]string{"pull", "--import", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "is in "+dir+":") {
		t.Errorf("output %q does not name %s", out.String(), dir)
	}
	if after, err := checkpoint.MisalignedBytes(dir); err != nil || after != 0 {
		t.Errorf("after the import the GPU backend copies %d bytes (%v); want 0", after, err)
	}
	if err := hub.Verify(dir); err != nil {
		t.Fatal(err)
	}
}

func TestRenderProgress(t *testing.T) {
	line := renderProgress(hub.Event{
		Phase: hub.Downloading, Done: 9_700_000_000, Total: 19_400_000_000,
		BytesPerSecond: 52_300_000, ETA: 185*time.Second + 400*time.Millisecond,
	})
	for _, want := range []string{"downloading", "[" + strings.Repeat("#", 15) + strings.Repeat(".", 15) + "]", " 50.0%", "9.70/19.40 GB", "52.3 MB/s", "ETA 3m5s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if line := renderProgress(hub.Event{Phase: hub.ListingFiles}); !strings.Contains(line, "0.0%") {
		t.Errorf("empty progress %q", line)
	}
}

// TestRenderRetry: an offline listing attempt is said in words, with the
// next attempt's time and the error behind the words.
func TestRenderRetry(t *testing.T) {
	now := time.Date(2026, 12, 1, 21, 40, 0, 0, time.UTC)
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "huggingface.co", IsNotFound: true}}
	var w bytes.Buffer
	bar := &progressBar{w: &w}
	bar.show(hub.Event{Phase: hub.ListingFiles, Retry: dns, RetryAt: now.Add(4 * time.Second), Attempt: 3, MaxAttempts: 11})
	line := renderRetry(hub.Event{Phase: hub.ListingFiles, Retry: dns, RetryAt: now.Add(4 * time.Second), Attempt: 3, MaxAttempts: 11}, now)
	for _, want := range []string{"huggingface.co cannot be looked up", "offline", "Trying again at 21:40:04 (in 4s; attempt 3 of 11).", "[dial tcp: lookup huggingface.co: no such host]"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if out := w.String(); !strings.HasSuffix(out, "\n") || strings.Contains(out, "0.0%") {
		t.Errorf("a retry drew %q; want a line of its own, not the bar", out)
	}
}

func TestPullRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"pull", "--repo", "../etc"},
		{"pull", "--endpoint", "ftp://mirror"},
		{"pull", "--parallel", "0"},
		{"pull", "stray"},
	} {
		var out bytes.Buffer
		if err := Run(args, &out); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// noSuchHost answers every request as a resolver does offline.
type noSuchHost struct{}

func (noSuchHost) RoundTrip(req *http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: req.URL.Hostname(), IsNotFound: true}}
}

// TestPullOfflineSaysOneLine: offline, petal pull retried for about five
// minutes and printed a ~350-character line of Go errors per retry (issue
// 28 B.5). It now ends at once with one sentence that says why and what to
// do, and prints nothing else.
func TestPullOfflineSaysOneLine(t *testing.T) {
	t.Setenv(hub.EnvModels, t.TempDir())
	saved := pullBase
	t.Cleanup(func() { pullBase = saved })
	pullBase.Transport, pullBase.RetryBase = noSuchHost{}, time.Millisecond
	var err error
	var out bytes.Buffer
	printed := stderrOf(t, func() { err = Run([]string{"pull", "--no-hf-cache"}, &out) })
	if err == nil {
		t.Fatal("an offline pull succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || len(msg) > maxOfflineLine || !strings.Contains(msg, "huggingface.co cannot be looked up") ||
		!strings.Contains(msg, "Run the same command again") || strings.Contains(msg, "dial tcp") || strings.Contains(msg, "hub:") {
		t.Errorf("offline pull: %q", msg)
	}
	if printed != "" || out.Len() != 0 {
		t.Errorf("offline pull printed %q and %q besides its error", printed, out.String())
	}
}

// maxOfflineLine bounds the offline pull's one line: a sentence, not the
// chain of Go errors (about 350 characters) it was.
const maxOfflineLine = 200
