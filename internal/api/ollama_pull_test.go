package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"petal/internal/hub"
	"petal/internal/hub/hubtest"
	"petal/internal/manage"
	"petal/internal/service"
)

const pullFixture = "../../engine/testdata/fixtures/tiny-a"

// pullShard is a file of the fixture big enough to cut and stall.
const pullShard = "model-00002-of-00003.safetensors"

func pullOptions(t *testing.T, h *hubtest.Server) hub.Options {
	return hub.Options{
		Endpoint: h.URL(), Repo: h.Repo, Revision: hubtest.SHA,
		Dir: filepath.Join(t.TempDir(), "models", "tiny"), NoHFCache: true,
		Parallel: 1, ChunkBytes: 16 << 10, StallTimeout: 30 * time.Second,
		MaxRetries: 2, RetryBase: time.Millisecond,
		FreeSpace: func(string) (int64, error) { return 1 << 50, nil },
	}
}

// endedPuller is the app's downloader that tells the test when each
// pull returned, and why.
type endedPuller struct {
	*manage.HubDownloader
	ended chan error
}

func (p endedPuller) Pull(ctx context.Context, progress func(hub.Event)) error {
	err := p.HubDownloader.Pull(ctx, progress)
	p.ended <- err
	return err
}

func newPullServer(t *testing.T, o hub.Options) (*testServer, endedPuller) {
	p := endedPuller{manage.NewHubDownloader(o), make(chan error, 1)}
	return newTestServer(t, service.Options{}, Options{Pull: p}, constant("ok")), p
}

// pullLine is one line of /api/pull's stream, progress or error.
type pullLine struct {
	Status    string `json:"status"`
	Digest    string `json:"digest"`
	Total     int64  `json:"total"`
	Completed int64  `json:"completed"`
	Error     string `json:"error"`
}

func pullLinesOf(t *testing.T, body string) []pullLine {
	t.Helper()
	var lines []pullLine
	for l := range strings.Lines(body) {
		var p pullLine
		if err := json.Unmarshal([]byte(l), &p); err != nil || (p.Status == "") == (p.Error == "") {
			t.Fatalf("pull line %q: want a status or an error", l)
		}
		lines = append(lines, p)
	}
	return lines
}

// TestOllamaPullDownloads: /api/pull of the model Petal ships for, while
// another is served, runs Petal's downloader against a fake Hub and
// streams Ollama's progress: the manifest, the bytes as one layer, the
// digest check, success (it was refused, issue 30 item 8).
func TestOllamaPullDownloads(t *testing.T) {
	h := hubtest.New(t, pullFixture)
	o := pullOptions(t, h)
	ts, p := newPullServer(t, o)
	resp, body := do(t, post(t, ts.URL+"/api/pull", `{"model":"hf.co/Petal-Test/tiny:latest"}`))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("pull: %d %s", resp.StatusCode, body)
	}
	if err := <-p.ended; err != nil {
		t.Fatalf("the download: %v", err)
	}
	lines := pullLinesOf(t, body)
	if lines[0].Status != pullManifest || lines[len(lines)-1].Status != pullSuccess || lines[len(lines)-2].Status != pullVerifying {
		t.Errorf("pull lines %+v: want the manifest first, the digest check and success last", lines)
	}
	var last pullLine
	for _, l := range lines {
		if l.Digest == "" {
			continue
		}
		if l.Digest != hubtest.SHA || l.Status != "pulling "+hubtest.SHA[:12] || l.Total != h.Total() || l.Completed < last.Completed || l.Completed > l.Total {
			t.Errorf("progress line %+v after %+v: want the revision's bytes, growing, of %d", l, last, h.Total())
		}
		last = l
	}
	if last.Completed != h.Total() {
		t.Errorf("the last progress line %+v: want all %d bytes", last, h.Total())
	}
	if !hub.Finished(o.Dir) || p.Status().State != manage.DownloadDone {
		t.Errorf("after the pull the folder is finished %v, the Model screen's download %q", hub.Finished(o.Dir), p.Status().State)
	}

	// Now on disk: pulled again, at once, without fetching it again.
	served := h.Served()
	for _, name := range []string{"petal-test/tiny", "TINY", "huggingface.co/petal-test/tiny"} {
		resp, body = do(t, post(t, ts.URL+"/api/pull", `{"name":"`+name+`","stream":false}`))
		if err := <-p.ended; err != nil || resp.StatusCode != 200 || strings.TrimSpace(body) != `{"status":"success"}` {
			t.Errorf("pull of %s, installed: %d %s (%v)", name, resp.StatusCode, body, err)
		}
	}
	if h.Served() != served {
		t.Errorf("a pull of the installed model fetched %d bytes", h.Served()-served)
	}

	// Other names and tags are still not Petal's to pull.
	for _, name := range []string{"llama3.2", "petal-test/tiny:q8_0", "hf.co/other/tiny"} {
		resp, body := do(t, post(t, ts.URL+"/api/pull", `{"model":"`+name+`"}`))
		if msg := ollamaError(t, body); resp.StatusCode != 400 || !strings.Contains(msg, `and downloads only "petal-test/tiny"`) {
			t.Errorf("pull of %s: %d %s", name, resp.StatusCode, body)
		}
	}
}

// droppingTransport is a network that goes away once a download's
// connection was cut: every later request is refused.
type droppingTransport struct{ down atomic.Bool }

func (d *droppingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &dropOnError{ReadCloser: resp.Body, down: &d.down}
	}
	return resp, err
}

type dropOnError struct {
	io.ReadCloser
	down *atomic.Bool
}

func (b *dropOnError) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.down.Store(true)
	}
	return n, err
}

// TestOllamaPullDropped: a download whose network goes away mid-file ends
// the stream with one error line in words, after the retries, and no
// success; what was fetched stays for the next pull.
func TestOllamaPullDropped(t *testing.T) {
	h := hubtest.New(t, pullFixture)
	h.CutAfter(pullShard, 5000)
	o := pullOptions(t, h)
	o.Transport = &droppingTransport{}
	ts, p := newPullServer(t, o)
	resp, body := do(t, post(t, ts.URL+"/api/pull", `{"model":"petal-test/tiny"}`))
	if err := <-p.ended; !errors.Is(err, hub.ErrUnreachable) {
		t.Fatalf("the dropped download ended with %v", err)
	}
	lines := pullLinesOf(t, body)
	var errs []string
	for _, l := range lines {
		if l.Error != "" {
			errs = append(errs, l.Error)
		}
		if l.Status == pullSuccess {
			t.Errorf("a dropped download said success: %s", body)
		}
	}
	want := "the download of the model stopped: The Hub refused the connection"
	if resp.StatusCode != 200 || len(errs) != 1 || lines[len(lines)-1].Error == "" || !strings.HasPrefix(errs[0], want) ||
		!strings.Contains(errs[0], "pull again to resume") {
		t.Errorf("dropped: %d %s; want one error line, the last, starting %q", resp.StatusCode, body, want)
	}
	if s := p.Status(); s.State != manage.DownloadFailed || s.BytesDone == 0 {
		t.Errorf("the Model screen's download after the drop: %+v, want failed with its bytes kept", s)
	}

	// Not streamed: the same words with a status.
	resp, body = do(t, post(t, ts.URL+"/api/pull", `{"model":"petal-test/tiny","stream":false}`))
	<-p.ended
	if msg := ollamaError(t, body); resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(msg, want) {
		t.Errorf("dropped, not streamed: %d %s", resp.StatusCode, body)
	}
}

// TestOllamaPullClientGone: a client that hangs up mid-download stops
// it, paused with its bytes kept, and the next pull resumes from there.
func TestOllamaPullClientGone(t *testing.T) {
	h := hubtest.New(t, pullFixture)
	h.StallAfter(pullShard, 5000)
	o := pullOptions(t, h)
	ts, p := newPullServer(t, o)
	ctx, hangUp := context.WithCancel(t.Context())
	req := post(t, ts.URL+"/api/pull", `{"model":"petal-test/tiny"}`).WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(first, pullManifest) {
		t.Fatalf("first line %q (%v)", first, err)
	}
	<-h.WhenStalled()
	hangUp()
	resp.Body.Close()
	if err := <-p.ended; !errors.Is(err, hub.ErrPaused) {
		t.Fatalf("the download after the client left: %v, want paused", err)
	}
	s := p.Status()
	if s.State != manage.DownloadPaused || s.BytesDone == 0 || s.BytesDone >= h.Total() {
		t.Fatalf("after the client left: %+v, want paused part way", s)
	}
	if hub.Finished(o.Dir) {
		t.Fatal("the download finished without its client")
	}
	served := h.Served()
	resp2, body := do(t, post(t, ts.URL+"/api/pull", `{"model":"petal-test/tiny"}`))
	if err := <-p.ended; err != nil || resp2.StatusCode != 200 || !strings.HasSuffix(body, `{"status":"success"}`+"\n") {
		t.Fatalf("the pull after: %d %s (%v)", resp2.StatusCode, body, err)
	}
	if again := h.Served() - served; again >= h.Total() {
		t.Errorf("the next pull fetched %d bytes of %d: it started over", again, h.Total())
	}
}

// TestOllamaPullOfTheServedModel: the model Petal ships for, served from
// a folder of its own (petal serve --model DIR), is not downloaded again
// when a client pulls it by its repository.
func TestOllamaPullOfTheServedModel(t *testing.T) {
	h := hubtest.New(t, pullFixture)
	p := endedPuller{manage.NewHubDownloader(pullOptions(t, h)), make(chan error, 1)}
	ts := newTestServer(t, service.Options{Name: "tiny"}, Options{Pull: p}, constant("ok"))
	resp, body := do(t, post(t, ts.URL+"/api/pull", `{"model":"hf.co/petal-test/tiny"}`))
	if resp.StatusCode != 200 || !strings.HasSuffix(body, `{"status":"success"}`+"\n") || h.Listings() != 0 {
		t.Errorf("pull of the served model by its repository: %d %s; the Hub was asked %d times", resp.StatusCode, body, h.Listings())
	}
}
