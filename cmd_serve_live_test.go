package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"petal/engine"
	"petal/engine/backend"
	"petal/internal/fit"
	"petal/internal/hub"
	"petal/internal/hub/hubtest"
	"petal/internal/service/servicetest"
)

// settleTimeout bounds each wait of these tests for the server (a
// download, a model's release).
const settleTimeout = 20 * time.Second

// closeCounter is a model that counts its Close calls.
type closeCounter struct {
	engine.Model
	closed atomic.Int32
}

func (m *closeCounter) Close() error {
	m.closed.Add(1)
	return m.Model.Close()
}

// liveServer is petal serve running in a test, on a free port.
type liveServer struct {
	base string
	stop func()
}

// startServe runs petal serve with args (an address and settings file are
// added) until the test ends, its Setup download pointed at fake.
func startServe(t *testing.T, fake *hubtest.Server, args ...string) *liveServer {
	t.Helper()
	target := filepath.Join(t.TempDir(), "Qwen3.6-35B-A3B-4bit")
	old := setupPull
	setupPull = hub.Options{Endpoint: fake.URL(), Repo: fake.Repo, Revision: hubtest.SHA, Dir: target, NoHFCache: true}
	t.Cleanup(func() { setupPull = old })
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	args = append(args, "--addr", "127.0.0.1:0", "--settings", filepath.Join(t.TempDir(), "s.json"))
	go func() {
		done <- serve(ctx, args, w)
		w.Close()
	}()
	br := bufio.NewReader(r)
	var base string
	for base == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			cancel()
			t.Fatalf("serve stopped: %v", <-done)
		}
		if i := strings.Index(line, "http://"); i >= 0 {
			base = strings.TrimSuffix(strings.TrimSpace(line[i:]), "/v1")
		}
	}
	go io.Copy(io.Discard, br)
	s := &liveServer{base: base}
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(ShutdownTimeout + time.Second):
			t.Error("serve did not stop")
		}
	}
	t.Cleanup(s.stop)
	return s
}

// call sends a JSON request and decodes the JSON answer into out (when
// not nil), returning the status.
func (s *liveServer) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

// download runs the Setup screen's download to its end.
func (s *liveServer) download(t *testing.T) {
	t.Helper()
	if st := s.call(t, "POST", "/manage/download/start", "{}", nil); st != http.StatusOK {
		t.Fatalf("download start: %d", st)
	}
	deadline := time.Now().Add(settleTimeout)
	for {
		var d struct{ State string }
		s.call(t, "GET", "/manage/download", "", &d)
		if d.State == "done" {
			return
		}
		if d.State == "failed" || time.Now().After(deadline) {
			t.Fatalf("the download is %s", d.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type apiError struct {
	Error struct{ Code, Message string }
}

type manageStatus struct {
	Model struct{ Name, Dir string }
	Load  bool
}

// names reports the model /v1/models, /health and /manage/status name.
func (s *liveServer) names(t *testing.T) [3]string {
	t.Helper()
	var models struct{ Data []struct{ ID string } }
	var health struct{ Model string }
	var status manageStatus
	s.call(t, "GET", "/v1/models", "", &models)
	s.call(t, "GET", "/health", "", &health)
	s.call(t, "GET", "/manage/status", "", &status)
	if len(models.Data) != 1 {
		t.Fatalf("/v1/models lists %d models", len(models.Data))
	}
	return [3]string{models.Data[0].ID, health.Model, status.Model.Name}
}

// TestServeLoadsDownloadedModel downloads a model through the Setup
// screen's routes and loads it while a stream runs on the first one: the
// stream ends on the old model, the next request gets the new one, and the
// old model is closed once its stream is over.
func TestServeLoadsDownloadedModel(t *testing.T) {
	first, tok := servicetest.Folder(t)
	published, _ := servicetest.Folder(t)
	fake := hubtest.New(t, published)
	const oldReply, newReply = "The first model answers slowly, token by token.", "The downloaded model."
	oldModel := &closeCounter{Model: servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "Hm.</think>\n\n" + oldReply }))}
	oldModel.Model.(*servicetest.Model).SetStepDelay(40 * time.Millisecond)
	newModel := &closeCounter{Model: servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "Hm.</think>\n\n" + newReply }))}
	t.Cleanup(backend.Register("swap", func(dir string) (engine.Model, error) {
		if dir == first {
			return oldModel, nil
		}
		return newModel, nil
	}))
	s := startServe(t, fake, "--model", first, "--backend", "swap")

	var refusal apiError
	if st := s.call(t, "POST", "/manage/model/load", "{}", &refusal); st != http.StatusConflict || refusal.Error.Code != "not_downloaded" {
		t.Errorf("a load before the download: %d %+v", st, refusal)
	}
	s.download(t)
	oldName := filepath.Base(first)
	if got := s.names(t); got != [3]string{oldName, oldName, oldName} {
		t.Fatalf("before the load the server names %v", got)
	}

	// A stream on the first model, under way.
	req, _ := http.NewRequest("POST", s.base+"/v1/chat/completions", strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	var streamed strings.Builder
	readChunk := func() bool {
		for {
			line, err := stream.ReadString('\n')
			if err != nil {
				t.Fatalf("the stream broke: %v (after %q)", err, streamed.String())
			}
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				return false
			}
			var c struct {
				Choices []struct{ Delta struct{ Content string } }
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("chunk %q: %v", data, err)
			}
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				streamed.WriteString(c.Choices[0].Delta.Content)
				return true
			}
		}
	}
	if !readChunk() {
		t.Fatal("the stream ended before its first token")
	}

	var loaded manageStatus
	if st := s.call(t, "POST", "/manage/model/load", "{}", &loaded); st != http.StatusOK {
		t.Fatalf("load: %d", st)
	}
	const newName = "Qwen3.6-35B-A3B-4bit"
	if loaded.Model.Name != newName || filepath.Base(loaded.Model.Dir) != newName || !loaded.Load {
		t.Errorf("the load answered %+v", loaded)
	}
	if got := s.names(t); got != [3]string{newName, newName, newName} {
		t.Errorf("after the load the server names %v", got)
	}
	if n := oldModel.closed.Load(); n != 0 {
		t.Fatalf("the first model was closed (%d) while its stream ran", n)
	}

	// The next request, while the old stream still runs, is the new model's.
	var reply struct {
		Model   string
		Choices []struct{ Message struct{ Content string } }
	}
	if st := s.call(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, &reply); st != http.StatusOK ||
		reply.Model != newName || len(reply.Choices) != 1 || reply.Choices[0].Message.Content != newReply {
		t.Errorf("the request after the load: %d %+v", st, reply)
	}
	if oldModel.closed.Load() != 0 {
		t.Fatal("the first model was closed before its stream ended")
	}
	for readChunk() {
	}
	if streamed.String() != oldReply {
		t.Errorf("the stream carried %q, want the first model's %q", streamed.String(), oldReply)
	}
	deadline := time.Now().Add(settleTimeout)
	for oldModel.closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := oldModel.closed.Load(); n != 1 {
		t.Errorf("the first model was closed %d times after its stream, want 1", n)
	}

	// Loading the served model again changes nothing.
	if st := s.call(t, "POST", "/manage/model/load", "{}", nil); st != http.StatusOK || newModel.closed.Load() != 0 {
		t.Errorf("a second load: %d, new model closed %d times", st, newModel.closed.Load())
	}
	var del apiError
	if st := s.call(t, "POST", "/manage/download/delete", "{}", &del); st != http.StatusConflict || del.Error.Code != "model_in_use" {
		t.Errorf("deleting the served download: %d %+v", st, del)
	}
	s.stop()
	if n := newModel.closed.Load(); n != 1 {
		t.Errorf("the loaded model was closed %d times when serve stopped, want 1", n)
	}
}

// TestServeLoadRefusedByFit downloads a model the memory cannot hold: the
// load is refused with the fit's verdict and code, and the first model
// keeps serving.
func TestServeLoadRefusedByFit(t *testing.T) {
	first := servicetest.FixtureFolder(t, "tiny-a")
	fake := hubtest.New(t, servicetest.FixtureFolder(t, "tiny-a"))
	m, err := fit.FromCheckpoint(first)
	if err != nil {
		t.Fatal(err)
	}
	// The first load gets room; the load from the Setup screen does not.
	var checks atomic.Int32
	old := budgets["cpu"]
	budgets["cpu"] = func() (fit.Budget, error) {
		if checks.Add(1) == 1 {
			return fit.Budget{Bytes: 1 << 40, Source: "a test's budget"}, nil
		}
		return fit.Budget{Bytes: m.WeightsBytes, Source: "a test's small budget"}, nil
	}
	t.Cleanup(func() { budgets["cpu"] = old })
	s := startServe(t, fake, "--model", first, "--backend", "cpu", "--context", "4096")
	s.download(t)

	var refusal apiError
	st := s.call(t, "POST", "/manage/model/load", "{}", &refusal)
	if st != http.StatusConflict || refusal.Error.Code != "does_not_fit" || !strings.Contains(refusal.Error.Message, `verdict "no"`) {
		t.Errorf("a load on too little memory: %d %+v", st, refusal)
	}
	if checks.Load() != 2 {
		t.Errorf("the fit was checked %d times, want once per load", checks.Load())
	}
	name := filepath.Base(first)
	if got := s.names(t); got != [3]string{name, name, name} {
		t.Errorf("after the refusal the server names %v", got)
	}
	if _, err := os.Stat(filepath.Join(setupPull.Dir, "config.json")); err != nil {
		t.Errorf("the refused download is gone: %v", err)
	}
}
