package manage

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recordingDownloader keeps the actions it was asked for and moves through
// the states a download manager would.
type recordingDownloader struct {
	mu      sync.Mutex
	state   string
	actions []Action
}

func (d *recordingDownloader) Status() DownloadStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DownloadStatus{State: d.state, Repo: "r", Revision: "abc", BytesTotal: 100}
}

func (d *recordingDownloader) Do(_ context.Context, a Action) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := map[Action]string{Start: "running", Pause: "paused", Resume: "running", Cancel: "cancelled", Verify: "done", Delete: "idle"}[a]
	if a == Pause && d.state != "running" {
		return errors.New("nothing is downloading")
	}
	d.actions = append(d.actions, a)
	d.state = next
	return nil
}

type fixture struct {
	srv      *httptest.Server
	settings *SettingsStore
	dl       *recordingDownloader
	fitAsked []int
}

func newFixture(t *testing.T, mutate func(*Options)) *fixture {
	t.Helper()
	st, err := OpenSettings(filepath.Join(t.TempDir(), "petal", "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{settings: st, dl: &recordingDownloader{state: "idle"}}
	opts := Options{
		Model: func() ModelStatus {
			return ModelStatus{Name: "demo", State: StateReady, ContextLength: 4096, Backend: "cpu"}
		},
		Endpoint: "http://127.0.0.1:8080/v1",
		Fit: func(n int) (any, error) {
			f.fitAsked = append(f.fitAsked, n)
			return map[string]any{"verdict": "fits", "context": n}, nil
		},
		Downloader: f.dl,
		Settings:   st,
		Running:    DefaultSettings(),
	}
	if mutate != nil {
		mutate(&opts)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

type reply struct {
	status int
	body   map[string]any
}

func (f *fixture) do(t *testing.T, method, path, body string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, path, err)
	}
	return reply{res.StatusCode, m}
}

func errCode(r reply) string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestStatusSaysWhatIsWiredIn(t *testing.T) {
	f := newFixture(t, nil)
	r := f.do(t, "GET", "/manage/status", "", nil)
	if r.status != 200 || r.body["downloads"] != true || r.body["fit"] != true || r.body["api_key_required"] != false {
		t.Fatalf("status: %d %v", r.status, r.body)
	}
	if m := r.body["model"].(map[string]any); m["state"] != "ready" || m["context_length"] != 4096.0 {
		t.Fatalf("model: %v", m)
	}

	bare := newFixture(t, func(o *Options) { o.Fit, o.Downloader, o.Settings = nil, nil, nil })
	r = bare.do(t, "GET", "/manage/status", "", nil)
	if r.body["downloads"] != false || r.body["fit"] != false {
		t.Fatalf("bare status: %v", r.body)
	}
	for _, p := range []string{"/manage/fit", "/manage/download", "/manage/settings"} {
		if r := bare.do(t, "GET", p, "", nil); r.status != 404 || errCode(r) != "not_available" {
			t.Errorf("GET %s without the feature: %d %s", p, r.status, errCode(r))
		}
	}
	if r := bare.do(t, "POST", "/manage/model/load", "{}", nil); r.status != 404 || errCode(r) != "not_available" {
		t.Errorf("load without a loader: %d %s", r.status, errCode(r))
	}
}

func TestSettingsRoundTripAndRestartList(t *testing.T) {
	var applied []Settings
	f := newFixture(t, func(o *Options) { o.OnSettings = func(s Settings) { applied = append(applied, s) } })
	r := f.do(t, "GET", "/manage/settings", "", nil)
	if r.status != 200 || r.body["settings"].(map[string]any)["preset"] != "thinking" {
		t.Fatalf("defaults: %d %v", r.status, r.body)
	}
	s := DefaultSettings()
	s.Port, s.Preset, s.Thinking = 9090, "coding", false
	s.AllowedOrigins = []string{"http://localhost:3000"}
	b, _ := json.Marshal(s)
	r = f.do(t, "PUT", "/manage/settings", string(b), nil)
	if r.status != 200 {
		t.Fatalf("PUT: %d %v", r.status, r.body)
	}
	restart := r.body["restart_required"].([]any)
	if !slices.Equal(restart, []any{"port", "allowed_origins"}) {
		t.Errorf("restart_required %v", restart)
	}
	if len(applied) != 1 || applied[0].Port != 9090 {
		t.Errorf("OnSettings saw %+v", applied)
	}
	again, err := OpenSettings(f.settings.path)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Get(); got.Port != 9090 || got.Preset != "coding" || got.Thinking || got.AllowedOrigins[0] != "http://localhost:3000" {
		t.Errorf("reread %+v", got)
	}
	st, err := os.Stat(f.settings.path)
	if err != nil || st.Mode().Perm() != settingsFileMode {
		t.Errorf("settings file mode %v (%v), want %v", st.Mode().Perm(), err, os.FileMode(settingsFileMode))
	}
}

func TestBadSettingsRefused(t *testing.T) {
	f := newFixture(t, nil)
	for name, body := range map[string]string{
		"port":         `{"port":0,"preset":"thinking"}`,
		"preset":       `{"port":8080,"preset":"wild"}`,
		"expose":       `{"port":8080,"preset":"thinking","expose":true,"access_token":"short"}`,
		"origin":       `{"port":8080,"preset":"thinking","allowed_origins":["evil.example/path"]}`,
		"context":      `{"port":8080,"preset":"thinking","context_length":999999999}`,
		"unknownField": `{"port":8080,"preset":"thinking","shell":"rm -rf /"}`,
		"trailing":     `{"port":8080,"preset":"thinking"} {}`,
		"notJSON":      `port=8080`,
	} {
		r := f.do(t, "PUT", "/manage/settings", body, nil)
		if r.status != 400 || (errCode(r) != "bad_settings" && errCode(r) != "bad_json") {
			t.Errorf("%s: %d %s", name, r.status, errCode(r))
		}
	}
	if got := f.settings.Get(); got.Port != DefaultPort {
		t.Errorf("a refused PUT changed the settings: %+v", got)
	}
	r := f.do(t, "PUT", "/manage/settings", `{"port":1}`, map[string]string{"Content-Type": "text/plain"})
	if r.status != 415 {
		t.Errorf("text/plain: %d", r.status)
	}
	big := `{"port":8080,"preset":"thinking","api_key":"` + strings.Repeat("k", MaxBodyBytes) + `"}`
	if r := f.do(t, "PUT", "/manage/settings", big, nil); r.status != 413 {
		t.Errorf("oversized body: %d %s", r.status, errCode(r))
	}
}

func TestCrossOriginRequestsRefused(t *testing.T) {
	f := newFixture(t, nil)
	evil := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
	if r := f.do(t, "PUT", "/manage/settings", `{"port":1234,"preset":"thinking"}`, evil); r.status != 403 || errCode(r) != "cross_origin" {
		t.Errorf("cross-site PUT: %d %s", r.status, errCode(r))
	}
	if r := f.do(t, "POST", "/manage/download/start", `{}`, evil); r.status != 403 {
		t.Errorf("cross-site download: %d", r.status)
	}
	if len(f.dl.actions) != 0 || f.settings.Get().Port != DefaultPort {
		t.Fatalf("a cross-origin request acted: %v %+v", f.dl.actions, f.settings.Get())
	}
	r := f.do(t, "GET", "/manage/status", "", evil)
	if r.status == 200 {
		t.Log("a cross-site GET is answered, but without CORS headers no page can read it")
	}
	same := map[string]string{"Origin": f.srv.URL, "Sec-Fetch-Site": "same-origin"}
	if r := f.do(t, "POST", "/manage/download/start", `{}`, same); r.status != 200 || r.body["state"] != "running" {
		t.Errorf("same-origin start: %d %v", r.status, r.body)
	}
}

func TestAPIKeyAndRemoteCallers(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.APIKey = "0123456789abcdef" })
	if r := f.do(t, "GET", "/manage/status", "", nil); r.status != 401 || errCode(r) != "invalid_api_key" {
		t.Errorf("no key: %d %s", r.status, errCode(r))
	}
	ok := map[string]string{"Authorization": "Bearer 0123456789abcdef"}
	if r := f.do(t, "GET", "/manage/status", "", ok); r.status != 200 || r.body["api_key_required"] != true {
		t.Errorf("with key: %d %v", r.status, r.body)
	}
	// The key headers the API takes work here too.
	for _, h := range []map[string]string{{"X-Api-Key": "0123456789abcdef"}, {"Authorization": "bearer 0123456789abcdef"}} {
		if r := f.do(t, "GET", "/manage/status", "", h); r.status != 200 {
			t.Errorf("with %v: %d %v", h, r.status, r.body)
		}
	}
	if r := f.do(t, "GET", "/manage/status", "", map[string]string{"X-Api-Key": "wrong"}); r.status != 401 {
		t.Errorf("wrong X-Api-Key: %d", r.status)
	}

	// Another machine: RemoteAddr is not loopback.
	remote := func(h http.Handler, key string) int {
		req := httptest.NewRequest("GET", "/manage/status", nil)
		req.RemoteAddr = "192.0.2.7:5555"
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	open, _ := New(Options{Model: func() ModelStatus { return ModelStatus{} }})
	if code := remote(open, ""); code != 403 {
		t.Errorf("remote caller without a server key: %d", code)
	}
	keyed, _ := New(Options{Model: func() ModelStatus { return ModelStatus{} }, APIKey: "0123456789abcdef"})
	if code := remote(keyed, "0123456789abcdef"); code != 200 {
		t.Errorf("remote caller with the key: %d", code)
	}
}

func TestDownloadActions(t *testing.T) {
	f := newFixture(t, nil)
	for _, a := range []string{"start", "pause", "resume", "cancel"} {
		if r := f.do(t, "POST", "/manage/download/"+a, "{}", nil); r.status != 200 {
			t.Fatalf("%s: %d %v", a, r.status, r.body)
		}
	}
	if !slices.Equal(f.dl.actions, []Action{Start, Pause, Resume, Cancel}) {
		t.Errorf("actions %v", f.dl.actions)
	}
	if r := f.do(t, "POST", "/manage/download/pause", "{}", nil); r.status != 409 || errCode(r) != "download_pause_refused" {
		t.Errorf("pause while cancelled: %d %s", r.status, errCode(r))
	}
	if r := f.do(t, "POST", "/manage/download/explode", "{}", nil); r.status != 404 {
		t.Errorf("unknown action: %d", r.status)
	}
	if r := f.do(t, "GET", "/manage/download/start", "", nil); r.status != 404 || len(f.dl.actions) != 4 {
		t.Errorf("GET on an action: %d, actions %v", r.status, f.dl.actions)
	}
	if r := f.do(t, "GET", "/manage/download", "", nil); r.body["state"] != "cancelled" {
		t.Errorf("download status %v", r.body)
	}
}

func TestFitContextParameter(t *testing.T) {
	f := newFixture(t, nil)
	if r := f.do(t, "GET", "/manage/fit?context=32768", "", nil); r.status != 200 || r.body["context"] != 32768.0 {
		t.Fatalf("fit: %d %v", r.status, r.body)
	}
	f.do(t, "GET", "/manage/fit", "", nil)
	for _, q := range []string{"-1", "abc", "999999999"} {
		if r := f.do(t, "GET", "/manage/fit?context="+q, "", nil); r.status != 400 || errCode(r) != "bad_context" {
			t.Errorf("context=%s: %d", q, r.status)
		}
	}
	if !slices.Equal(f.fitAsked, []int{32768, 0}) {
		t.Errorf("fit asked for %v", f.fitAsked)
	}
	if r := f.do(t, "GET", "/manage/nothing", "", nil); r.status != 404 || errCode(r) != "not_found" {
		t.Errorf("unknown route: %d", r.status)
	}
}

func TestOpenSettingsRefusesDamagedFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"garbage": "{nope", "invalid": `{"port":70000,"preset":"thinking"}`} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenSettings(p); !errors.Is(err, ErrBadSettings) {
			t.Errorf("%s: %v, want ErrBadSettings", name, err)
		}
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without a model func succeeded")
	}
}

func TestDoctorRoute(t *testing.T) {
	var calls int
	busy := false
	f := newFixture(t, func(o *Options) {
		o.Doctor = func(ctx context.Context) (any, error) {
			calls++
			if busy {
				return nil, ErrDoctorBusy
			}
			return map[string]any{"report": map[string]any{"pass": false}, "text": "FAIL compile x.metal"}, nil
		}
	})
	if r := f.do(t, "GET", "/manage/status", "", nil); r.body["doctor"] != true {
		t.Errorf("status: %v", r.body)
	}
	if r := f.do(t, "POST", "/manage/doctor", "{}", nil); r.status != 200 || r.body["text"] != "FAIL compile x.metal" {
		t.Fatalf("doctor: %d %v", r.status, r.body)
	}
	busy = true
	if r := f.do(t, "POST", "/manage/doctor", "{}", nil); r.status != 409 || errCode(r) != "doctor_busy" {
		t.Errorf("busy doctor: %d %s", r.status, errCode(r))
	}
	if r := f.do(t, "POST", "/manage/doctor", `{"x":1}`, nil); r.status != 400 || errCode(r) != "bad_json" {
		t.Errorf("unknown field: %d %s", r.status, errCode(r))
	}
	if r := f.do(t, "GET", "/manage/doctor", "", nil); r.status == 200 {
		t.Errorf("GET ran the doctor")
	}
	if calls != 2 {
		t.Errorf("doctor called %d times, want 2", calls)
	}
	bare := newFixture(t, nil)
	if r := bare.do(t, "POST", "/manage/doctor", "{}", nil); r.status != 404 || errCode(r) != "not_available" {
		t.Errorf("doctor not wired: %d %s", r.status, errCode(r))
	}
	if r := bare.do(t, "GET", "/manage/status", "", nil); r.body["doctor"] != false {
		t.Errorf("bare status: %v", r.body)
	}
}

// TestServerErrorsKeepTheCauseInTheLog fails each route that can fail on
// the server's side with an error naming a private path: the client is
// told what failed, the log why.
func TestServerErrorsKeepTheCauseInTheLog(t *testing.T) {
	const cause = "open /Users/someone/.cache/petal/secret: permission denied"
	var logged strings.Builder
	settingsDir := filepath.Join(t.TempDir(), "petal")
	f := newFixture(t, func(o *Options) {
		o.Fit = func(int) (any, error) { return nil, errors.New(cause) }
		o.Doctor = func(context.Context) (any, error) { return nil, errors.New(cause) }
		st, err := OpenSettings(filepath.Join(settingsDir, "settings.json"))
		if err != nil {
			t.Fatal(err)
		}
		o.Settings = st
		o.Logger = log.New(&logged, "", 0)
	})
	// A folder where the settings file goes makes the save fail.
	if err := os.MkdirAll(filepath.Join(settingsDir, "settings.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(DefaultSettings())
	for _, c := range []struct{ method, path, body, code string }{
		{"GET", "/manage/fit", "", "fit_failed"},
		{"POST", "/manage/doctor", "{}", "doctor_failed"},
		{"PUT", "/manage/settings", string(body), "settings_not_saved"},
	} {
		logged.Reset()
		r := f.do(t, c.method, c.path, c.body, nil)
		msg, _ := r.body["error"].(map[string]any)["message"].(string)
		if r.status != 500 || errCode(r) != c.code || msg == "" || strings.Contains(msg, "/Users/") || strings.Contains(msg, "settings.json") {
			t.Errorf("%s %s: %d %q %q, want 500 %q without the cause", c.method, c.path, r.status, errCode(r), msg, c.code)
		}
		if logged.Len() == 0 {
			t.Errorf("%s %s: nothing logged", c.method, c.path)
		}
	}
}
