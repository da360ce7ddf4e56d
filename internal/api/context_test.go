package api

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestMaxTokensOverTheContext: a max_tokens beyond the room the prompt
// leaves was lowered silently (issue 16: Claude's 32000 became 2100); it is
// refused as OpenAI and Anthropic refuse it, in the words their clients
// parse to retry: Claude Code reads the three numbers and retries with a
// max_tokens that fits.
func TestMaxTokensOverTheContext(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	user := `"messages":[{"role":"user","content":"hi"}]`
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":32000,`+user+`}`))
	var e struct {
		Error apiError `json:"error"`
	}
	json.Unmarshal([]byte(body), &e)
	m := regexp.MustCompile(`maximum context length is 4096 tokens\. However, you requested (\d+) tokens \((\d+) in the messages, 32000 in the completion\)`).FindStringSubmatch(e.Error.Message)
	if resp.StatusCode != 400 || e.Error.Code != "context_length_exceeded" || m == nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	prompt, _ := strconv.Atoi(m[2])

	resp, body = do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":32000,`+user+`}`))
	m = regexp.MustCompile("input length and `max_tokens` exceed context limit: (\\d+) \\+ 32000 > 4096, decrease input length or `max_tokens` and try again").FindStringSubmatch(body)
	if resp.StatusCode != 400 || m == nil || !strings.Contains(body, `"invalid_request_error"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}

	// What fits is served; the reply may use all the room that is left.
	room := strconv.Itoa(4096 - prompt)
	if resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":`+room+`,`+user+`}`)); resp.StatusCode != 200 {
		t.Errorf("max_tokens %s: %d %s", room, resp.StatusCode, body)
	}
	long := strings.Repeat("word ", 5000)
	resp, body = do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":10,"messages":[{"role":"user","content":"`+long+`"}]}`))
	if resp.StatusCode != 400 || !regexp.MustCompile(`prompt is too long: \d+ tokens > 4096 maximum`).MatchString(body) {
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
