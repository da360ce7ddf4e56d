package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
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
	// The prefix cache has its disk tier in the user's cache folder, as
	// under petal serve, so an agent's prompt survives the app's restart.
	var tier struct {
		Enabled bool   `json:"enabled"`
		Dir     string `json:"dir"`
	}
	if r := win("GET", "/manage/prefix-cache", ""); r.StatusCode != 200 {
		t.Fatalf("window GET /manage/prefix-cache: %d", r.StatusCode)
	} else if err := json.NewDecoder(r.Body).Decode(&tier); err != nil {
		t.Fatal(err)
	}
	if !tier.Enabled || !strings.HasPrefix(tier.Dir, filepath.Join(home, "cache")) {
		t.Errorf("prefix cache on disk: %+v, want it on under %s", tier, filepath.Join(home, "cache"))
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

// TestAppAppliesSettingsAsServeDoes: the desktop app laid the settings
// over its runtime by a rule of its own, and the Settings screen then
// reported an exposed app's access token, its one key, as a default
// setting. The app now applies the settings as petal serve does
// (manage's Apply, without flags): the token is required on the
// endpoint, also from the network, and reported set, from the settings.
func TestAppAppliesSettingsAsServeDoes(t *testing.T) {
	saved := appHome(t)
	const token = "access-0123456789abcdef"
	s := saved.Get()
	// A file that names only what it changes, as one written by hand: the
	// key in force is the access token, a setting of the file's.
	file := fmt.Sprintf(`{"port":%d,"expose":true,"access_token":%q}`, s.Port, token)
	a := startSaved(t, saved.Path(), file)
	t.Cleanup(func() { closeApp(t, a) })
	models := func(base, key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/models", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := models(a.Endpoint, ""); got != http.StatusUnauthorized {
		t.Errorf("the endpoint without the access token: %d", got)
	}
	if got := models(a.Endpoint, token); got != 200 {
		t.Errorf("the endpoint with the access token: %d", got)
	}
	if ip := networkAddress(t); ip != nil {
		if got := models("http://"+net.JoinHostPort(ip.String(), strconv.Itoa(s.Port))+"/v1", token); got != 200 {
			t.Errorf("the endpoint at %s with the access token: %d", ip, got)
		}
	}

	var reply struct {
		InForce         map[string]manage.InForce `json:"in_force"`
		RestartRequired []string                  `json:"restart_required"`
	}
	windowGet(t, a, "/manage/settings", &reply)
	want := map[string]manage.InForce{
		manage.FieldAPIKey: {Value: "set", Source: manage.SourceSettings},
		manage.FieldExpose: {Value: true, Source: manage.SourceSettings},
		manage.FieldPort:   {Value: float64(s.Port), Source: manage.SourceSettings},
	}
	for f, w := range want {
		if got := reply.InForce[f]; got != w {
			t.Errorf("in force %s: %+v, want %+v", f, got, w)
		}
	}
	if len(reply.RestartRequired) != 0 {
		t.Errorf("restart required for %v right after the start", reply.RestartRequired)
	}
}

// TestAppAppliesPrefixCacheSettings: the desktop app opened the disk tier
// in the default folder with the default budget whatever the settings
// said. It now keeps it where prefix_cache_dir says, with prefix_cache_gb
// GB, reports both in force from the settings, and a saved 0 turns the
// tier off.
func TestAppAppliesPrefixCacheSettings(t *testing.T) {
	saved := appHome(t)
	port := saved.Get().Port
	dir := filepath.Join(filepath.Dir(saved.Path()), "snapshots")
	start := func(gb string) (*App, map[string]any) {
		t.Helper()
		file := fmt.Sprintf(`{"port":%d,"prefix_cache_dir":%q,"prefix_cache_gb":%s}`, port, dir, gb)
		a := startSaved(t, saved.Path(), file)
		defer closeApp(t, a)
		var tier map[string]any
		windowGet(t, a, "/manage/prefix-cache", &tier)
		var reply struct {
			InForce map[string]manage.InForce `json:"in_force"`
		}
		windowGet(t, a, "/manage/settings", &reply)
		want := map[string]manage.InForce{
			manage.FieldPrefixCacheDir: {Value: dir, Source: manage.SourceSettings},
			manage.FieldPrefixCacheGB:  {Value: tier["budget_bytes"].(float64) / gigabyte, Source: manage.SourceSettings},
		}
		for f, w := range want {
			if got := reply.InForce[f]; got != w {
				t.Errorf("prefix_cache_gb %s: in force %s: %+v, want %+v", gb, f, got, w)
			}
		}
		return a, tier
	}
	if a, tier := start("2"); a.disk == nil || tier["enabled"] != true || tier["dir"] != dir || tier["budget_bytes"] != 2e9 {
		t.Errorf("saved 2 GB in %s: %v", dir, tier)
	}
	if a, tier := start("0"); a.disk != nil || tier["enabled"] != false {
		t.Errorf("saved 0 GB: %v", tier)
	}
}

// startSaved writes file as the settings at path and starts the app on
// them, its model loaded; the caller closes it (closeApp).
func startSaved(t *testing.T, path, file string) *App {
	t.Helper()
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := manage.OpenSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := startApp(store, desktopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(); err != nil {
		closeApp(t, a)
		t.Fatal(err)
	}
	return a
}

// closeApp closes a, its error a failure of t.
func closeApp(t *testing.T, a *App) {
	if err := a.Close(); err != nil {
		t.Error(err)
	}
}

// windowGet decodes into v the JSON the app's window serves at path to a
// GET from the webview.
func windowGet(t *testing.T, a *App, path string, v any) {
	t.Helper()
	req := httptest.NewRequest("GET", "wails://wails"+path, nil)
	req.Host, req.RemoteAddr = "wails", ""
	rec := httptest.NewRecorder()
	a.Window.ServeHTTP(rec, req)
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
}

// networkAddress is an IPv4 address of this machine other than loopback,
// or nil when it has none.
func networkAddress(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

// TestAppAppliesParallelSetting: the desktop app decodes as many requests
// together as the settings' parallel says, as petal serve does, reported
// in force from the settings and in the Setup screen's status; left out,
// the memory fit decides and the status says what it chose.
func TestAppAppliesParallelSetting(t *testing.T) {
	saved := appHome(t)
	port := saved.Get().Port
	start := func(file string) (parallel int, inForce manage.InForce, status manage.ModelStatus) {
		t.Helper()
		a := startSaved(t, saved.Path(), fmt.Sprintf(`{"port":%d%s}`, port, file))
		defer closeApp(t, a)
		var settings struct {
			InForce map[string]manage.InForce `json:"in_force"`
		}
		windowGet(t, a, "/manage/settings", &settings)
		var st manage.Status
		windowGet(t, a, "/manage/status", &st)
		return a.rt.Metrics().Parallel, settings.InForce[manage.FieldParallel], st.Model
	}
	n, f, st := start(`,"parallel":2`)
	if n != 2 || f != (manage.InForce{Value: 2.0, Source: manage.SourceSettings}) || st.Parallel != 2 || st.Running != 0 {
		t.Errorf("saved 2: %d together, in force %+v, status %d of %d", n, f, st.Running, st.Parallel)
	}
	n, f, st = start(``)
	if n < 1 || f != (manage.InForce{Value: float64(manage.AutoParallel), Source: manage.SourceDefault}) || st.Parallel != n {
		t.Errorf("auto: %d together, in force %+v, status says %d", n, f, st.Parallel)
	}
}
