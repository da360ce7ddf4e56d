package metal

import (
	"errors"
	"fmt"
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

// fakeLibrarian stands in for Metal's libraries: it counts what it makes
// and releases, and its pipelines fail for the libraries refuse names.
type fakeLibrarian struct {
	next            uintptr
	loads, compiles int
	live            map[uintptr]bool
	bundled         map[uintptr]bool
	refuse          func(lib uintptr, bundled bool) error
	compileErr      error
}

func (f *fakeLibrarian) make(bundled bool) uintptr {
	f.next++
	f.live[f.next] = true
	f.bundled[f.next] = bundled
	return f.next
}

func (f *fakeLibrarian) load(string) (uintptr, error) { f.loads++; return f.make(true), nil }

func (f *fakeLibrarian) compile(gpu.Source) (uintptr, error) {
	f.compiles++
	if f.compileErr != nil {
		return 0, f.compileErr
	}
	return f.make(false), nil
}

func (f *fakeLibrarian) specialise(lib uintptr, function string, _ []gpu.Constant) (uintptr, int, error) {
	if !f.live[lib] {
		panic(fmt.Sprintf("pipeline %s from library %d, which was released", function, lib))
	}
	if err := f.refuse(lib, f.bundled[lib]); err != nil {
		return 0, 0, err
	}
	return 1000 + lib, gpu.MaxThreadsPerThreadgroup, nil
}

func (f *fakeLibrarian) release(lib uintptr) {
	if !f.live[lib] {
		panic(fmt.Sprintf("library %d released twice", lib))
	}
	delete(f.live, lib)
}

// bundleOf writes a bundle folder holding src's library and its hash.
func bundleOf(t *testing.T, src gpu.Source) string {
	t.Helper()
	dir := t.TempDir()
	lib, sum := LibraryFiles(src.Name)
	for name, text := range map[string]string{lib: "metallib bytes", sum: SourceSum(src.Text)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBundledLibraryFallsBackToSource: a bundled library that loads but
// cannot make a pipeline (the offline compiler's output refused by this
// macOS's pipeline compiler) is replaced by the library compiled from
// source, once, and the pipeline made from that; a source that fails too
// is an error naming both failures.
func TestBundledLibraryFallsBackToSource(t *testing.T) {
	src := gpu.Source{Name: "qmv.metal", Text: "kernel void a() {}\nkernel void b() {}\n"}
	airRefused := errors.New("the AIR version is newer than this compiler reads")
	f := &fakeLibrarian{live: map[uintptr]bool{}, bundled: map[uintptr]bool{}, refuse: func(_ uintptr, bundled bool) error {
		if bundled {
			return airRefused
		}
		return nil
	}}
	l := newLibraries(f, bundleOf(t, src))
	pso, _, err := l.pipeline(src, "a", nil)
	if err != nil {
		t.Fatalf("a: %v, want the pipeline from source", err)
	}
	if f.bundled[pso-1000] {
		t.Errorf("a's pipeline came from the bundled library")
	}
	if _, _, err := l.pipeline(src, "b", nil); err != nil {
		t.Fatalf("b: %v", err)
	}
	if f.loads != 1 || f.compiles != 1 {
		t.Errorf("%d loads and %d compiles, want the bundle loaded once and the source compiled once", f.loads, f.compiles)
	}
	notes := l.libraryNotes()
	if len(notes) != 1 || !strings.Contains(notes[0], "compiled from source") || !strings.Contains(notes[0], airRefused.Error()) {
		t.Errorf("notes %q, want one saying the source was compiled and why", notes)
	}
	l.close()
	if len(f.live) != 0 {
		t.Errorf("libraries left unreleased: %v", f.live)
	}

	// The bundled library failing and the source failing too.
	f = &fakeLibrarian{live: map[uintptr]bool{}, bundled: map[uintptr]bool{}, compileErr: errors.New("syntax error"),
		refuse: func(uintptr, bool) error { return airRefused }}
	l = newLibraries(f, bundleOf(t, src))
	_, _, err = l.pipeline(src, "a", nil)
	if !errors.Is(err, gpu.ErrCompile) || !strings.Contains(err.Error(), airRefused.Error()) || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("both failing: %v, want gpu.ErrCompile with both errors", err)
	}
	l.close()
	if len(f.live) != 0 {
		t.Errorf("libraries left unreleased: %v", f.live)
	}
}

// TestLibrariesCompileOnce: a working bundled library is used as it is, a
// source library's failing pipeline is an error without a second compile,
// and each text's library is made once.
func TestLibrariesCompileOnce(t *testing.T) {
	src := gpu.Source{Name: "qmv.metal", Text: "kernel void a() {}\n"}
	noKernel := errors.New("no function b")
	f := &fakeLibrarian{live: map[uintptr]bool{}, bundled: map[uintptr]bool{}, refuse: func(uintptr, bool) error { return nil }}
	l := newLibraries(f, bundleOf(t, src))
	for range 2 {
		pso, _, err := l.pipeline(src, "a", nil)
		if err != nil || !f.bundled[pso-1000] {
			t.Fatalf("a: pipeline %d, %v; want it from the bundled library", pso, err)
		}
	}
	if f.loads != 1 || f.compiles != 0 {
		t.Errorf("%d loads and %d compiles, want the bundle loaded once and nothing compiled", f.loads, f.compiles)
	}
	l.close()

	f.refuse = func(uintptr, bool) error { return noKernel }
	l = newLibraries(f, "")
	if _, _, err := l.pipeline(src, "b", nil); !errors.Is(err, gpu.ErrCompile) || !strings.Contains(err.Error(), noKernel.Error()) {
		t.Errorf("b: %v, want gpu.ErrCompile saying %q", err, noKernel)
	}
	if f.compiles != 1 {
		t.Errorf("%d compiles of a source whose pipeline failed, want 1", f.compiles)
	}
	if notes := l.libraryNotes(); len(notes) != 1 || !strings.Contains(notes[0], "not running from Petal.app") {
		t.Errorf("notes %q", notes)
	}
	l.close()
	if len(f.live) != 0 {
		t.Errorf("libraries left unreleased: %v", f.live)
	}
}
