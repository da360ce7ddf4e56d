package sim

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRewriteNeverPanics feeds the rewriter and the rule checks every
// truncation (in steps of a few bytes) of every kernel under testdata:
// broken source must give an error or C++, never a panic.
func TestRewriteNeverPanics(t *testing.T) {
	files, err := filepath.Glob("testdata/*.metal")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for cut := 0; cut <= len(b); cut += 5 {
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s cut at byte %d: panic %v", f, cut, p)
					}
				}()
				rewrite(filepath.Base(f), string(b[:cut]), nil)
			}()
		}
	}
}
