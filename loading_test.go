package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"petal/internal/manage"
	"petal/internal/runtime"
)

// appHome points the app at an empty home (the demo model) with settings
// on a free port.
func appHome(t *testing.T) *manage.SettingsStore {
	t.Helper()
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
	return store
}

// holdLoad makes the app's load wait for the returned channel, then do
// what open does.
func holdLoad(t *testing.T, open func(runtime.Config) (*runtime.Runtime, error)) chan<- struct{} {
	release := make(chan struct{})
	saved := openRuntime
	openRuntime = func(cfg runtime.Config) (*runtime.Runtime, error) {
		<-release
		return open(cfg)
	}
	t.Cleanup(func() { openRuntime = saved })
	return release
}

// window sends the webview's request to the app.
func window(a *App, method, path string) *http.Response {
	req := httptest.NewRequest(method, "wails://wails"+path, nil)
	rec := httptest.NewRecorder()
	a.Window.ServeHTTP(rec, req)
	return rec.Result()
}

func modelStatus(t *testing.T, a *App) manage.Status {
	t.Helper()
	r := window(a, "GET", "/manage/status")
	var st manage.Status
	if err := json.NewDecoder(r.Body).Decode(&st); r.StatusCode != 200 || err != nil {
		t.Fatalf("GET /manage/status: %d, %v", r.StatusCode, err)
	}
	return st
}

// TestWindowBeforeModel: startApp returns while the model still loads, and
// the window's requests are answered meanwhile: the status says loading,
// the API says 503 with Retry-After; once loaded, the runtime answers.
func TestWindowBeforeModel(t *testing.T) {
	release := holdLoad(t, runtime.Open)
	a, err := startApp(appHome(t), desktopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	st := modelStatus(t, a)
	if st.Model.State != "loading" || st.Model.Name == "" || st.Endpoint != a.Endpoint {
		t.Errorf("status while loading: %+v", st)
	}
	r := window(a, "GET", "/v1/models")
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(readAll(t, r.Body), "loading") {
		t.Errorf("GET /v1/models while loading: %d, Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	close(release)
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := modelStatus(t, a); st.Model.State != manage.StateReady {
		t.Errorf("status once loaded: %+v", st)
	}
	if r := window(a, "GET", "/v1/models"); r.StatusCode != 200 {
		t.Errorf("GET /v1/models once loaded: %d", r.StatusCode)
	}
}

// TestWindowShowsFailedLoad: a load that fails leaves the window up,
// saying why, and quitting works.
func TestWindowShowsFailedLoad(t *testing.T) {
	release := holdLoad(t, func(runtime.Config) (*runtime.Runtime, error) {
		return nil, errors.New("not enough memory for this context")
	})
	a, err := startApp(appHome(t), desktopLogger())
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := a.Wait(); err == nil {
		t.Fatal("the load did not fail")
	}
	st := modelStatus(t, a)
	if st.Model.State != "failed" || !strings.Contains(st.Model.Error, "not enough memory") {
		t.Errorf("status after a failed load: %+v", st.Model)
	}
	r := window(a, "POST", "/v1/chat/completions")
	if body := readAll(t, r.Body); r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "not enough memory") {
		t.Errorf("chat after a failed load: %d %s", r.StatusCode, body)
	}
	if err := a.Close(); err != nil {
		t.Error(err)
	}
}
