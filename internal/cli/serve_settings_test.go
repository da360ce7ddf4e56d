package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// startServe runs petal serve with args until the test ends and returns
// its base URL (without /v1) and what it printed before serving.
func startServe(t *testing.T, args ...string) (base string, printed []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, args, w)
		w.Close()
	}()
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			cancel()
			t.Fatalf("serve %v printed no serving line: %v", args, <-done)
		}
		printed = append(printed, line)
		if i := strings.Index(line, "http://"); strings.HasPrefix(line, "serving ") && i >= 0 {
			base = strings.TrimSuffix(strings.TrimSpace(line[i:]), "/v1")
			break
		}
	}
	// The lines after the serving one are read here, so serve never
	// blocks on the pipe.
	rest := make(chan []string)
	go func() {
		var more []string
		sc := bufio.NewScanner(br)
		for sc.Scan() {
			more = append(more, sc.Text())
		}
		rest <- more
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %v: %v", args, err)
		}
		<-rest
	})
	return base, printed
}

// call sends a request with key as the Bearer token ("" for none) and
// decodes the JSON answer.
func call(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, m
}

// TestServeAppliesSavedSettings: an API key saved on the Settings screen
// was never required under petal serve, which read no settings (issue 28
// B.1). A key saved through the settings route is required once serve
// starts again from that file, the settings reply says what is in force
// and from where, and a flag wins over the saved key.
func TestServeAppliesSavedSettings(t *testing.T) {
	dir := scriptedFolder(t, func(string) string { return "</think>\n\nok" })
	settings := filepath.Join(t.TempDir(), "settings.json")
	const key, flagKey = "saved-key-0123456789", "flag-key-0123456789"
	chat := `{"messages":[{"role":"user","content":"hi"}]}`

	// Saved through the running server's settings route.
	base, _ := startServe(t, "--model", dir, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings)
	code, reply := call(t, "PUT", base+"/manage/settings", "", `{"port":8080,"preset":"thinking","api_key":"`+key+`"}`)
	if code != 200 {
		t.Fatalf("PUT /manage/settings: %d %v", code, reply)
	}
	wantInForce := map[string]any{"value": "not set", "source": "default"}
	if got := reply["in_force"].(map[string]any)["api_key"]; !reflect.DeepEqual(got, wantInForce) || !reflect.DeepEqual(reply["restart_required"], []any{"api_key"}) {
		t.Errorf("after saving a key: in force %v, restart_required %v", got, reply["restart_required"])
	}
	if !reflect.DeepEqual(reply["overridden_by_flag"], []any{"port", "expose"}) {
		t.Errorf("overridden_by_flag %v, want the port and expose --addr sets", reply["overridden_by_flag"])
	}
	if strings.Contains(reply["in_force"].(map[string]any)["api_key"].(map[string]any)["value"].(string), key) {
		t.Error("the settings reply gives the key away")
	}

	// The same file under a new serve: the key is required.
	base, printed := startServe(t, "--model", dir, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings)
	if !strings.Contains(strings.Join(printed, ""), "using the saved settings in "+settings) {
		t.Errorf("serve did not say it applied the saved settings: %q", printed)
	}
	if code, reply := call(t, "POST", base+"/v1/chat/completions", "", chat); code != 401 {
		t.Errorf("no key: %d %v", code, reply)
	}
	if code, reply := call(t, "POST", base+"/v1/chat/completions", key, chat); code != 200 {
		t.Errorf("the saved key: %d %v", code, reply)
	}
	code, reply = call(t, "GET", base+"/manage/settings", key, "")
	inForce, _ := reply["in_force"].(map[string]any)
	if code != 200 || !reflect.DeepEqual(inForce["api_key"], map[string]any{"value": "set", "source": "settings"}) ||
		!reflect.DeepEqual(reply["restart_required"], []any{}) {
		t.Errorf("settings under the saved key: %d in force %v, restart_required %v", code, inForce, reply["restart_required"])
	}
	for _, f := range []string{"context_length", "port", "expose", "api_key", "allowed_origins"} {
		if _, ok := inForce[f].(map[string]any)["source"]; !ok {
			t.Errorf("in_force lacks %s: %v", f, inForce)
		}
	}

	// A flag wins over the saved key.
	base, _ = startServe(t, "--model", dir, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings, "--api-key", flagKey)
	if code, _ := call(t, "POST", base+"/v1/chat/completions", key, chat); code != 401 {
		t.Errorf("the saved key under --api-key: %d", code)
	}
	if code, reply := call(t, "POST", base+"/v1/chat/completions", flagKey, chat); code != 200 {
		t.Errorf("the flag's key: %d %v", code, reply)
	}
	_, reply = call(t, "GET", base+"/manage/settings", flagKey, "")
	if got := reply["in_force"].(map[string]any)["api_key"]; !reflect.DeepEqual(got, map[string]any{"value": "set", "source": "flag"}) ||
		!reflect.DeepEqual(reply["overridden_by_flag"], []any{"port", "expose", "api_key"}) || !reflect.DeepEqual(reply["restart_required"], []any{}) {
		t.Errorf("under --api-key: in force %v, overridden %v, restart %v", got, reply["overridden_by_flag"], reply["restart_required"])
	}
}

// TestServeRefusesKeysAndOriginsNoClientCanUse: the flags are checked as
// the Settings screen checks the same settings.
func TestServeRefusesKeysAndOriginsNoClientCanUse(t *testing.T) {
	settings := filepath.Join(t.TempDir(), "settings.json")
	for _, args := range [][]string{
		{"--api-key", "key\r\nX-Evil: 1"},
		{"--allow-origin", "http://*"},
		{"--allow-origin", "http://localhost:3000/"},
	} {
		err := serve(context.Background(), append([]string{"--model", "x", "--settings", settings}, args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestServeAppliesPrefixCacheSettings: the disk tier's folder and budget
// saved in the settings file are where petal serve keeps its snapshots,
// reported in force from the settings; --prefix-cache-dir and
// --prefix-cache-gb win over them; a saved 0 turns the tier off.
func TestServeAppliesPrefixCacheSettings(t *testing.T) {
	model := scriptedFolder(t, func(string) string { return "</think>\n\nok" })
	tmp := t.TempDir()
	settings := filepath.Join(tmp, "settings.json")
	saved, flagged := filepath.Join(tmp, "saved"), filepath.Join(tmp, "flagged")
	save := func(body string) {
		t.Helper()
		if err := os.WriteFile(settings, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tier := func(base string) (enabled bool, dir string, budget float64) {
		t.Helper()
		code, m := call(t, "GET", base+"/manage/prefix-cache", "", "")
		if code != 200 {
			t.Fatalf("GET /manage/prefix-cache: %d %v", code, m)
		}
		d, _ := m["dir"].(string)
		b, _ := m["budget_bytes"].(float64)
		return m["enabled"] == true, d, b
	}
	inForce := func(base string) map[string]any {
		t.Helper()
		_, m := call(t, "GET", base+"/manage/settings", "", "")
		f, _ := m["in_force"].(map[string]any)
		return map[string]any{"dir": f["prefix_cache_dir"], "gb": f["prefix_cache_gb"]}
	}
	args := []string{"--model", model, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings}

	save(`{"prefix_cache_dir":"` + saved + `","prefix_cache_gb":2}`)
	base, printed := startServe(t, args...)
	if on, dir, budget := tier(base); !on || dir != saved || budget != 2e9 {
		t.Errorf("saved: enabled %v in %q, budget %v", on, dir, budget)
	}
	want := map[string]any{"dir": map[string]any{"value": saved, "source": "settings"}, "gb": map[string]any{"value": 2.0, "source": "settings"}}
	if got := inForce(base); !reflect.DeepEqual(got, want) {
		t.Errorf("saved: in force %v, want %v", got, want)
	}
	if !strings.Contains(strings.Join(printed, ""), "prefix_cache_dir, prefix_cache_gb") {
		t.Errorf("serve did not say it applied the saved disk tier: %q", printed)
	}

	base, _ = startServe(t, append(args, "--prefix-cache-dir", flagged, "--prefix-cache-gb", "1")...)
	if on, dir, budget := tier(base); !on || dir != flagged || budget != 1e9 {
		t.Errorf("under the flags: enabled %v in %q, budget %v", on, dir, budget)
	}
	want = map[string]any{"dir": map[string]any{"value": flagged, "source": "flag"}, "gb": map[string]any{"value": 1.0, "source": "flag"}}
	if got := inForce(base); !reflect.DeepEqual(got, want) {
		t.Errorf("under the flags: in force %v, want %v", got, want)
	}

	save(`{"prefix_cache_dir":"` + saved + `","prefix_cache_gb":0}`)
	base, _ = startServe(t, args...)
	if on, _, _ := tier(base); on {
		t.Error("a saved prefix_cache_gb of 0 left the disk tier on")
	}
	// A folder named on the command line is relative to where serve
	// starts; the settings refuse one.
	save(`{"prefix_cache_dir":"relative"}`)
	if err := serve(context.Background(), args, io.Discard); err == nil || !strings.Contains(err.Error(), "prefix_cache_dir") {
		t.Errorf("a relative saved folder: %v", err)
	}
}

// TestCacheCommandUsesSavedFolder: petal cache looks where petal serve
// keeps the snapshots: the saved prefix_cache_dir unless --dir names one.
func TestCacheCommandUsesSavedFolder(t *testing.T) {
	tmp := t.TempDir()
	settings, saved := filepath.Join(tmp, "settings.json"), filepath.Join(tmp, "saved")
	if err := os.WriteFile(settings, []byte(`{"prefix_cache_dir":"`+saved+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Run([]string{"cache", "list", "--settings", settings}, &out); err != nil || !strings.Contains(out.String(), "in "+saved) {
		t.Errorf("cache list: %v %q", err, out.String())
	}
	out.Reset()
	other := filepath.Join(tmp, "other")
	if err := Run([]string{"cache", "list", "--settings", settings, "--dir", other}, &out); err != nil || !strings.Contains(out.String(), "in "+other) {
		t.Errorf("cache list --dir: %v %q", err, out.String())
	}
}
