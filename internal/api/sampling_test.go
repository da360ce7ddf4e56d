package api

import (
	"strings"
	"testing"

	"petal/internal/service"
)

// The sampling fields are one type (sample.Overrides) on every API: a
// seed is any 64-bit integer, negative or as a string; a wrong type is a
// 400 naming the field as the client wrote it (never the Go type's path),
// Ollama's options included.
func TestSamplingFields(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("hi"))
	chat := func(fields string) string {
		return `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,` + fields + `}`
	}
	for _, c := range []struct{ path, body, bad string }{
		{"/v1/chat/completions", chat(`"seed":-5`), ""},
		{"/v1/chat/completions", chat(`"seed":"18446744073709551615"`), ""},
		{"/v1/chat/completions", chat(`"seed":1.5`), `"param":"seed"`},
		{"/v1/chat/completions", chat(`"temperature":"hot"`), `"param":"temperature"`},
		{"/v1/completions", `{"prompt":"x","max_tokens":2,"seed":true}`, `"param":"seed"`},
		{"/v1/responses", `{"input":"x","max_output_tokens":2,"top_p":[1]}`, `"param":"top_p"`},
		{"/api/chat", `{"messages":[{"role":"user","content":"x"}],"stream":false,"options":{"seed":7,"repeat_penalty":1.1,"top_k":5}}`, ""},
		{"/api/chat", `{"messages":[{"role":"user","content":"x"}],"stream":false,"options":{"seed":1e400}}`, `field \"options.seed\"`},
		{"/api/generate", `{"prompt":"x","stream":false,"options":{"min_p":"x"}}`, `field \"options.min_p\"`},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		switch {
		case c.bad == "" && resp.StatusCode != 200:
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		case c.bad != "" && (resp.StatusCode != 400 || !strings.Contains(body, c.bad) || strings.Contains(body, "Overrides")):
			t.Errorf("%s %s: %d %s, want 400 with %s", c.path, c.body, resp.StatusCode, body, c.bad)
		}
	}
}
