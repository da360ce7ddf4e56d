package api

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"petal/engine/backend"
	"petal/engine/tokenizer"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

// testServer is the API over a scripted model, listening on loopback TCP.
type testServer struct {
	*httptest.Server
	svc   *service.Service
	model *servicetest.Model
	tok   *tokenizer.Tokenizer
}

// fixtureService is the service over a reference fixture (engine/testdata/
// fixtures) on a backend, closed with its model when the test ends.
func fixtureService(t testing.TB, backendName, fixture string, opts service.Options) *service.Service {
	t.Helper()
	dir := servicetest.FixtureFolder(t, fixture)
	m, err := backend.Open(backendName, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	svc, err := service.New(m, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// newTestServer serves a scripted model whose reply to a prompt is
// reply(prompt text).
func newTestServer(t testing.TB, svcOpts service.Options, opts Options, reply func(prompt string) string) *testServer {
	t.Helper()
	dir, tok := servicetest.Folder(t)
	m := servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, reply))
	if svcOpts.Name == "" {
		svcOpts.Name = "qwen-test"
	}
	svc, err := service.New(m, dir, svcOpts)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(New(svc, opts)), svc: svc, model: m, tok: tok}
	t.Cleanup(func() {
		ts.Close()
		svc.Close()
	})
	return ts
}

func constant(text string) func(string) string { return func(string) string { return text } }

// prompts keeps the last prompt a test model was given, for tests that
// check what a request rendered.
type prompts struct {
	mu sync.Mutex
	p  string
}

// record is reply, noting each prompt first.
func (s *prompts) record(reply func(string) string) func(string) string {
	return func(p string) string {
		s.mu.Lock()
		s.p = p
		s.mu.Unlock()
		return reply(p)
	}
}

// last is the last prompt given.
func (s *prompts) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// take is last, forgotten, so a request that renders nothing shows as "".
func (s *prompts) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.p
	s.p = ""
	return p
}

// lastUser is the text of the last user turn in a rendered prompt.
func lastUser(prompt string) string {
	i := strings.LastIndex(prompt, "<|im_start|>user\n")
	if i < 0 {
		return ""
	}
	rest := prompt[i+len("<|im_start|>user\n"):]
	if j := strings.Index(rest, "<|im_end|>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// do sends a raw request and returns the response with its body read.
func do(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func post(t testing.TB, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func get(t testing.TB, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// sseEvents splits an SSE body into its events' data and counts comments;
// it fails on anything that is not an event, a comment or a blank line.
func sseEvents(t testing.TB, body string) (data []string, comments int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			blank = true
		case strings.HasPrefix(line, ": "):
			comments++
		case strings.HasPrefix(line, "data: "):
			if !blank {
				t.Fatalf("two data lines without a blank line between them in %q", body)
			}
			blank = false
			data = append(data, strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if !blank {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	return data, comments
}

// waitQueue waits until the service's queue metrics satisfy ok, reading
// them again at each change of the queue, and returns them.
func waitQueue(t testing.TB, svc *service.Service, ok func(service.Metrics) bool) service.Metrics {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		changed := svc.QueueChanged()
		m := svc.Metrics()
		if ok(m) {
			return m
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the queue never reached the state awaited: %+v", m)
		}
	}
}
