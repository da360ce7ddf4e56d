package api

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestHugeMaxTokensNeverNegative: max_tokens 9223372036854775807 was added
// to the prompt's count in the context error, which overflowed and told
// the client it had asked for a negative number of tokens (issue 28 A.6).
// Every reply limit, on every API, is now refused past MaxReplyTokens, and
// the largest one accepted is lowered to the room left (issue 30 item 5).
func TestHugeMaxTokensNeverNegative(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	negative := regexp.MustCompile(`-\d`)
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, n := range []string{"9223372036854775807", "4611686018427387904", strconv.Itoa(MaxReplyTokens + 1), strconv.Itoa(MaxReplyTokens)} {
		for _, c := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"max_tokens":` + n + `,` + user + `}`},
			{"/v1/chat/completions", `{"max_completion_tokens":` + n + `,` + user + `}`},
			{"/v1/completions", `{"prompt":"hi","max_tokens":` + n + `}`},
			{"/v1/responses", `{"input":"hi","max_output_tokens":` + n + `}`},
			{"/v1/messages", `{"max_tokens":` + n + `,` + user + `}`},
			{"/api/chat", `{"stream":false,"options":{"num_predict":` + n + `},` + user + `}`},
			{"/api/generate", `{"stream":false,"prompt":"hi","options":{"num_predict":` + n + `}}`},
		} {
			resp, body := do(t, post(t, ts.URL+c.path, c.body))
			want := 400
			if n == strconv.Itoa(MaxReplyTokens) {
				want = 200
			}
			if resp.StatusCode != want || want == 400 && negative.MatchString(body) {
				t.Errorf("%s with %s: %d %s", c.path, n, resp.StatusCode, body)
			}
			if n != strconv.Itoa(MaxReplyTokens) && !strings.Contains(body, strconv.Itoa(MaxReplyTokens)) {
				t.Errorf("%s with %s does not say the limit: %s", c.path, n, body)
			}
		}
	}
}

// TestNoSniffOnEveryReply: API replies lacked X-Content-Type-Options, so a
// browser could sniff a JSON error that quotes a client's text as a page
// (issue 28 A.6). Successes, errors, streams, the gate's refusals and the
// Ollama and Anthropic shapes all carry it now.
func TestNoSniffOnEveryReply(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{APIKey: "0123456789abcdef"}, constant("ok"))
	key := func(r *http.Request) *http.Request {
		r.Header.Set("Authorization", "Bearer 0123456789abcdef")
		return r
	}
	user := `"messages":[{"role":"user","content":"<b>hi</b>"}]`
	for name, req := range map[string]*http.Request{
		"models":          key(get(t, ts.URL+"/v1/models")),
		"health":          get(t, ts.URL+"/health"),
		"chat":            key(post(t, ts.URL+"/v1/chat/completions", `{`+user+`}`)),
		"chat stream":     key(post(t, ts.URL+"/v1/chat/completions", `{"stream":true,`+user+`}`)),
		"bad json":        key(post(t, ts.URL+"/v1/chat/completions", `{"messages":"<script>"}`)),
		"no key":          post(t, ts.URL+"/v1/chat/completions", `{`+user+`}`),
		"no route":        key(get(t, ts.URL+"/v1/<script>")),
		"anthropic error": key(post(t, ts.URL+"/v1/messages", `{"max_tokens":0,`+user+`}`)),
		"ollama":          key(post(t, ts.URL+"/api/chat", `{"stream":false,`+user+`}`)),
		"ollama error":    key(post(t, ts.URL+"/api/chat", `{"messages":5}`)),
		"metrics":         key(get(t, ts.URL+"/metrics")),
	} {
		resp, body := do(t, req)
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s (%d %.80s): X-Content-Type-Options %q", name, resp.StatusCode, body, got)
		}
	}
}
