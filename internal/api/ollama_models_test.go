package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"petal/internal/service"
)

// ollamaError reads Ollama's error shape, {"error": "message"}.
func ollamaError(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Errorf("not Ollama's error shape: %s", body)
	}
	return e.Error
}

// TestOllamaModelManagement: /api/pull, /api/delete, /api/copy and
// /api/create were 404s that ollama-js turned into a generic error (issue
// 30 item 8); each answers as Ollama does, or says why Petal cannot, in
// Ollama's error shape.
func TestOllamaModelManagement(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	resp, body := do(t, post(t, ts.URL+"/api/pull", `{"model":"qwen-test:latest"}`))
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" || lines[len(lines)-1] != `{"status":"success"}` {
		t.Errorf("pull of the served model: %d %q", resp.StatusCode, body)
	}
	for _, l := range lines {
		var p struct{ Status string }
		if json.Unmarshal([]byte(l), &p) != nil || p.Status == "" {
			t.Errorf("pull progress line %q", l)
		}
	}
	if resp, body := do(t, post(t, ts.URL+"/api/pull", `{"name":"QWEN-TEST","stream":false}`)); resp.StatusCode != 200 || strings.TrimSpace(body) != `{"status":"success"}` {
		t.Errorf("pull, not streamed: %d %s", resp.StatusCode, body)
	}
	del := func(body string) *http.Request {
		r := post(t, ts.URL+"/api/delete", body)
		r.Method = http.MethodDelete
		return r
	}
	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
		words  string
	}{
		{"pull of another model", post(t, ts.URL+"/api/pull", `{"model":"llama3.2"}`), 400, `Petal cannot pull "llama3.2": it serves one model, "qwen-test"`},
		{"delete of the served model", del(`{"model":"qwen-test"}`), 400, `Petal cannot delete "qwen-test" while it serves it`},
		{"delete of another model", del(`{"model":"llama3.2"}`), 404, `model "llama3.2" not found`},
		{"copy", post(t, ts.URL+"/api/copy", `{"source":"qwen-test","destination":"mine"}`), 400, `Petal cannot copy "qwen-test" to "mine"`},
		{"copy of another model", post(t, ts.URL+"/api/copy", `{"source":"llama3.2","destination":"mine"}`), 404, `model "llama3.2" not found`},
		{"create", post(t, ts.URL+"/api/create", `{"model":"mine","from":"qwen-test","system":"Be brief."}`), 400, `Petal cannot create "mine"`},
	} {
		resp, body := do(t, c.req)
		if msg := ollamaError(t, body); resp.StatusCode != c.status || !strings.HasPrefix(msg, c.words) {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
}

// TestOllamaChatGaps: images were dropped without a word (a text-only model
// refuses them in the words every route uses), an empty
// messages list (a preload) was a 400, keep_alive 0 answered "load" and
// num_ctx was ignored (issue 30 item 8).
func TestOllamaChatGaps(t *testing.T) {
	var generated atomic.Int64
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string {
		generated.Add(1)
		return strings.Repeat("word ", 100)
	})
	resp, body := do(t, post(t, ts.URL+"/api/chat", `{"stream":false,"messages":[{"role":"user","content":"what is this?","images":["iVBORw0KGgo="]}]}`))
	if msg := ollamaError(t, body); resp.StatusCode != 400 || msg != errTextOnly("messages[0].images[0]", "qwen-test").Message {
		t.Errorf("images: %d %s", resp.StatusCode, body)
	}
	if generated.Load() != 0 {
		t.Errorf("the model read a request whose images were dropped")
	}

	for _, c := range []struct{ path, body, reason string }{
		{"/api/chat", `{"model":"qwen-test","messages":[]}`, "load"},
		{"/api/chat", `{"model":"qwen-test"}`, "load"},
		{"/api/chat", `{"model":"qwen-test","messages":[],"keep_alive":0}`, "unload"},
		{"/api/chat", `{"model":"qwen-test","messages":[],"keep_alive":"0s"}`, "unload"},
		{"/api/chat", `{"model":"qwen-test","messages":[],"keep_alive":"5m"}`, "load"},
		{"/api/generate", `{"model":"qwen-test","keep_alive":0}`, "unload"},
		{"/api/generate", `{"model":"qwen-test","keep_alive":"0"}`, "unload"},
		{"/api/generate", `{"model":"qwen-test","keep_alive":-1}`, "load"},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		var m struct {
			Done       bool   `json:"done"`
			DoneReason string `json:"done_reason"`
		}
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &m) != nil || !m.Done || m.DoneReason != c.reason {
			t.Errorf("%s %s: %d %s, want done_reason %s", c.path, c.body, resp.StatusCode, body, c.reason)
		}
	}
	if generated.Load() != 0 {
		t.Errorf("a preload generated")
	}

	// num_ctx bounds prompt and reply together; above the loaded context
	// it is the loaded context.
	for _, c := range []struct{ numCtx, total int }{{200, 200}, {100000, 4096}} {
		req := `{"stream":false,"messages":[{"role":"user","content":"` + strings.Repeat("w", 100) + `"}],"options":{"num_ctx":` + strconv.Itoa(c.numCtx) + `,"num_predict":-1}}`
		for _, path := range []string{"/api/chat", "/api/generate"} {
			body := req
			if path == "/api/generate" {
				body = `{"stream":false,"raw":true,"prompt":"` + strings.Repeat("w", 100) + `","options":{"num_ctx":` + strconv.Itoa(c.numCtx) + `}}`
			}
			resp, text := do(t, post(t, ts.URL+path, body))
			var m struct {
				DoneReason      string `json:"done_reason"`
				PromptEvalCount int    `json:"prompt_eval_count"`
				EvalCount       int    `json:"eval_count"`
			}
			json.Unmarshal([]byte(text), &m)
			want := "length"
			if c.total == 4096 {
				want = "stop" // the 100 words fit
			}
			if resp.StatusCode != 200 || m.DoneReason != want || want == "length" && m.PromptEvalCount+m.EvalCount != c.total {
				t.Errorf("%s num_ctx %d: %d, %d+%d tokens, %s; want %s", path, c.numCtx, resp.StatusCode, m.PromptEvalCount, m.EvalCount, m.DoneReason, want)
			}
		}
	}
	resp, body = do(t, post(t, ts.URL+"/api/generate", `{"stream":false,"raw":true,"prompt":"`+strings.Repeat("w", 100)+`","options":{"num_ctx":50}}`))
	if msg := ollamaError(t, body); resp.StatusCode != 400 || !strings.Contains(msg, "maximum context length is 50 tokens") {
		t.Errorf("a prompt over num_ctx: %d %s", resp.StatusCode, body)
	}
}

// TestTypeErrorsInClientWords: a field of the wrong kind was refused
// with Go's names ('field "ollamaModelName.model": number cannot be
// string'); it is said in JSON's words, under the field the client sent.
func TestTypeErrorsInClientWords(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	del := func(body string) *http.Request {
		r := post(t, ts.URL+"/api/delete", body)
		r.Method = http.MethodDelete
		return r
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		req   *http.Request
		words string
	}{
		{post(t, ts.URL+"/api/pull", `{"model":5}`), `field "model" must be a string, not a number`},
		{post(t, ts.URL+"/api/pull", `{"name":{"a":1}}`), `field "name" must be a string, not an object`},
		{post(t, ts.URL+"/api/pull", `{"model":"x","stream":"yes"}`), `field "stream" must be true or false, not a string`},
		{del(`{"model":true}`), `field "model" must be a string, not true or false`},
		{post(t, ts.URL+"/api/copy", `{"source":["a"],"destination":"b"}`), `field "source" must be a string, not an array`},
		{post(t, ts.URL+"/api/chat", `{`+msgs+`,"options":{"temperature":"hot"}}`), `field "options.temperature" must be a number, not a string`},
		{post(t, ts.URL+"/v1/chat/completions", `{`+msgs+`,"temperature":"hot"}`), `field "temperature" must be a number, not a string`},
		{post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":1.5}`), `field "max_tokens" must be an integer, not 1.5`},
	} {
		resp, body := do(t, c.req)
		var msg string
		if strings.HasPrefix(c.req.URL.Path, "/v1/") {
			var e struct{ Error apiError }
			json.Unmarshal([]byte(body), &e)
			msg = e.Error.Message
		} else {
			msg = ollamaError(t, body)
		}
		if resp.StatusCode != 400 || msg != c.words {
			t.Errorf("%s %s: %d %s, want %q", c.req.Method, c.req.URL.Path, resp.StatusCode, body, c.words)
		}
	}
}

// TestOllamaKeepAliveRefused: a keep_alive that is no duration was taken
// as a preload ("load"), or ignored beside messages; Ollama answers 400,
// and so does Petal, without reading the messages.
func TestOllamaKeepAliveRefused(t *testing.T) {
	var generated atomic.Int64
	ts := newTestServer(t, service.Options{}, Options{}, func(string) string { generated.Add(1); return "ok" })
	for _, c := range []struct{ path, body string }{
		{"/api/chat", `{"model":"qwen-test","messages":[],"keep_alive":"banana"}`},
		{"/api/chat", `{"model":"qwen-test","keep_alive":"-5x"}`},
		{"/api/chat", `{"stream":false,"messages":[{"role":"user","content":"hi"}],"keep_alive":"300"}`},
		{"/api/generate", `{"model":"qwen-test","keep_alive":true}`},
		{"/api/generate", `{"stream":false,"prompt":"hi","keep_alive":{"m":5}}`},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		if msg := ollamaError(t, body); resp.StatusCode != 400 || !strings.Contains(msg, "is no duration: send a number of seconds or a duration such as \"5m\"") {
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
	}
	if generated.Load() != 0 {
		t.Errorf("a request with a bad keep_alive generated")
	}
	// Ollama's durations, negative ones and null still pass.
	for _, ka := range []string{`"10m"`, `"-1s"`, `-1`, `3.5`, `null`, `"1h30m"`} {
		resp, body := do(t, post(t, ts.URL+"/api/generate", `{"model":"qwen-test","keep_alive":`+ka+`}`))
		if resp.StatusCode != 200 || !strings.Contains(body, `"done_reason":"load"`) {
			t.Errorf("keep_alive %s: %d %s", ka, resp.StatusCode, body)
		}
	}
}
