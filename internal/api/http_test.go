package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"petal/internal/service"
)

func TestSSEFraming(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{PingInterval: 20 * time.Millisecond}, constant("Hmm.</think>\n\nYes."))
	// A slow model makes the prefill outlast several ping intervals.
	ts.model.SetStepDelay(30 * time.Millisecond)
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions",
		`{"model":"x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	data, comments := sseEvents(t, body)
	if comments == 0 {
		t.Errorf("no ping comments while a slow prompt was processed")
	}
	if data[len(data)-1] != "[DONE]" {
		t.Fatalf("last event %q", data[len(data)-1])
	}
	var content, reasoning, reasoning2 string
	var finishes []string
	for i, d := range data[:len(data)-1] {
		var c struct {
			ID, Object string
			Choices    []struct {
				Delta struct {
					Role             *string
					Content          *string
					ReasoningContent *string `json:"reasoning_content"`
					Reasoning        *string
				}
				FinishReason *string `json:"finish_reason"`
			}
			Usage *usage
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %d %q: %v", i, d, err)
		}
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Errorf("event %d: object %q id %q", i, c.Object, c.ID)
		}
		if c.Usage != nil {
			if i != len(data)-2 || len(c.Choices) != 0 {
				t.Errorf("usage in event %d of %d with %d choices", i, len(data), len(c.Choices))
			}
			continue
		}
		ch := c.Choices[0]
		if (i == 0) != (ch.Delta.Role != nil) {
			t.Errorf("event %d: role %v", i, ch.Delta.Role)
		}
		if ch.Delta.Content != nil {
			content += *ch.Delta.Content
		}
		if ch.Delta.ReasoningContent != nil {
			reasoning += *ch.Delta.ReasoningContent
		}
		if ch.Delta.Reasoning != nil {
			reasoning2 += *ch.Delta.Reasoning
		}
		if ch.FinishReason != nil {
			finishes = append(finishes, *ch.FinishReason)
		}
	}
	if content != "Yes." || reasoning != "Hmm." || reasoning2 != "Hmm." || strings.Contains(content, "think") {
		t.Errorf("content %q reasoning %q / %q", content, reasoning, reasoning2)
	}
	if len(finishes) != 1 || finishes[0] != "stop" {
		t.Errorf("finish reasons %v", finishes)
	}
}

func TestGate(t *testing.T) {
	ts := newTestServer(t, service.Options{QueueLimit: 1}, Options{APIKey: "k", AllowedOrigins: []string{"http://localhost:5173"}}, constant("ok"))
	chat := `{"messages":[{"role":"user","content":"hi"}]}`
	auth := func(r *http.Request) *http.Request { r.Header.Set("Authorization", "Bearer k"); return r }
	cases := []struct {
		name   string
		req    *http.Request
		status int
		code   string
	}{
		// A foreign Host is refused without the key; with it, it passes
		// (TestHostWithKey): a DNS-rebinding page cannot know the key.
		{"rebinding host", func() *http.Request { r := get(t, ts.URL+"/v1/models"); r.Host = "evil.example"; return r }(), 403, "host_not_allowed"},
		{"rebinding host with a wrong key", func() *http.Request {
			r := get(t, ts.URL+"/v1/models")
			r.Host = "evil.example"
			r.Header.Set("Authorization", "Bearer nope")
			return r
		}(), 403, "host_not_allowed"},
		{"rebinding host on health", func() *http.Request { r := get(t, ts.URL+"/health"); r.Host = "evil.example:80"; return r }(), 403, "host_not_allowed"},
		{"host under localhost's name", func() *http.Request {
			r := get(t, ts.URL+"/v1/models")
			r.Host = "localhost.evil.example"
			return r
		}(), 403, "host_not_allowed"},
		{"wrong x-api-key", func() *http.Request { r := get(t, ts.URL+"/v1/models"); r.Header.Set("X-Api-Key", "nope"); return r }(), 401, "invalid_api_key"},
		{"foreign preflight", func() *http.Request {
			r, _ := http.NewRequest("OPTIONS", ts.URL+"/v1/chat/completions", nil)
			r.Header.Set("Origin", "https://evil.example")
			r.Header.Set("Access-Control-Request-Method", "POST")
			return r
		}(), 403, "origin_not_allowed"},
		{"foreign post", func() *http.Request {
			r := auth(post(t, ts.URL+"/v1/chat/completions", chat))
			r.Header.Set("Origin", "https://evil.example")
			return r
		}(), 403, "origin_not_allowed"},
		{"no key", post(t, ts.URL+"/v1/chat/completions", chat), 401, "invalid_api_key"},
		{"unknown path", auth(get(t, ts.URL+"/v2/nothing")), 404, "not_found"},
		{"wrong method", auth(get(t, ts.URL+"/v1/chat/completions")), 405, "method_not_allowed"},
		{"bad json", auth(post(t, ts.URL+"/v1/chat/completions", `{"messages":`)), 400, ""},
		{"wrong type", auth(post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}`)), 400, ""},
		{"empty messages", auth(post(t, ts.URL+"/v1/chat/completions", `{"messages":[]}`)), 400, ""},
		{"n=2", auth(post(t, ts.URL+"/v1/chat/completions", `{"n":2,"messages":[{"role":"user","content":"x"}]}`)), 400, ""},
		{"bad role", auth(post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`)), 400, ""},
		{"top_p 0", auth(post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_p":0}`)), 400, ""},
		{"huge body", auth(post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+strings.Repeat("a", MaxBodyBytes)+`"}]}`)), 413, ""},
	}
	for _, c := range cases {
		resp, body := do(t, c.req)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, resp.StatusCode, c.status, body)
			continue
		}
		var e struct {
			Error struct {
				Message, Type string
				Code          any
			}
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: body %q is not an OpenAI error", c.name, body)
		}
		if c.code != "" && e.Error.Code != c.code {
			t.Errorf("%s: code %v, want %s", c.name, e.Error.Code, c.code)
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s: CORS header sent to a refused request", c.name)
		}
	}

	// Allowed: health without a key, a listed origin's preflight, a trailing "?".
	resp, _ := do(t, get(t, ts.URL+"/health"))
	if resp.StatusCode != 200 {
		t.Errorf("health: %d", resp.StatusCode)
	}
	pre, _ := http.NewRequest("OPTIONS", ts.URL+"/v1/chat/completions", nil)
	pre.Header.Set("Origin", "http://localhost:5173")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	resp, _ = do(t, pre)
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" {
		t.Errorf("allowed preflight: %d, %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	for _, path := range []string{"/v1/models?", "/models", "/v1/models%3F", "/v1/models/anything"} {
		resp, body := do(t, auth(get(t, ts.URL+path)))
		if resp.StatusCode != 200 || !strings.Contains(body, `"context_length":4096`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	// The key as X-Api-Key, and every loopback name, as on /manage.
	for _, host := range []string{"localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.2:80", "[::1]:8080"} {
		r := get(t, ts.URL+"/v1/models")
		r.Host = host
		r.Header.Set("X-Api-Key", "k")
		if resp, body := do(t, r); resp.StatusCode != 200 {
			t.Errorf("Host %s with X-Api-Key: %d %s", host, resp.StatusCode, body)
		}
	}
}

// TestHostWithKey: a server exposed to the network refused every request
// that named it as the network does (its IP address, mybox.local) unless
// that name was given to --allow-host, the correct key included. The key
// now lets a request past the Host check, as a DNS-rebinding page cannot
// know it; without the key, or with a wrong one, a foreign name is
// refused as before, and a server without a key lets no token stand in.
func TestHostWithKey(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ui") })
	keyed := newTestServer(t, service.Options{}, Options{APIKey: "k", Fallback: ui}, constant("ok"))
	open := newTestServer(t, service.Options{}, Options{Fallback: ui}, constant("ok"))
	for _, host := range []string{"mybox.local:8080", "evil.example", "192.168.1.20:8080", "[fd00::20]:8080"} {
		for _, c := range []struct {
			name, header, value, path string
			server                    *testServer
			status                    int
			body                      string
		}{
			{"Bearer key", "Authorization", "Bearer k", "/v1/models", keyed, 200, `"context_length"`},
			{"X-Api-Key", "X-Api-Key", "k", "/api/tags", keyed, 200, `"models"`},
			{"the UI with the key", "Authorization", "Bearer k", "/", keyed, 200, "ui"},
			{"no key", "", "", "/v1/models", keyed, 403, "host_not_allowed"},
			{"no key, health", "", "", "/health", keyed, 403, "host_not_allowed"},
			{"no key, the UI", "", "", "/", keyed, 403, "host_not_allowed"},
			{"wrong key", "Authorization", "Bearer kk", "/v1/models", keyed, 403, "host_not_allowed"},
			{"a token, no key set", "Authorization", "Bearer k", "/v1/models", open, 403, "host_not_allowed"},
		} {
			r := get(t, c.server.URL+c.path)
			r.Host = host
			if c.header != "" {
				r.Header.Set(c.header, c.value)
			}
			if resp, body := do(t, r); resp.StatusCode != c.status || !strings.Contains(body, c.body) {
				t.Errorf("Host %s, %s: %d %s, want %d with %s", host, c.name, resp.StatusCode, body, c.status, c.body)
			}
		}
	}
}

// TestHostArrivedAt: a server listening on every interface is named by
// other machines with the address they reach it at, which the Host check
// refused without --allow-host. The address a request arrived at is this
// machine's own, and a DNS-rebinding page names a domain, never an
// address: it passes without a key; another address or any name does not.
func TestHostArrivedAt(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ui") })
	ts := newTestServer(t, service.Options{}, Options{Fallback: ui}, constant("ok"))
	h := ts.Config.Handler
	for _, c := range []struct {
		host, local, path string
		status            int
		body              string
	}{
		{"192.0.2.7:8080", "192.0.2.7", "/v1/models", 200, `"context_length"`},
		{"192.0.2.7", "192.0.2.7", "/", 200, "ui"},
		{"[2001:db8::7]:8080", "2001:db8::7", "/v1/models", 200, `"context_length"`},
		{"192.0.2.7:8080", "::ffff:192.0.2.7", "/v1/models", 200, `"context_length"`},
		{"192.0.2.8:8080", "192.0.2.7", "/v1/models", 403, "host_not_allowed"},
		{"192.0.2.8:8080", "192.0.2.7", "/", 403, "host_not_allowed"},
		{"mybox.local:8080", "192.0.2.7", "/v1/models", 403, "host_not_allowed"},
		{"0.0.0.0:8080", "0.0.0.0", "/v1/models", 403, "host_not_allowed"},
		{"192.0.2.7:8080", "", "/v1/models", 403, "host_not_allowed"},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		r.Host = c.host
		if c.local != "" {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP(c.local), Port: 8080}))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("Host %s arrived at %s, %s: %d %s, want %d with %s", c.host, c.local, c.path, rec.Code, rec.Body, c.status, c.body)
		}
	}

	// Through a listener on every interface, as petal serve --addr
	// 0.0.0.0:8080 runs, reached at this machine's network address.
	ip := networkAddress(t)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + net.JoinHostPort(ip.String(), fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	if resp, body := do(t, get(t, url+"/v1/models")); resp.StatusCode != 200 {
		t.Errorf("%s/v1/models: %d %s", url, resp.StatusCode, body)
	}
	named := get(t, url+"/v1/models")
	named.Host = "mybox.local"
	if resp, body := do(t, named); resp.StatusCode != 403 {
		t.Errorf("%s/v1/models as mybox.local: %d %s", url, resp.StatusCode, body)
	}
}

// networkAddress is an IPv4 address of this machine other than loopback.
func networkAddress(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	t.Skip("this machine has no network address besides loopback")
	return nil
}

// TestTrailingQuestionMark sends the request line Xcode sends.
func TestTrailingQuestionMark(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/models? HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestQueueFull(t *testing.T) {
	ts := newTestServer(t, service.Options{QueueLimit: 1}, Options{}, constant("</think>\n\n"+strings.Repeat("x", 300)))
	ts.model.SetStepDelay(2 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One request runs, one waits; both are cancelled at the end.
	for range 2 {
		req := post(t, ts.URL+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"x"}]}`).WithContext(ctx)
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body) // until cancelled
				resp.Body.Close()
			}
		}()
	}
	waitQueue(t, ts.svc, func(m service.Metrics) bool { return m.Waiting == 1 && m.Running == 1 })
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "queue_full") {
		t.Errorf("full queue: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Every API family tells its clients when to retry, Ollama's included.
	for _, path := range []string{"/api/chat", "/v1/messages"} {
		resp, body := do(t, post(t, ts.URL+path, `{"model":"qwen-test","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`))
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("full queue on %s: %d Retry-After %q %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	// Health and models answer while the engine is busy.
	for _, path := range []string{"/health", "/v1/models", "/metrics", "/api/tags"} {
		if resp, _ := do(t, get(t, ts.URL+path)); resp.StatusCode != 200 {
			t.Errorf("%s while busy: %d", path, resp.StatusCode)
		}
	}
}

func TestCompletions(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string { return " and then " + p })
	resp, body := do(t, post(t, ts.URL+"/v1/completions", `{"prompt":"Once","max_tokens":100,"echo":true}`))
	var c completion
	if err := json.Unmarshal([]byte(body), &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if c.Choices[0].Text != "Once and then Once" || *c.Choices[0].FinishReason != "stop" || c.Object != "text_completion" {
		t.Errorf("completion %+v", c.Choices[0])
	}
	// The default limit is OpenAI's 16 tokens.
	_, body = do(t, post(t, ts.URL+"/v1/completions", `{"prompt":["Once upon a time"],"stream":true}`))
	data, _ := sseEvents(t, body)
	text := ""
	for _, d := range data[:len(data)-1] {
		var ch completion
		if err := json.Unmarshal([]byte(d), &ch); err != nil {
			t.Fatal(err)
		}
		text += ch.Choices[0].Text
	}
	if text != " and then Once u" || data[len(data)-1] != "[DONE]" {
		t.Errorf("streamed %q", text)
	}
	if resp, _ := do(t, post(t, ts.URL+"/v1/completions", `{"prompt":[1,2,3]}`)); resp.StatusCode != 400 {
		t.Errorf("token prompt: %d", resp.StatusCode)
	}
}

func TestTokenizeAndMetrics(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("abc"))
	_, body := do(t, post(t, ts.URL+"/v1/tokenize", `{"text":"hello"}`))
	var tk struct {
		Tokens        []int
		Count         int
		ContextLength int `json:"context_length"`
	}
	if err := json.Unmarshal([]byte(body), &tk); err != nil || tk.Count != 5 || len(tk.Tokens) != 5 || tk.ContextLength != 4096 {
		t.Errorf("tokenize text: %s", body)
	}
	_, body = do(t, post(t, ts.URL+"/tokenize", `{"messages":[{"role":"user","content":"hello"}]}`))
	if err := json.Unmarshal([]byte(body), &tk); err != nil || tk.Count != len(ts.tok.Encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n")) {
		t.Errorf("tokenize messages: %s", body)
	}
	do(t, post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`))
	_, body = do(t, get(t, ts.URL+"/metrics"))
	for _, want := range []string{
		"petal_completion_tokens_total 3\n", "petal_queue_depth 0\n", "petal_requests_completed_total 1\n",
		"petal_time_to_first_token_seconds_count 1\n", `petal_time_to_first_token_seconds_bucket{le="+Inf"} 1`,
		"# TYPE petal_decode_tokens_per_second gauge\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestOllama(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, weatherAgent)
	_, body := do(t, get(t, ts.URL+"/api/version"))
	if !strings.Contains(body, OllamaVersion) {
		t.Errorf("version %s", body)
	}
	_, body = do(t, get(t, ts.URL+"/api/tags"))
	if !strings.Contains(body, `"name":"qwen-test"`) {
		t.Errorf("tags %s", body)
	}
	_, body = do(t, post(t, ts.URL+"/api/show", `{"model":"qwen-test"}`))
	var show struct {
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string
	}
	if err := json.Unmarshal([]byte(body), &show); err != nil {
		t.Fatal(err)
	}
	arch, _ := show.ModelInfo["general.architecture"].(string)
	if show.ModelInfo[arch+".context_length"] != 4096.0 || !strings.Contains(strings.Join(show.Capabilities, ","), "tools") {
		t.Errorf("show %s", body)
	}

	// /api/chat streams NDJSON by default.
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}]`
	resp, body := do(t, post(t, ts.URL+"/api/chat", `{"model":"qwen-test","messages":[{"role":"user","content":"weather?"}],"tools":`+tools+`}`))
	if resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	var thinking string
	var calls []ollamaToolCall
	for i, l := range lines {
		var r ollamaChatResponse
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if r.Done != (i == len(lines)-1) {
			t.Errorf("line %d: done %v", i, r.Done)
		}
		thinking += r.Message.Thinking
		calls = append(calls, r.Message.ToolCalls...)
	}
	if thinking != "Calling the tool." || len(calls) != 1 || calls[0].Function.Name != "get_weather" ||
		string(calls[0].Function.Arguments) != `{"city":"São Paulo","days":3}` {
		t.Errorf("thinking %q calls %+v", thinking, calls)
	}

	// The result goes back with arguments as an object, unstreamed.
	_, body = do(t, post(t, ts.URL+"/api/chat", `{"stream":false,"think":true,"messages":[{"role":"user","content":"weather?"},
		{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"São Paulo","days":3}}}]},
		{"role":"tool","content":"rain","tool_name":"get_weather"}],"tools":`+tools+`}`))
	var final ollamaChatResponse
	if err := json.Unmarshal([]byte(body), &final); err != nil {
		t.Fatal(err)
	}
	if final.Message.Content != "The forecast: rain" || !final.Done || final.DoneReason != "stop" || final.EvalCount == 0 {
		t.Errorf("final %s", body)
	}
	if resp, body := do(t, post(t, ts.URL+"/api/chat", `{"messages":[{"role":"user","content":"x"}],"options":{"num_ctx":0}}`)); resp.StatusCode != 400 || !strings.Contains(body, `"error":"`) {
		t.Errorf("ollama error shape: %d %s", resp.StatusCode, body)
	}
}

func TestThinkingSwitches(t *testing.T) {
	var prompts []string
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string { prompts = append(prompts, p); return "fine" })
	for _, extra := range []string{
		`"chat_template_kwargs":{"enable_thinking":false}`,
		`"reasoning_effort":"none"`,
		`"enable_thinking":false`,
		`"reasoning_effort":"high"`,
	} {
		resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],`+extra+`}`))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", extra, body)
		}
	}
	for i, p := range prompts {
		off := strings.HasSuffix(p, "<think>\n\n</think>\n\n")
		if off != (i < 3) {
			t.Errorf("request %d: thinking off = %v; prompt %q", i, off, p)
		}
	}
	// With thinking off the reply is all content.
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"developer","content":"Be terse."},{"role":"user","content":"x"}],"reasoning_effort":"none"}`))
	if resp.StatusCode != 200 || !strings.Contains(body, `"content":"fine"`) || strings.Contains(body, "reasoning") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(prompts[len(prompts)-1], "<|im_start|>system\nBe terse.") {
		t.Errorf("developer message not rendered as system: %q", prompts[len(prompts)-1])
	}
}

// TestEveryClientField sends every field CLIENTS.md lists, as real clients
// send them: all are accepted.
func TestEveryClientField(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("Hmm.</think>\n\nDone."))
	body := `{
		"model": "some-model-the-server-does-not-know",
		"messages": [
			{"role": "system", "content": "sys"},
			{"role": "user", "content": [{"type": "text", "text": "q1"}]},
			{"role": "assistant", "content": null, "reasoning_content": "thought",
			 "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
			{"role": "tool", "tool_call_id": "call_1", "content": "r"},
			{"role": "user", "content": "q2"}
		],
		"stream": false, "stream_options": {"include_usage": true},
		"max_tokens": 50, "max_completion_tokens": 40,
		"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
		"presence_penalty": 0.5, "frequency_penalty": 0.1, "repetition_penalty": 1.05, "seed": 42,
		"stop": ["\n\n\n", "` + strings.Repeat("x", 300) + `"],
		"tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
		"tool_choice": "auto", "parallel_tool_calls": false,
		"reasoning_effort": "medium", "chat_template_kwargs": {"enable_thinking": true, "preserve_thinking": false},
		"prompt_cache_key": "k", "response_format": {"type": "text"}, "user": "u", "n": 1,
		"logprobs": false, "top_logprobs": 0, "metadata": {"x": 1}, "store": false, "some_future_field": [1, 2]
	}`
	resp, out := do(t, post(t, ts.URL+"/v1/chat/completions", body))
	if resp.StatusCode != 200 || !strings.Contains(out, `"content":"Done."`) || !strings.Contains(out, `"reasoning":"Hmm."`) {
		t.Errorf("%d %s", resp.StatusCode, out)
	}
}
