package api

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"petal/internal/service"
)

// fuzzTimeout bounds one fuzzed request; the scripted model answers in
// milliseconds.
const fuzzTimeout = 5 * time.Second

// FuzzChatRequest sends arbitrary bodies to the chat endpoint: whatever
// the body, the answer is a success or a 4xx in the OpenAI shape, never a
// 500 or a panic.
func FuzzChatRequest(f *testing.F) {
	seeds := []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.1,"seed":-5,"stop":["a","b"],"max_tokens":3,"n":1}`,
		`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"maybe"},"reasoning_effort":7}`,
		`{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function"},"tools":[{"type":"function","function":{"name":"f","parameters":"oops"}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":"","max_completion_tokens":0}`,
		`[]`, `null`, `{"messages":null}`, `{"seed":1e400}`, ``,
	}
	fuzzRoute(f, "/v1/chat/completions", seeds, "an OpenAI error", func(body string) bool {
		return strings.Contains(body, `"error":{"message":`)
	})
}

// fuzzRoute posts each fuzzed body to path on a server over a scripted
// model and requires an answer within fuzzTimeout that is a success, or a
// 4xx whose body isError accepts (an error in the route's own shape, named
// by shape in failures).
func fuzzRoute(f *testing.F, path string, seeds []string, shape string, isError func(body string) bool) {
	for _, seed := range seeds {
		f.Add(seed)
	}
	ts := newTestServer(f, service.Options{}, Options{}, constant("Hm.</think>\n\nok"))
	srv := ts.Config.Handler
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { srv.ServeHTTP(w, req); close(done) }()
		select {
		case <-done:
		case <-time.After(fuzzTimeout):
			buf := make([]byte, 1<<20)
			t.Fatalf("no answer after %v for %q:\n%s", fuzzTimeout, body, buf[:runtime.Stack(buf, true)])
		}
		if w.Code >= 500 {
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if w.Code != http.StatusOK && !isError(w.Body.String()) {
			t.Fatalf("status %d without %s for %q: %s", w.Code, shape, body, w.Body)
		}
	})
}
