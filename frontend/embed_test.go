package frontend

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIndexForPagesAndUnknownPaths(t *testing.T) {
	h := Handler()
	for _, p := range []string{"/", "/index.html", "/settings", "/a/b/c", "/../../etc/passwd"} {
		r := get(t, h, "GET", p)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d", p, r.StatusCode)
		}
		if b := body(t, r); !strings.Contains(b, `<div id="app">`) {
			t.Fatalf("GET %s: not index.html: %.200s", p, b)
		}
		if got := r.Header.Get("Cache-Control"); got != revalidateCache {
			t.Errorf("GET %s: Cache-Control %q", p, got)
		}
		if !strings.Contains(r.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: no CSP", p)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", p)
		}
	}
}

func TestHashedAssetsCachedAndMissingOnes404(t *testing.T) {
	h := Handler()
	js, err := fs.Glob(Files(), "assets/*.js")
	if err != nil || len(js) == 0 {
		t.Fatalf("no built JavaScript under dist/assets (%v): run npm run build", err)
	}
	r := get(t, h, "GET", "/"+js[0])
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", js[0], r.StatusCode)
	}
	if got := r.Header.Get("Cache-Control"); got != immutableCache {
		t.Errorf("Cache-Control %q", got)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("Content-Type %q", ct)
	}
	if r := get(t, h, "GET", "/assets/index-gone.js"); r.StatusCode != http.StatusNotFound {
		t.Errorf("missing asset: status %d, want 404", r.StatusCode)
	}
}

func TestStaticFileAndMethods(t *testing.T) {
	h := Handler()
	r := get(t, h, "GET", "/petal.svg")
	if r.StatusCode != http.StatusOK || !strings.Contains(body(t, r), "<svg") {
		t.Fatalf("petal.svg: %d", r.StatusCode)
	}
	if r := get(t, h, "HEAD", "/"); r.StatusCode != http.StatusOK {
		t.Errorf("HEAD /: %d", r.StatusCode)
	}
	r = get(t, h, "POST", "/")
	if r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", r.StatusCode, r.Header.Get("Allow"))
	}
}
