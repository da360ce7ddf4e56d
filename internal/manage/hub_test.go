package manage

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"petal/internal/hub"
	"petal/internal/hub/hubtest"
)

const hubFixture = "../../engine/testdata/fixtures/tiny-a"

// waitFor is how long a state change may take over loopback.
const waitFor = 20 * time.Second

func hubOptions(t *testing.T, h *hubtest.Server) hub.Options {
	return hub.Options{
		Endpoint: h.URL(), Repo: h.Repo, Revision: hubtest.SHA,
		Dir: filepath.Join(t.TempDir(), "models", "tiny"), NoHFCache: true,
		Parallel: 1, ChunkBytes: 16 << 10, StallTimeout: 30 * time.Second,
		MaxRetries: 3, RetryBase: time.Millisecond,
		FreeSpace: func(string) (int64, error) { return 1 << 50, nil },
	}
}

func waitState(t *testing.T, d *HubDownloader, want string) DownloadStatus {
	t.Helper()
	timeout := time.After(waitFor)
	for {
		d.mu.Lock()
		changed := d.changed
		d.mu.Unlock()
		s := d.Status()
		if s.State == want {
			return s
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("download state %q (error %+v), want %q", s.State, s.Error, want)
		}
	}
}

func TestHubDownloadToCompletionVerifyDelete(t *testing.T) {
	h := hubtest.New(t, hubFixture)
	h.CutAfter("model-00002-of-00003.safetensors", 5000) // one cut connection, retried
	d := NewHubDownloader(hubOptions(t, h))
	ctx := context.Background()
	if s := d.Status(); s.State != DownloadIdle {
		t.Fatalf("fresh state %q", s.State)
	}
	if err := d.Do(ctx, Pause); err == nil {
		t.Fatal("pausing nothing succeeded")
	}
	if err := d.Do(ctx, Start); err != nil {
		t.Fatal(err)
	}
	s := waitState(t, d, DownloadDone)
	if s.BytesDone != h.Total() || s.BytesTotal != h.Total() {
		t.Errorf("done at %d of %d bytes, served total %d", s.BytesDone, s.BytesTotal, h.Total())
	}
	if err := d.Do(ctx, Start); err == nil {
		t.Error("starting a finished download succeeded")
	}
	// A later app start sees the finished folder.
	if again := NewHubDownloader(hubOptions(t, h)); again.Status().State != DownloadIdle {
		t.Log("a different folder is idle, as it should be")
	}
	if again := NewHubDownloader(hub.Options{Repo: h.Repo, Revision: hubtest.SHA, Dir: d.Dir()}); again.Status().State != DownloadDone {
		t.Errorf("reopened finished folder is %q", again.Status().State)
	}

	if err := d.Do(ctx, Verify); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, DownloadDone)
	// Damage a file: Verify says checksum.
	w := filepath.Join(d.Dir(), "model-00001-of-00003.safetensors")
	b, err := os.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0xff
	if err := os.WriteFile(w, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Do(ctx, Verify); err != nil {
		t.Fatal(err)
	}
	if s := waitState(t, d, DownloadFailed); s.Error == nil || s.Error.Code != "checksum" {
		t.Fatalf("verify of a damaged file: %+v", s.Error)
	}
	if err := d.Do(ctx, Delete); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Dir()); !os.IsNotExist(err) {
		t.Errorf("model folder still there after delete: %v", err)
	}
	if s := d.Status(); s.State != DownloadIdle {
		t.Errorf("after delete: %q", s.State)
	}
}

func TestHubDownloadPauseResumeKeepsBytes(t *testing.T) {
	h := hubtest.New(t, hubFixture)
	h.StallAfter("model-00002-of-00003.safetensors", 5000)
	d := NewHubDownloader(hubOptions(t, h))
	ctx := context.Background()
	if err := d.Do(ctx, Start); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.WhenStalled():
	case <-time.After(waitFor):
		t.Fatal("the download never reached its stall")
	}
	if err := d.Do(ctx, Pause); err != nil {
		t.Fatal(err)
	}
	s := waitState(t, d, DownloadPaused)
	if s.BytesDone == 0 || s.BytesDone >= h.Total() {
		t.Fatalf("paused at %d of %d bytes", s.BytesDone, h.Total())
	}
	served := h.Served()
	if err := d.Do(ctx, Resume); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, DownloadDone)
	if again := h.Served() - served; again >= h.Total() {
		t.Errorf("resume fetched %d bytes of %d: it started over", again, h.Total())
	}
}

func TestHubDownloadFaultAndCancel(t *testing.T) {
	h := hubtest.New(t, hubFixture)
	h.Missing("model-00003-of-00003.safetensors")
	d := NewHubDownloader(hubOptions(t, h))
	ctx := context.Background()
	if err := d.Do(ctx, Start); err != nil {
		t.Fatal(err)
	}
	s := waitState(t, d, DownloadFailed)
	if s.Error == nil || s.Error.Code != "not_found" {
		t.Fatalf("a 404 gave %+v", s.Error)
	}
	if _, err := os.Stat(d.Dir()); !os.IsNotExist(err) {
		t.Errorf("a failed download left a model folder: %v", err)
	}
	if err := d.Do(ctx, Cancel); err != nil {
		t.Fatal(err)
	}
	if s := d.Status(); s.State != DownloadCancelled || s.BytesDone != 0 {
		t.Errorf("after cancel: %+v", s)
	}
	if err := d.Do(ctx, Start); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, DownloadFailed) // the file is still missing
}

// TestHubDownloadStartPauseRace sends Start and Pause at once: a Pause
// that lands between Start's decision and its pull's handle must be
// refused or pause that pull, never act on a missing one (it called a
// method on a nil *hub.Download on the first iteration).
func TestHubDownloadStartPauseRace(t *testing.T) {
	h := hubtest.New(t, hubFixture)
	h.StallAfter("model-00002-of-00003.safetensors", 5000)
	ctx := context.Background()
	for i := range 20 {
		d := NewHubDownloader(hubOptions(t, h))
		start := make(chan struct{})
		var startErr, pauseErr error
		var wg sync.WaitGroup
		wg.Go(func() { <-start; startErr = d.Do(ctx, Start) })
		wg.Go(func() { <-start; pauseErr = d.Do(ctx, Pause) })
		close(start)
		wg.Wait()
		if startErr != nil {
			t.Fatalf("iteration %d: start: %v", i, startErr)
		}
		if s := d.Status(); pauseErr == nil && s.State != DownloadPaused {
			t.Fatalf("iteration %d: a pause that succeeded left the download %q", i, s.State)
		}
		if err := d.Do(ctx, Cancel); err != nil {
			t.Fatalf("iteration %d: cancel: %v", i, err)
		}
	}
}

// TestHubDownloadPauseWhileVerifying refuses to pause a verification, which
// has no pull to stop.
func TestHubDownloadPauseWhileVerifying(t *testing.T) {
	h := hubtest.New(t, hubFixture)
	d := NewHubDownloader(hubOptions(t, h))
	ctx := context.Background()
	if err := d.Do(ctx, Start); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, DownloadDone)
	fresh := NewHubDownloader(hub.Options{Repo: h.Repo, Revision: hubtest.SHA, Dir: d.Dir()})
	if err := fresh.Do(ctx, Verify); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Do(ctx, Pause); err == nil && fresh.Status().State != DownloadDone {
		t.Errorf("pausing a verification succeeded: %+v", fresh.Status())
	}
	waitState(t, fresh, DownloadDone)
}

// noRoute answers every request as the system does with no network route.
type noRoute struct{}

func (noRoute) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}
}

// TestHubDownloadOfflineStatus: offline, the status says at once that the
// Hub cannot be reached, in words, with the next attempt's time, and ends
// as unreachable.
func TestHubDownloadOfflineStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewHubDownloader(hub.Options{
			Endpoint: "https://hub.example", Repo: "petal-test/tiny", Revision: hubtest.SHA,
			Dir: filepath.Join(t.TempDir(), "tiny"), NoHFCache: true,
			MaxRetries: 2, RetryBase: time.Second, Transport: noRoute{},
		})
		start := time.Now()
		if err := d.Do(t.Context(), Start); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s := d.Status()
		if s.State != DownloadRunning || s.Retry == nil {
			t.Fatalf("offline after start: %+v, want running with a retry", s)
		}
		if r := s.Retry; r.Reason != hub.ReasonNoRoute || !r.Unreachable || r.Message == "" || !strings.Contains(r.Detail, "network is unreachable") ||
			!r.NextAttemptAt.Equal(start.Add(time.Second)) || r.Attempt != 2 || r.MaxAttempts != 3 {
			t.Errorf("retry %+v: want no_route, attempt 2 of 3 at %v", r, start.Add(time.Second))
		}
		time.Sleep(3 * time.Second) // the fake clock: both backoffs pass
		synctest.Wait()
		s = d.Status()
		if s.State != DownloadFailed || s.Error == nil || s.Error.Code != "unreachable" || s.Retry != nil {
			t.Fatalf("offline after the retries: %+v, want failed as unreachable", s)
		}
		if !strings.Contains(s.Error.Message, "no network route") || !strings.Contains(s.Error.Detail, "network is unreachable") {
			t.Errorf("error %+v: want words and the detail", s.Error)
		}
	})
}

// TestHubDownloadOfADamagedModel pulls a model whose Hub copy has a shard
// with a broken header (its checksum matches: the Hub holds it so): the
// download fails with the one re-download code, its words, and the cause
// behind the disclosure.
func TestHubDownloadOfADamagedModel(t *testing.T) {
	dir := t.TempDir()
	entries, err := os.ReadDir(hubFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(hubFixture, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "model-00002-of-00003.safetensors" {
			binary.LittleEndian.PutUint64(data, uint64(len(data))) // a header longer than the file
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := hubtest.New(t, dir)
	d := NewHubDownloader(hubOptions(t, h))
	if err := d.Do(context.Background(), Start); err != nil {
		t.Fatal(err)
	}
	s := waitState(t, d, DownloadFailed)
	if s.Error == nil || s.Error.Code != CodeDamaged || s.Error.Message != damagedMessage ||
		!strings.Contains(s.Error.Detail, "model-00002-of-00003.safetensors") {
		t.Fatalf("a damaged shard gave %+v, want %q with the file named in the detail", s.Error, CodeDamaged)
	}
}
