package api

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestMaxTokensClampedToTheContext: a max_tokens beyond the room the
// prompt leaves was refused (issue 30: qwen-code failed on its defaults,
// Claude Code paid a retry per first turn); it is lowered to the room left
// on every route, the reply cut there with each API's "length" finish, and
// only a prompt that does not fit by itself is refused.
func TestMaxTokensClampedToTheContext(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant(strings.Repeat("word ", 400)))
	// One token per byte: about 3,800 prompt tokens leave about 300 of
	// the 4,096, fewer than the reply's 2,000.
	text := strings.Repeat("w", 3800)
	user := `"messages":[{"role":"user","content":"` + text + `"}]`
	cases := []struct {
		path, body string
		// used reads prompt and reply tokens and the finish from the body.
		used func(map[string]any) (prompt, reply float64, finish any)
		want string
	}{
		{"/v1/chat/completions", `{"max_tokens":8000,` + user + `}`, func(m map[string]any) (float64, float64, any) {
			u := m["usage"].(map[string]any)
			return u["prompt_tokens"].(float64), u["completion_tokens"].(float64), m["choices"].([]any)[0].(map[string]any)["finish_reason"]
		}, "length"},
		{"/v1/completions", `{"max_tokens":8000,"prompt":"` + text + `"}`, func(m map[string]any) (float64, float64, any) {
			u := m["usage"].(map[string]any)
			return u["prompt_tokens"].(float64), u["completion_tokens"].(float64), m["choices"].([]any)[0].(map[string]any)["finish_reason"]
		}, "length"},
		{"/v1/responses", `{"max_output_tokens":8000,"input":"` + text + `"}`, func(m map[string]any) (float64, float64, any) {
			u := m["usage"].(map[string]any)
			return u["input_tokens"].(float64), u["output_tokens"].(float64), m["incomplete_details"].(map[string]any)["reason"]
		}, "max_output_tokens"},
		{"/v1/messages", `{"max_tokens":32000,` + user + `}`, func(m map[string]any) (float64, float64, any) {
			// Anthropic counts the tokens read from the cache apart.
			u := m["usage"].(map[string]any)
			cached, _ := u["cache_read_input_tokens"].(float64)
			return u["input_tokens"].(float64) + cached, u["output_tokens"].(float64), m["stop_reason"]
		}, "max_tokens"},
		{"/api/generate", `{"stream":false,"options":{"num_predict":8000},"prompt":"` + text + `"}`, func(m map[string]any) (float64, float64, any) {
			return m["prompt_eval_count"].(float64), m["eval_count"].(float64), m["done_reason"]
		}, "length"},
		{"/api/chat", `{"stream":false,"options":{"num_predict":8000},` + user + `}`, func(m map[string]any) (float64, float64, any) {
			return m["prompt_eval_count"].(float64), m["eval_count"].(float64), m["done_reason"]
		}, "length"},
	}
	for _, c := range cases {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		var m map[string]any
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &m) != nil {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
			continue
		}
		prompt, reply, finish := c.used(m)
		if prompt < 3800 || prompt+reply != 4096 || finish != c.want {
			t.Errorf("%s: %v prompt and %v reply tokens of 4096, finish %v, want %s", c.path, prompt, reply, finish, c.want)
		}
	}

	long := strings.Repeat("word ", 5000)
	resp, body := do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":10,"messages":[{"role":"user","content":"`+long+`"}]}`))
	if resp.StatusCode != 400 || !regexp.MustCompile(`prompt is too long: \d+ tokens > 4096 maximum`).MatchString(body) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	resp, body = do(t, post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":10,"messages":[{"role":"user","content":"`+long+`"}]}`))
	if resp.StatusCode != 400 || !strings.Contains(body, `"context_length_exceeded"`) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

// TestContextPublished: the context size under every name clients read
// (issue 16: Cline assumed 128,000 tokens, Claude Code 200,000).
func TestContextPublished(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	_, body := do(t, get(t, ts.URL+"/v1/models"))
	for _, k := range []string{"context_length", "max_model_len", "max_context_length", "loaded_context_length"} {
		if !strings.Contains(body, `"`+k+`":4096`) {
			t.Errorf("/v1/models lacks %s: %s", k, body)
		}
	}
}
