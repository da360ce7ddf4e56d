package runtime

import (
	"bufio"
	"context"
	"encoding/json"
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

// settleTimeout bounds each wait of these tests for the server (a model's
// release, the server's stop).
const settleTimeout = 20 * time.Second

// closeCounter is a model that counts its Close calls and says when the
// first one came.
type closeCounter struct {
	engine.Model
	closed atomic.Int32
	first  chan struct{}
}

func newCloseCounter(m engine.Model) *closeCounter {
	return &closeCounter{Model: m, first: make(chan struct{})}
}

func (m *closeCounter) Close() error {
	if m.closed.Add(1) == 1 {
		close(m.first)
	}
	return m.Model.Close()
}

// liveServer is a Runtime serving on a free port in a test.
type liveServer struct {
	base string
	stop func()
}

// startRuntime opens and serves load on a free port until the test ends,
// the Setup screen's download being pull.
func startRuntime(t *testing.T, pull hub.Options, load LoadRequest) *liveServer {
	t.Helper()
	rt, err := Open(Config{Load: load, Addr: "127.0.0.1:0", SettingsPath: filepath.Join(t.TempDir(), "s.json"), Pull: pull})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Serve() }()
	s := &liveServer{base: strings.TrimSuffix(rt.Endpoint(), "/v1")}
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v", err)
			}
		case <-time.After(settleTimeout):
			t.Error("Serve did not return after Close")
		}
	}
	t.Cleanup(s.stop)
	return s
}

// setupPull is the Setup screen's download from fake into a models folder
// of the test's.
func setupPull(t *testing.T, fake *hubtest.Server) hub.Options {
	return hub.Options{Endpoint: fake.URL(), Repo: fake.Repo, Revision: hubtest.SHA,
		Dir: filepath.Join(t.TempDir(), "Qwen3.6-35B-A3B-4bit"), NoHFCache: true}
}

// downloaded is setupPull with the download already done, as a finished
// Setup screen download leaves it (the routes that run one are
// internal/manage's to test).
func downloaded(t *testing.T, fake *hubtest.Server) hub.Options {
	t.Helper()
	pull := setupPull(t, fake)
	if _, err := hub.Pull(context.Background(), pull); err != nil {
		t.Fatal(err)
	}
	return pull
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

// TestLoadBeforeDownload: the Setup screen's load is refused, with its
// code, while nothing is downloaded.
func TestLoadBeforeDownload(t *testing.T) {
	first := servicetest.FixtureFolder(t, "tiny-a")
	s := startRuntime(t, setupPull(t, hubtest.New(t, first)), LoadRequest{Dir: first, Backend: "cpu", Context: 4096})
	var refusal apiError
	if st := s.call(t, "POST", "/manage/model/load", "{}", &refusal); st != http.StatusConflict || refusal.Error.Code != "not_downloaded" {
		t.Errorf("a load before the download: %d %+v", st, refusal)
	}
}

// TestServeLoadsDownloadedModel loads the downloaded model while a stream
// runs on the first one: the stream ends on the old model, the next
// request gets the new one, and the old model is closed once its stream is
// over.
func TestServeLoadsDownloadedModel(t *testing.T) {
	first, tok := servicetest.Folder(t)
	published, _ := servicetest.Folder(t)
	fake := hubtest.New(t, published)
	const oldReply, newReply = "The first model answers slowly, token by token.", "The downloaded model."
	oldModel := newCloseCounter(servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "Hm.</think>\n\n" + oldReply })))
	oldModel.Model.(*servicetest.Model).SetStepDelay(40 * time.Millisecond)
	newModel := newCloseCounter(servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "Hm.</think>\n\n" + newReply })))
	t.Cleanup(backend.Register("swap", func(dir string) (engine.Model, error) {
		if dir == first {
			return oldModel, nil
		}
		return newModel, nil
	}))
	s := startRuntime(t, downloaded(t, fake), LoadRequest{Dir: first, Backend: "swap"})

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
	select {
	case <-oldModel.first:
	case <-time.After(settleTimeout):
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
	pull := downloaded(t, fake)
	s := startRuntime(t, pull, LoadRequest{Dir: first, Backend: "cpu", Context: 4096})

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
	if _, err := os.Stat(filepath.Join(pull.Dir, "config.json")); err != nil {
		t.Errorf("the refused download is gone: %v", err)
	}
}
