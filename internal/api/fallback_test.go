package api

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"petal/internal/service"
)

func TestFallbackServesNonAPIPathsBehindTheHostCheck(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ui:"+r.URL.Path)
	})
	ts := newTestServer(t, service.Options{}, Options{Fallback: ui}, constant("hi"))

	for path, want := range map[string]string{"/": "ui:/", "/manage/status": "ui:/manage/status", "/settings": "ui:/settings"} {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		resp, body := do(t, req)
		if resp.StatusCode != 200 || body != want {
			t.Errorf("GET %s: %d %q, want %q", path, resp.StatusCode, body, want)
		}
	}
	// API routes stay the API's, and unknown API paths stay JSON 404s.
	for path, status := range map[string]int{"/v1/models": 200, "/health": 200, "/v1/nothing": 404, "/api/nothing": 404} {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		resp, body := do(t, req)
		if resp.StatusCode != status || strings.HasPrefix(body, "ui:") {
			t.Errorf("GET %s: %d %q, want %d from the API", path, resp.StatusCode, body, status)
		}
	}
	// A rebinding attack names another host: the UI is refused like the API.
	req, _ := http.NewRequest("GET", ts.URL+"/", nil)
	req.Host = "evil.example"
	if resp, body := do(t, req); resp.StatusCode != http.StatusForbidden || strings.HasPrefix(body, "ui:") {
		t.Errorf("Host evil.example: %d %q", resp.StatusCode, body)
	}
}
