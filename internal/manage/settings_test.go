package manage

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestKeysAClientCannotSendRefused: an api_key with CR/LF was saved, and
// after a restart no client could send it: every one was locked out (issue
// 28 A.6). Keys that a header cannot carry as they are (line breaks, other
// control characters, spaces, anything outside ASCII) are refused, for the
// access token too; every printable ASCII character is still accepted.
func TestKeysAClientCannotSendRefused(t *testing.T) {
	f := newFixture(t, nil)
	const good = "0123456789abcdef"
	for _, bad := range []string{good + "\r\n", good + "\n", "\r\n" + good, good + "\x00", good + "\x7f", good + "\t", good + " x", " " + good, good + "é", good + "\u202e"} {
		for _, field := range []string{"api_key", "access_token"} {
			body, _ := json.Marshal(map[string]any{"port": 8080, "preset": "thinking", field: bad})
			r := f.do(t, "PUT", "/manage/settings", string(body), nil)
			msg, _ := r.body["error"].(map[string]any)["message"].(string)
			if r.status != 400 || errCode(r) != "bad_settings" || !strings.Contains(msg, field) || !strings.Contains(msg, "HTTP header") {
				t.Errorf("%s %q: %d %v", field, bad, r.status, r.body)
			}
		}
	}
	if got := f.settings.Get(); got.APIKey != "" || got.AccessToken != "" {
		t.Fatalf("a refused key was saved: %+v", got)
	}
	var printable strings.Builder
	for c := byte('!'); c <= '~'; c++ {
		printable.WriteByte(c)
	}
	body, _ := json.Marshal(map[string]any{"port": 8080, "preset": "thinking", "api_key": printable.String(), "access_token": good})
	if r := f.do(t, "PUT", "/manage/settings", string(body), nil); r.status != 200 {
		t.Errorf("printable ASCII key: %d %v", r.status, r.body)
	}
}

// TestOriginsMustBeOrigins: "http://*" was accepted as an allowed origin
// (issue 28 A.6): it reads as "every page" but matches none, since origins
// are compared whole. Wildcards and other non-origins are refused with
// words that say what an origin is; real origins pass.
func TestOriginsMustBeOrigins(t *testing.T) {
	for _, o := range []string{"http://*", "https://*", "http://*.example.com", "*", "http://localhost:*", "http://local*host:3000",
		"http://localhost:3000/", "http://localhost:3000/app", "http://localhost:", "http://localhost:0", "http://localhost:70000",
		"ftp://example.com", "http://user@example.com", "http://example.com?x", "http://example.com#x", "http://exa_mple.com",
		"http://-example.com", "http://[::1", "null", "http://example..com", "http://" + strings.Repeat("a", 64) + ".com"} {
		if err := CheckOrigin(o); err == nil {
			t.Errorf("origin %q accepted", o)
		} else if !strings.Contains(err.Error(), "no wildcard") {
			t.Errorf("origin %q: %v", o, err)
		}
	}
	for _, o := range []string{"http://localhost:3000", "https://example.com", "http://127.0.0.1:8080", "http://[::1]:5173", "https://my-app.example.co.uk"} {
		if err := CheckOrigin(o); err != nil {
			t.Errorf("origin %q: %v", o, err)
		}
	}
	f := newFixture(t, nil)
	r := f.do(t, "PUT", "/manage/settings", `{"port":8080,"preset":"thinking","allowed_origins":["http://*"]}`, nil)
	if msg, _ := r.body["error"].(map[string]any)["message"].(string); r.status != 400 || !strings.Contains(msg, `"http://*"`) {
		t.Errorf("http://* through the route: %d %v", r.status, r.body)
	}
}

// TestFitWholeContextRange: the route takes every context from 1 to the
// model's 262,144 positions and hands it to the check as asked; above
// that, and for what is no count, it answers 400 with the limit in words.
func TestFitWholeContextRange(t *testing.T) {
	f := newFixture(t, nil)
	want := []int{1, 2, 4095, 4096, 32768, MaxContextLength - 1, MaxContextLength}
	for _, n := range want {
		if r := f.do(t, "GET", "/manage/fit?context="+strconv.Itoa(n), "", nil); r.status != 200 || r.body["context"] != float64(n) {
			t.Errorf("context=%d: %d %v", n, r.status, r.body)
		}
	}
	for q, words := range map[string]string{
		strconv.Itoa(MaxContextLength + 1): "over the model's 262144 positions",
		"9223372036854775807":              "over the model's 262144 positions",
		"9223372036854775808":              "0 (the default) to 262144",
		"-1":                               "0 (the default) to 262144",
		"1e3":                              "0 (the default) to 262144",
	} {
		r := f.do(t, "GET", "/manage/fit?context="+q, "", nil)
		if msg, _ := r.body["error"].(map[string]any)["message"].(string); r.status != 400 || !strings.Contains(msg, words) {
			t.Errorf("context=%s: %d %v", q, r.status, r.body)
		}
	}
	if len(f.fitAsked) != len(want) {
		t.Errorf("the check ran for %v, want %v", f.fitAsked, want)
	}
}

// TestApplyLaysFlagsOverSavedSettings: what a server starts with, and what
// the settings routes then say of it.
func TestApplyLaysFlagsOverSavedSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	token := "token-0123456789abc"
	if err := os.WriteFile(path, []byte(`{"port":9090,"expose":true,"access_token":"`+token+`","allowed_origins":["http://localhost:3000"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() *SettingsStore {
		st, err := OpenSettings(path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// Saved settings alone: every machine, the saved port, the access
	// token as the one key.
	st := open()
	a, err := st.Apply(Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr != "0.0.0.0:9090" || a.APIKey != token || !slices.Equal(a.AllowedOrigins, []string{"http://localhost:3000"}) || a.ContextLength != 0 {
		t.Errorf("applied %+v", a)
	}
	inForce, restart, pinned := st.state(Settings{Port: 9090})
	want := map[string]InForce{
		FieldContextLength:  {0, SourceDefault},
		FieldPort:           {9090, SourceSettings},
		FieldExpose:         {true, SourceSettings},
		FieldAPIKey:         {"set", SourceSettings},
		FieldAllowedOrigins: {[]string{"http://localhost:3000"}, SourceSettings},
		FieldPrefixCacheDir: {"", SourceDefault},
		FieldPrefixCacheGB:  {float64(AutoPrefixCacheGB), SourceDefault},
		FieldParallel:       {AutoParallel, SourceDefault},
		FieldSpeculative:    {"auto", SourceDefault},
	}
	if !reflect.DeepEqual(inForce, want) || len(restart) != 0 || len(pinned) != 0 {
		t.Errorf("in force %v, restart %v, pinned %v", inForce, restart, pinned)
	}

	// Flags win, each over its own setting only.
	st = open()
	addr, key, ctx, origins, diskDir, diskGB, parallel, speculative := "127.0.0.1:7000", "flag-key", 8192, []string{}, "/flag/prefix", 0.0, 3, "off"
	if a, err = st.Apply(Overrides{Addr: &addr, APIKey: &key, ContextLength: &ctx, AllowedOrigins: &origins,
		PrefixCacheDir: &diskDir, PrefixCacheGB: &diskGB, Parallel: &parallel, Speculative: &speculative}); err != nil {
		t.Fatal(err)
	}
	if a.Addr != addr || a.APIKey != key || len(a.AllowedOrigins) != 0 || a.ContextLength != ctx || a.PrefixCacheDir != diskDir || a.PrefixCacheGB != 0 || a.Parallel != parallel {
		t.Errorf("applied under flags %+v", a)
	}
	inForce, restart, pinned = st.state(Settings{Port: 7000})
	if inForce[FieldPort] != (InForce{7000, SourceFlag}) || inForce[FieldExpose] != (InForce{false, SourceFlag}) ||
		inForce[FieldAPIKey] != (InForce{"set", SourceFlag}) || inForce[FieldContextLength] != (InForce{8192, SourceFlag}) ||
		inForce[FieldPrefixCacheDir] != (InForce{diskDir, SourceFlag}) || inForce[FieldPrefixCacheGB] != (InForce{0.0, SourceFlag}) ||
		inForce[FieldParallel] != (InForce{parallel, SourceFlag}) || inForce[FieldSpeculative] != (InForce{"off", SourceFlag}) || a.Speculative != "off" {
		t.Errorf("in force under flags %v", inForce)
	}
	if len(restart) != 0 || !slices.Equal(pinned, serverFields) {
		t.Errorf("under flags: restart %v, pinned %v", restart, pinned)
	}

	// A saved change that no flag pins waits for a restart.
	st = open()
	if _, err := st.Apply(Overrides{Addr: &addr}); err != nil {
		t.Fatal(err)
	}
	s := st.Get()
	s.ContextLength, s.Port = 4096, 9999
	if err := st.Set(s); err != nil {
		t.Fatal(err)
	}
	if _, restart, _ = st.state(Settings{Port: 7000}); !slices.Equal(restart, []string{FieldContextLength}) {
		t.Errorf("restart %v, want only context_length (the port is --addr's)", restart)
	}
	if _, err := st.Apply(Overrides{Addr: ptr("no port")}); err == nil {
		t.Error("an address without a port was applied")
	}
}

func ptr[T any](v T) *T { return &v }

// TestPrefixCacheSettings: the disk tier's folder and budget are saved,
// checked, applied with a flag winning over each, and wait for a restart
// when changed.
func TestPrefixCacheSettings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "settings.json")
	ok := DefaultSettings()
	for _, s := range []Settings{
		{PrefixCacheDir: "relative/prefix", PrefixCacheGB: 1},
		{PrefixCacheDir: "./prefix", PrefixCacheGB: 1},
		{PrefixCacheGB: -2},
		{PrefixCacheGB: -0.5},
		{PrefixCacheGB: MaxPrefixCacheGB + 1},
		{PrefixCacheGB: math.Inf(1)},
		{PrefixCacheGB: math.NaN()},
	} {
		bad := ok
		bad.PrefixCacheDir, bad.PrefixCacheGB = s.PrefixCacheDir, s.PrefixCacheGB
		if err := bad.Validate(); !errors.Is(err, ErrBadSettings) || !strings.Contains(err.Error(), "prefix_cache") {
			t.Errorf("dir %q gb %v: %v", s.PrefixCacheDir, s.PrefixCacheGB, err)
		}
	}
	for _, gb := range []float64{AutoPrefixCacheGB, 0, 0.5, MaxPrefixCacheGB} {
		good := ok
		good.PrefixCacheDir, good.PrefixCacheGB = dir, gb
		if err := good.Validate(); err != nil {
			t.Errorf("gb %v: %v", gb, err)
		}
	}

	// A file without them is auto in the default folder.
	if err := os.WriteFile(path, []byte(`{"port":9090}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Get(); got.PrefixCacheDir != "" || got.PrefixCacheGB != AutoPrefixCacheGB {
		t.Errorf("absent: dir %q gb %v", got.PrefixCacheDir, got.PrefixCacheGB)
	}
	if err := os.WriteFile(path, []byte(`{"prefix_cache_dir":"prefix"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSettings(path); !errors.Is(err, ErrBadSettings) {
		t.Errorf("a relative folder in the file: %v", err)
	}

	// Saved: applied from the file; a flag wins over each.
	if err := os.WriteFile(path, []byte(`{"prefix_cache_dir":"`+dir+`","prefix_cache_gb":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err = OpenSettings(path); err != nil {
		t.Fatal(err)
	}
	a, err := st.Apply(Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	inForce, restart, _ := st.state(Settings{Port: DefaultPort})
	if a.PrefixCacheDir != dir || a.PrefixCacheGB != 3 || inForce[FieldPrefixCacheDir] != (InForce{dir, SourceSettings}) ||
		inForce[FieldPrefixCacheGB] != (InForce{3.0, SourceSettings}) || len(restart) != 0 {
		t.Errorf("saved: applied %q %v, in force %v, restart %v", a.PrefixCacheDir, a.PrefixCacheGB, inForce, restart)
	}
	s := st.Get()
	s.PrefixCacheDir, s.PrefixCacheGB = "", 0
	if err := st.Set(s); err != nil {
		t.Fatal(err)
	}
	if _, restart, _ = st.state(Settings{Port: DefaultPort}); !slices.Equal(restart, []string{FieldPrefixCacheDir, FieldPrefixCacheGB}) {
		t.Errorf("changed: restart %v", restart)
	}

	st, _ = OpenSettings(path)
	flagGB := 1.5
	if a, err = st.Apply(Overrides{PrefixCacheGB: &flagGB}); err != nil {
		t.Fatal(err)
	}
	inForce, _, pinned := st.state(Settings{Port: DefaultPort})
	if a.PrefixCacheGB != flagGB || inForce[FieldPrefixCacheGB] != (InForce{flagGB, SourceFlag}) ||
		inForce[FieldPrefixCacheDir] != (InForce{"", SourceSettings}) || !slices.Equal(pinned, []string{FieldPrefixCacheGB}) {
		t.Errorf("under --prefix-cache-gb: applied %v, in force %v, pinned %v", a.PrefixCacheGB, inForce, pinned)
	}
}

// TestPrefixCacheGBAbsentFromPUTIsAuto: a Settings screen that does not
// edit the disk tier sends no prefix_cache_gb; that keeps it auto, where
// decoding into zero settings turned the tier off at the next start.
func TestPrefixCacheGBAbsentFromPUTIsAuto(t *testing.T) {
	f := newFixture(t, nil)
	r := f.do(t, "PUT", "/manage/settings", `{"port":8080,"preset":"thinking"}`, nil)
	if r.status != 200 {
		t.Fatalf("PUT: %d %v", r.status, r.body)
	}
	if got := f.settings.Get().PrefixCacheGB; got != AutoPrefixCacheGB {
		t.Errorf("prefix_cache_gb %v after a PUT without it, want auto (%d)", got, AutoPrefixCacheGB)
	}
	if r = f.do(t, "PUT", "/manage/settings", `{"port":8080,"preset":"thinking","prefix_cache_gb":-3}`, nil); r.status != 400 {
		t.Errorf("prefix_cache_gb -3: %d %v", r.status, r.body)
	}
}

// TestParallelSettings: how many requests decode together is saved,
// checked (auto or 1 to MaxParallel), absent means auto, a flag wins over
// it, and a saved change waits for a restart.
func TestParallelSettings(t *testing.T) {
	ok := DefaultSettings()
	if ok.Parallel != AutoParallel {
		t.Errorf("default parallel %d, want auto (%d)", ok.Parallel, AutoParallel)
	}
	for _, n := range []int{-1, MaxParallel + 1, 1000} {
		bad := ok
		bad.Parallel = n
		if err := bad.Validate(); !errors.Is(err, ErrBadSettings) || !strings.Contains(err.Error(), "parallel") {
			t.Errorf("parallel %d: %v", n, err)
		}
	}
	for n := AutoParallel; n <= MaxParallel; n++ {
		good := ok
		good.Parallel = n
		if err := good.Validate(); err != nil {
			t.Errorf("parallel %d: %v", n, err)
		}
	}

	path := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(path, []byte(`{"parallel":9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSettings(path); !errors.Is(err, ErrBadSettings) {
		t.Errorf("parallel 9 in the file: %v", err)
	}
	if err := os.WriteFile(path, []byte(`{"parallel":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.Apply(Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	inForce, restart, _ := st.state(Settings{Port: DefaultPort})
	if a.Parallel != 2 || inForce[FieldParallel] != (InForce{2, SourceSettings}) || len(restart) != 0 {
		t.Errorf("saved 2: applied %d, in force %v, restart %v", a.Parallel, inForce[FieldParallel], restart)
	}
	s := st.Get()
	s.Parallel = AutoParallel
	if err := st.Set(s); err != nil {
		t.Fatal(err)
	}
	if _, restart, _ = st.state(Settings{Port: DefaultPort}); !slices.Equal(restart, []string{FieldParallel}) {
		t.Errorf("changed to auto: restart %v", restart)
	}

	st, _ = OpenSettings(path)
	flag := 1
	if a, err = st.Apply(Overrides{Parallel: &flag}); err != nil {
		t.Fatal(err)
	}
	inForce, _, pinned := st.state(Settings{Port: DefaultPort})
	if a.Parallel != 1 || inForce[FieldParallel] != (InForce{1, SourceFlag}) || !slices.Equal(pinned, []string{FieldParallel}) {
		t.Errorf("under --parallel 1: applied %d, in force %v, pinned %v", a.Parallel, inForce[FieldParallel], pinned)
	}
}

// TestParallelAbsentFromPUTIsAuto: a Settings screen that does not send
// parallel leaves it auto; one out of range is refused.
func TestParallelAbsentFromPUTIsAuto(t *testing.T) {
	f := newFixture(t, nil)
	r := f.do(t, "PUT", "/manage/settings", `{"port":8080,"preset":"thinking","parallel":3}`, nil)
	if r.status != 200 || f.settings.Get().Parallel != 3 {
		t.Fatalf("PUT parallel 3: %d %v, saved %d", r.status, r.body, f.settings.Get().Parallel)
	}
	if r = f.do(t, "PUT", "/manage/settings", `{"port":8080,"preset":"thinking"}`, nil); r.status != 200 {
		t.Fatalf("PUT: %d %v", r.status, r.body)
	}
	if got := f.settings.Get().Parallel; got != AutoParallel {
		t.Errorf("parallel %d after a PUT without it, want auto (%d)", got, AutoParallel)
	}
	if r = f.do(t, "PUT", "/manage/settings", `{"port":8080,"preset":"thinking","parallel":9}`, nil); r.status != 400 {
		t.Errorf("parallel 9: %d %v", r.status, r.body)
	}
}

// TestSpeculativeSetting: speculative is auto (also absent or ""), off or
// on; another value is refused; the saved value applies unless a flag
// says otherwise, and a saved change waits for a restart.
func TestSpeculativeSetting(t *testing.T) {
	for _, v := range []string{"", "auto", "off", "on"} {
		s := DefaultSettings()
		s.Speculative = v
		if err := s.Validate(); err != nil {
			t.Errorf("%q refused: %v", v, err)
		}
	}
	s := DefaultSettings()
	s.Speculative = "sometimes"
	if err := s.Validate(); !errors.Is(err, ErrBadSettings) {
		t.Errorf("sometimes: %v", err)
	}
	path := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(path, []byte(`{"speculative":"off"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.Apply(Overrides{})
	if err != nil || a.Speculative != "off" {
		t.Fatalf("applied %q, %v", a.Speculative, err)
	}
	inForce, _, _ := st.state(Settings{})
	if inForce[FieldSpeculative] != (InForce{"off", SourceSettings}) {
		t.Errorf("in force %v", inForce[FieldSpeculative])
	}
	next := st.Get()
	next.Speculative = "on"
	if err := st.Set(next); err != nil {
		t.Fatal(err)
	}
	if _, restart, _ := st.state(Settings{}); !slices.Contains(restart, FieldSpeculative) {
		t.Errorf("restart %v after saving on", restart)
	}
}
