// Package contracttest keeps the JSON fixtures of the UI's contract test
// (frontend/src/lib/api/contract/): the Go tests that own a route make it
// answer and hand the bodies to Check, which compares them with the files
// (or rewrites them under -update); contract.test.ts checks the same files
// against the TypeScript types the UI reads them as.
package contracttest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite frontend/src/lib/api/contract/ from the servers' answers")

// Dir is the fixtures' folder, found from this file so any package's test can write there.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "src", "lib", "api", "contract")
}

// volatile are the fields whose values change from run to run (clocks,
// temporary folders); they are written as fixed values of the same JSON type.
// Byte counts (keys ending in _bytes) are too: they follow the engine's
// buffers, which the UI only formats, and would otherwise change the
// fixtures with every kernel change.
var volatile = map[string]any{
	"created":            1700000000,
	"created_at":         "2026-01-01T00:00:00Z",
	"started":            "2026-01-01T00:00:00Z",
	"next_attempt_at":    "2026-01-01T00:00:00Z",
	"seconds":            0.5,
	"dir":                "/models/demo",
	"system_fingerprint": "fp",
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if id, ok := e.(string); ok && k == "id" && strings.HasPrefix(id, "chatcmpl-") {
				x[k] = "chatcmpl-volatile"
				continue
			}
			if _, ok := e.(float64); ok && strings.HasSuffix(k, "_bytes") {
				x[k] = 1 << 20
				continue
			}
			if fixed, ok := volatile[k]; ok && e != nil {
				x[k] = fixed
				continue
			}
			x[k] = normalize(e)
		}
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	}
	return v
}

// Check compares each body (by file name, every name starting with prefix)
// with its fixture, after fixing the volatile fields, and fails on files
// with that prefix that no body claims; under -update it writes them.
func Check(t *testing.T, prefix string, bodies map[string][]byte) {
	t.Helper()
	dir := Dir()
	names := make([]string, 0, len(bodies))
	for n := range bodies {
		if !strings.HasPrefix(n, prefix) {
			t.Fatalf("fixture %s does not start with %s", n, prefix)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var v any
		if err := json.Unmarshal(bodies[n], &v); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", n, err, bodies[n])
		}
		want, err := json.MarshalIndent(normalize(v), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		p := filepath.Join(dir, n)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the server writes now; run `go test ./frontend/... ./internal/runtime -run Contract -update`, then `npm run check && npm test` in frontend/. It writes:\n%s", p, want)
		}
	}
	if *update {
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, prefix+"*.json"))
	for _, f := range files {
		if _, ok := bodies[filepath.Base(f)]; !ok {
			t.Errorf("%s is no longer written by any test: remove it", f)
		}
	}
}
