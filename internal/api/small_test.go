package api

import (
	"encoding/json"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestSmallClientItems: the smaller failures of issue 16, one per case.
func TestSmallClientItems(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{APIKey: "k"}, constant("ok"))
	user := `"messages":[{"role":"user","content":"hi"}]`
	send := func(path, body string, headers ...string) (int, string, func(string) string) {
		r := post(t, ts.URL+path, body)
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		resp, text := do(t, r)
		return resp.StatusCode, text, resp.Header.Get
	}

	// Both request-id headers, on answers and on errors.
	for _, key := range []string{"k", "wrong"} {
		_, _, h := send("/v1/chat/completions", `{`+user+`}`, "Authorization", "Bearer "+key)
		if id := h("X-Request-Id"); !strings.HasPrefix(id, "req_") || h("Request-Id") != id {
			t.Errorf("key %s: request ids %q %q", key, id, h("Request-Id"))
		}
	}

	// The scheme in lower case is the same key.
	if status, body, _ := send("/v1/chat/completions", `{`+user+`}`, "Authorization", "bearer k"); status != 200 {
		t.Errorf("lower-case bearer: %d %s", status, body)
	}

	// Anthropic's clients are told of x-api-key, OpenAI's of Bearer.
	if status, body, _ := send("/v1/messages", `{"max_tokens":5,`+user+`}`); status != 401 || !strings.Contains(body, "x-api-key: KEY") || !strings.Contains(body, `"authentication_error"`) {
		t.Errorf("anthropic 401: %d %s", status, body)
	}
	if status, body, _ := send("/v1/chat/completions", `{`+user+`}`); status != 401 || !strings.Contains(body, "Bearer KEY") {
		t.Errorf("openai 401: %d %s", status, body)
	}

	// A wrong type names the field the client sent.
	_, body, _ := send("/v1/chat/completions", `{"temperature":"hot",`+user+`}`, "Authorization", "Bearer k")
	var e struct {
		Error apiError `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e); e.Error.Param != "temperature" || strings.Contains(body, "sampling") {
		t.Errorf("type error %s", body)
	}

	// Every chunk of a stream says usage: null, until the usage chunk.
	_, body, _ = send("/v1/chat/completions", `{"stream":true,"stream_options":{"include_usage":true},`+user+`}`, "Authorization", "Bearer k")
	data, _ := sseEvents(t, body)
	for i, d := range data[:len(data)-1] {
		var c map[string]json.RawMessage
		json.Unmarshal([]byte(d), &c)
		last := i == len(data)-2
		if u, ok := c["usage"]; !ok || (string(u) == "null") == last {
			t.Errorf("chunk %d of %d: usage %s", i, len(data)-1, u)
		}
	}
}

// TestAnthropicCachedTokensAgree: message_start said every prompt token was
// new while message_delta counted the cached ones; both now give the same
// split, read after the prefix cache.
func TestAnthropicCachedTokensAgree(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("Sure."))
	body := `{"max_tokens":20,"stream":true,"system":"You are terse.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."},{"role":"user","content":"again"}]}`
	for i := range 2 {
		_, text := do(t, post(t, ts.URL+"/v1/messages", body))
		var start struct {
			Message struct{ Usage anthropicUsage }
		}
		var delta struct{ Usage anthropicUsage }
		for _, e := range anthropicEvents(t, text) {
			switch e.Name {
			case "message_start":
				json.Unmarshal([]byte(e.Raw), &start)
			case "message_delta":
				json.Unmarshal([]byte(e.Raw), &delta)
			}
		}
		a, b := start.Message.Usage, delta.Usage
		if a.InputTokens != b.InputTokens || a.CacheReadInputTokens != b.CacheReadInputTokens || (i == 1) != (b.CacheReadInputTokens > 0) {
			t.Errorf("request %d: message_start %+v, message_delta %+v", i, a, b)
		}
	}
}
