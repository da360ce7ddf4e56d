package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"petal/internal/manage"
)

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestAppServesEndpointAndWindow starts the desktop app's backend on the
// demo model (no webview: that part needs the desktop build) and checks
// both of its doors: the local endpoint on the settings' port, and the
// handler the window's webview calls from the wails:// origin.
func TestAppServesEndpointAndWindow(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PETAL_MODELS", filepath.Join(home, "models"))
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, "cache"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("HOME", home)
	store, err := manage.OpenSettings(filepath.Join(home, "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := store.Get()
	s.Port = freePort(t)
	if err := store.Set(s); err != nil {
		t.Fatal(err)
	}
	a, err := startApp(store, desktopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	if !a.Demo || a.modelName == "" {
		t.Fatalf("expected the demo model, got %q (demo %v)", a.modelName, a.Demo)
	}
	if !strings.HasSuffix(a.Endpoint, ":"+strconv.Itoa(s.Port)+"/v1") || a.Endpoint != a.rt.Endpoint() {
		t.Fatalf("endpoint %s is not on port %d, or not the runtime's %s", a.Endpoint, s.Port, a.rt.Endpoint())
	}

	resp, err := http.Get(a.Endpoint + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models on the endpoint: %d", resp.StatusCode)
	}

	// The window: the UI, a streamed chat and a management call, all from
	// the webview's origin.
	win := func(method, path, body string) *http.Response {
		req := httptest.NewRequest(method, "wails://wails"+path, strings.NewReader(body))
		req.Host = "wails"
		req.RemoteAddr = ""
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Origin", "wails://wails")
		}
		rec := httptest.NewRecorder()
		// Wails' writers cannot flush; the recorder is hidden behind one
		// that cannot either.
		a.Window.ServeHTTP(struct{ http.ResponseWriter }{rec}, req)
		return rec.Result()
	}
	if r := win("GET", "/", ""); r.StatusCode != 200 || !strings.Contains(readAll(t, r.Body), `id="app"`) {
		t.Fatalf("window GET /: %d", r.StatusCode)
	}
	r := win("POST", "/v1/chat/completions", `{"model":"x","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"Hello"}]}`)
	if r.StatusCode != 200 {
		t.Fatalf("window chat: %d %s", r.StatusCode, readAll(t, r.Body))
	}
	var sawDone bool
	for sc := bufio.NewScanner(r.Body); sc.Scan(); {
		if sc.Text() == "data: [DONE]" {
			sawDone = true
		}
	}
	if !sawDone {
		t.Error("the window's chat stream did not end with [DONE]")
	}
	if r := win("PUT", "/manage/settings", `{"port":`+strconv.Itoa(s.Port)+`,"preset":"coding","thinking":true,"allowed_origins":[]}`); r.StatusCode != 200 {
		t.Fatalf("window PUT /manage/settings: %d %s", r.StatusCode, readAll(t, r.Body))
	}
	if store.Get().Preset != "coding" {
		t.Error("the window's settings save did not reach the store")
	}
	// The webview's origin is not allowed on the network endpoint.
	req, _ := http.NewRequest("PUT", strings.TrimSuffix(a.Endpoint, "/v1")+"/manage/settings", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site settings PUT on the endpoint: %d", resp.StatusCode)
	}
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
