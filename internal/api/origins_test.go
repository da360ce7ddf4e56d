package api

import (
	"net/http"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestAppOriginsAllowed: editor webviews, desktop apps, extensions and
// pages on loopback got 403 unless configured (issue 30 item 9); they are
// allowed by default as Ollama allows them, and web origins still are not.
func TestAppOriginsAllowed(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for origin, want := range map[string]int{
		"vscode-webview://1h8l3bkjs6r2kvm0": 200,
		"vscode-file://vscode-app":          200,
		"app://obsidian.md":                 200,
		"chrome-extension://abcdefghijklm":  200,
		"moz-extension://1234-5678":         200,
		"tauri://localhost":                 200,
		"http://localhost:3000":             200,
		"http://127.0.0.1:8081":             200,
		"https://[::1]:9000":                200,
		"https://evil.example":              403,
		"http://localhost.evil.example":     403,
		"http://127.0.0.1.nip.io:8080":      403,
		"null":                              403,
		"file:///home/me/page.html":         403,
		"vscode-webview:":                   403,
	} {
		r := post(t, ts.URL+"/v1/chat/completions", chat)
		r.Header.Set("Origin", origin)
		resp, body := do(t, r)
		allowed := resp.Header.Get("Access-Control-Allow-Origin")
		if resp.StatusCode != want || (want == 200) != (allowed == origin) {
			t.Errorf("%s: %d, Access-Control-Allow-Origin %q: %.200s", origin, resp.StatusCode, allowed, body)
		}
	}
}

// TestAnyContentTypeWithoutOrigin: curl's -d sends a form's content type
// and copy-pasted examples often none; they got 415 (issue 30 item 9). A
// caller without an Origin is no browser, so its body is read as JSON
// whatever it says; a page must still send JSON, since a browser posts a
// form or text/plain anywhere without asking first.
func TestAnyContentTypeWithoutOrigin(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for _, c := range []struct {
		path, body string
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`},
		{"/api/generate", `{"prompt":"hi","stream":false,"options":{"num_predict":2}}`},
		{"/v1/messages", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`},
	} {
		for _, ctype := range []string{"", "application/x-www-form-urlencoded", "text/plain"} {
			r := post(t, ts.URL+c.path, c.body)
			r.Header.Del("Content-Type")
			if ctype != "" {
				r.Header.Set("Content-Type", ctype)
			}
			if resp, body := do(t, r); resp.StatusCode != 200 || !strings.Contains(body, "ok") {
				t.Errorf("%s with Content-Type %q: %d %.200s", c.path, ctype, resp.StatusCode, body)
			}
			r = post(t, ts.URL+c.path, c.body)
			r.Header.Set("Content-Type", ctype)
			r.Header.Set("Origin", "http://localhost:5173")
			if resp, body := do(t, r); resp.StatusCode != http.StatusUnsupportedMediaType {
				t.Errorf("%s from a page with Content-Type %q: %d %.200s", c.path, ctype, resp.StatusCode, body)
			}
		}
	}
	// A body that is no JSON is still a clear 400, not a 500.
	r := post(t, ts.URL+"/v1/chat/completions", "messages=hi")
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, body := do(t, r); resp.StatusCode != 400 || !strings.Contains(body, "not valid JSON") {
		t.Errorf("a form body: %d %s", resp.StatusCode, body)
	}
}
