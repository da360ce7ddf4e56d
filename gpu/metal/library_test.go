package metal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu"
)

func TestBundledLibraryDir(t *testing.T) {
	for exe, want := range map[string]string{
		"/Applications/Petal.app/Contents/MacOS/petal": "/Applications/Petal.app/Contents/Resources/metallib",
		"/usr/local/bin/petal":                         "",
		"/x/MacOS/petal":                               "",
	} {
		if got := bundledLibraryDir(exe); got != want {
			t.Errorf("bundledLibraryDir(%s) = %q, want %q", exe, got, want)
		}
	}
}

// TestPickLibrary: the bundled library is taken only when its hash file
// matches the exact text the driver is asked to compile.
func TestPickLibrary(t *testing.T) {
	dir := t.TempDir()
	src := gpu.Source{Name: "qmv.metal", Text: "kernel void k() {}\n"}
	lib, sum := LibraryFiles(src.Name)
	if lib != "qmv.metallib" || sum != "qmv.metal.sha256" {
		t.Fatalf("LibraryFiles = %s, %s", lib, sum)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, dir string, src gpu.Source, wantPath string, why string) {
		t.Helper()
		path, reason := pickLibrary(dir, src)
		if path != wantPath || !strings.Contains(reason, why) {
			t.Errorf("%s: pickLibrary = %q, %q; want %q and a reason saying %q", what, path, reason, wantPath, why)
		}
	}
	check("outside the bundle", "", src, "", "not running from Petal.app")
	check("no hash file", dir, src, "", "bundles no library for qmv.metal")
	write(sum, SourceSum(src.Text)+"\n") // sha256sum's line ends so
	check("hash but no library", dir, src, "", "missing")
	write(lib, "metallib bytes")
	check("match", dir, src, filepath.Join(dir, lib), "built from this source")
	changed := gpu.Source{Name: src.Name, Text: src.Text + "// edited\n"}
	check("mismatch", dir, changed, "", "built from another source")
	write(sum, strings.Repeat("0", 64))
	check("stale hash", dir, src, "", "built from another source")
}
