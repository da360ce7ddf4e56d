package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"petal/internal/manage"
	"petal/internal/service"
)

// TestServeAppliesParallel: the settings' parallel is how many requests
// petal serve decodes together, reported in force from the settings, in
// the Setup screen's status and on the serving line; --parallel wins over
// it; left out on a backend without a fit check, one at a time.
func TestServeAppliesParallel(t *testing.T) {
	model := scriptedFolder(t, func(string) string { return "</think>\n\nok" })
	settings := filepath.Join(t.TempDir(), "settings.json")
	save := func(body string) {
		t.Helper()
		if err := os.WriteFile(settings, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	state := func(base string) (inForce any, status []any) {
		t.Helper()
		_, m := call(t, "GET", base+"/manage/settings", "", "")
		f, _ := m["in_force"].(map[string]any)
		_, st := call(t, "GET", base+"/manage/status", "", "")
		model, _ := st["model"].(map[string]any)
		return f["parallel"], []any{model["requests_running"], model["parallel"]}
	}
	serving := func(printed []string) string {
		return printed[len(printed)-1]
	}
	args := []string{"--model", model, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings}

	save(`{"parallel":3}`)
	base, printed := startServe(t, args...)
	f, st := state(base)
	if want := map[string]any{"value": 3.0, "source": "settings"}; !reflect.DeepEqual(f, want) || !reflect.DeepEqual(st, []any{0.0, 3.0}) {
		t.Errorf("saved 3: in force %v, status running and parallel %v", f, st)
	}
	if line := serving(printed); !strings.Contains(line, "decoding up to 3 requests together") {
		t.Errorf("saved 3: serving line %q", line)
	}
	if !strings.Contains(strings.Join(printed, ""), "for parallel") {
		t.Errorf("serve did not say it applied the saved parallel: %q", printed)
	}

	base, printed = startServe(t, append(args, "--parallel", "2")...)
	f, st = state(base)
	if want := map[string]any{"value": 2.0, "source": "flag"}; !reflect.DeepEqual(f, want) || !reflect.DeepEqual(st, []any{0.0, 2.0}) {
		t.Errorf("--parallel 2: in force %v, status %v", f, st)
	}
	if line := serving(printed); !strings.Contains(line, "decoding up to 2 requests together") {
		t.Errorf("--parallel 2: serving line %q", line)
	}

	save(`{}`)
	base, printed = startServe(t, args...)
	if f, st = state(base); !reflect.DeepEqual(f, map[string]any{"value": 0.0, "source": "default"}) || !reflect.DeepEqual(st, []any{0.0, 1.0}) {
		t.Errorf("auto on an unchecked backend: in force %v, status %v", f, st)
	}
	if line := serving(printed); !strings.Contains(line, "one request at a time") {
		t.Errorf("one at a time: serving line %q", line)
	}
}

// TestServeRefusesParallel: --parallel outside 1..8 (or not a number) is
// refused before anything loads, naming the range.
func TestServeRefusesParallel(t *testing.T) {
	model := scriptedFolder(t, func(string) string { return "ok" })
	settings := filepath.Join(t.TempDir(), "settings.json")
	for _, v := range []string{"0", "-1", "9", "four", "", "2.5"} {
		err := serve(context.Background(), []string{"--model", model, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings, "--parallel", v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--parallel") || !strings.Contains(err.Error(), "from 1 to 8") {
			t.Errorf("--parallel %q: %v", v, err)
		}
	}
	if err := os.WriteFile(settings, []byte(`{"parallel":12}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := serve(context.Background(), []string{"--model", model, "--backend", "scripted", "--settings", settings}, io.Discard); err == nil || !strings.Contains(err.Error(), "parallel") {
		t.Errorf("a saved parallel of 12: %v", err)
	}
}

// TestParallelLimitsAgree: the settings' bound is the service's, which
// the manage package does not import.
func TestParallelLimitsAgree(t *testing.T) {
	if manage.MaxParallel != service.MaxParallel {
		t.Errorf("manage.MaxParallel %d, service.MaxParallel %d", manage.MaxParallel, service.MaxParallel)
	}
}
