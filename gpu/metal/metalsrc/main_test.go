package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu/metal"
	"petal/shaders"
)

// TestWriteMatchesDriver: every kernel file is written as the driver is
// given it, and its hash file is what the driver accepts for that text.
func TestWriteMatchesDriver(t *testing.T) {
	dir := t.TempDir()
	if err := write(dir); err != nil {
		t.Fatal(err)
	}
	names := shaders.Names()
	if len(names) == 0 {
		t.Fatal("no kernel sources")
	}
	for _, name := range names {
		want, err := shaders.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: written text differs from shaders.Source (%v)", name, err)
		}
		if strings.Contains(want, "#include \"") {
			t.Errorf("%s: a local include is left unexpanded", name)
		}
		_, sumFile := metal.LibraryFiles(name)
		sum, err := os.ReadFile(filepath.Join(dir, sumFile))
		if err != nil || strings.TrimSpace(string(sum)) != metal.SourceSum(want) {
			t.Errorf("%s: hash file %q, want %s (%v)", name, sum, metal.SourceSum(want), err)
		}
	}
}
