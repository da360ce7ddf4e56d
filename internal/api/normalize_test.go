package api

import (
	"strings"
	"testing"

	"petal/internal/service"
)

// TestSystemMessagesAnywhere: the conversations OpenAI accepts and Qwen3.5's
// template refuses (issue 16: 400 "System message must be at the
// beginning") are answered, with every system text in the leading system
// turn, on the chat API and, from Claude Code's mid-conversation-system
// beta, on the Messages API.
func TestSystemMessagesAnywhere(t *testing.T) {
	var prompts []string
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string { prompts = append(prompts, p); return "ok" })
	for _, c := range []struct {
		name, path, body, system string
	}{
		{"system then developer", "/v1/chat/completions",
			`{"messages":[{"role":"system","content":"A"},{"role":"developer","content":[{"type":"text","text":"B"}]},{"role":"user","content":"q"}]}`, "A\n\nB"},
		{"two systems", "/v1/chat/completions",
			`{"messages":[{"role":"system","content":"A"},{"role":"system","content":"B"},{"role":"user","content":"q"}]}`, "A\n\nB"},
		{"late system", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"L"},{"role":"user","content":"q2"}]}`, "L"},
		{"system inside messages", "/v1/messages",
			`{"max_tokens":50,"system":[{"type":"text","text":"S"}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"Agents: x"},{"role":"user","content":"q2"}]}`, "S\n\nAgents: x"},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
			continue
		}
		p := prompts[len(prompts)-1]
		if !strings.HasPrefix(p, "<|im_start|>system\n"+c.system+"<|im_end|>\n<|im_start|>user\nq<|im_end|>") || strings.Count(p, "system") != 1 {
			t.Errorf("%s: prompt %q", c.name, p)
		}
	}
}

// TestImagesRefused: an image on /v1 was dropped silently while /v1/messages
// refused it; both now answer the same clear 400 for a text-only model.
func TestImagesRefused(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`},
		{"/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		if resp.StatusCode != 400 || !strings.Contains(body, "is text-only") {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
		}
	}
}
