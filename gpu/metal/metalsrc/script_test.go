package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"petal/gpu/metal"
	"petal/shaders"
)

// repo is the repository root, seen from this package's folder.
const repo = "../../.."

// fakeXcrun stands in for Apple's toolchain: it finds metal, logs the
// arguments of each compile (-c) and link, and does either by copying its
// input.
const fakeXcrun = `#!/usr/bin/env bash
shift 2 # -sdk macosx
[ "$1" = --find ] && exit 0
[ "$1" = metal ] || exit 1
shift
echo "$@" >>"$XCRUN_LOG"
while [ $# -gt 0 ]; do
	case $1 in
	-c) in=$2; shift ;;
	-o) out=$2; shift ;;
	-*) ;;
	*) in=$1 ;;
	esac
	shift
done
cp "$in" "$out"
`

// missingToolchain stands in for xcrun where Xcode 26 has no Metal
// Toolchain: xcrun finds metal, which cannot run.
const missingToolchain = `#!/usr/bin/env bash
shift 2 # -sdk macosx
[ "$1" = --find ] && exit 0
echo "error: error: cannot execute tool 'metal' due to missing Metal Toolchain; use: xcodebuild -downloadComponent MetalToolchain" >&2
exit 1
`

// runMacapp runs scripts/macapp.sh with a stand-in executable and xcrun,
// and returns the app's folder, the script's output and the metal
// invocations xcrun logged, one a line.
func runMacapp(t *testing.T, xcrun string) (app, out string, calls []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the bundler and the stand-in executable")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "xcrun"), []byte(xcrun), 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "petal")
	main := filepath.Join(dir, "main.go")
	if err := os.WriteFile(main, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", exe, main)
	build.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	log := filepath.Join(dir, "xcrun.log")
	cmd := exec.Command("bash", filepath.Join(repo, "scripts", "macapp.sh"), "--exe", exe, "--out", filepath.Join(dir, "out"))
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "XCRUN_LOG="+log)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("macapp.sh: %v\n%s", err, b)
	}
	if logged, err := os.ReadFile(log); err == nil {
		calls = strings.Split(strings.TrimSpace(string(logged)), "\n")
	}
	return filepath.Join(dir, "out", "Petal.app"), string(b), calls
}

// TestMacappBundlesLibraries: the bundle gets one library per kernel
// source, compiled at MSL 3.1 with fast math off and compiled and linked
// for macOS 14, next to the hash of the text the driver is given.
func TestMacappBundlesLibraries(t *testing.T) {
	app, out, calls := runMacapp(t, fakeXcrun)
	names := shaders.Names()
	if !strings.Contains(out, "compiled "+strconv.Itoa(len(names))+" kernel libraries") {
		t.Errorf("the script does not say it compiled %d libraries:\n%s", len(names), out)
	}
	libs := filepath.Join(app, "Contents", "Resources", metal.LibraryDir)
	for _, name := range names {
		text, err := shaders.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		lib, sum := metal.LibraryFiles(name)
		got, err := os.ReadFile(filepath.Join(libs, lib))
		if err != nil || string(got) != text { // the stand-in compiler copies
			t.Errorf("%s: not compiled from the driver's text (%v)", lib, err)
		}
		h, err := os.ReadFile(filepath.Join(libs, sum))
		if err != nil || strings.TrimSpace(string(h)) != metal.SourceSum(text) {
			t.Errorf("%s: %q, want %s (%v)", sum, h, metal.SourceSum(text), err)
		}
	}
	kernels := map[string]bool{}
	for _, name := range names {
		kernels[name] = true
	}
	compiles, links := 0, 0
	for _, l := range calls {
		// Both steps target macOS 14; the compile also fixes the language
		// and the math.
		flags := []string{"-mmacosx-version-min=14.0"}
		if f := strings.Fields(l); slices.Contains(f, "-c") {
			// Every compile has the flags; the kernels are counted
			// (the script may try the compiler on a kernel of its own
			// first).
			if i := slices.Index(f, "-c"); i+1 < len(f) && kernels[filepath.Base(f[i+1])] {
				compiles++
			}
			flags = append(flags, "-std=metal3.1", "-fno-fast-math")
		} else {
			links++
		}
		for _, flag := range flags {
			if !strings.Contains(" "+l+" ", " "+flag+" ") {
				t.Errorf("run without %s: metal %s", flag, l)
			}
		}
	}
	if compiles != len(names) || links != len(names) {
		t.Errorf("%d compiles and %d links for %d sources", compiles, links, len(names))
	}
}

// TestMacappSkipsMissingToolchain: where xcrun finds metal but it cannot
// run (Xcode 26 without the Metal Toolchain), the app is built without
// libraries, saying how to get the compiler, instead of the build failing.
func TestMacappSkipsMissingToolchain(t *testing.T) {
	app, out, _ := runMacapp(t, missingToolchain)
	if !strings.Contains(out, "downloadComponent MetalToolchain") || !strings.Contains(out, "no kernel libraries are bundled") {
		t.Errorf("the script does not say the libraries were skipped and why:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(app, "Contents", "Resources", metal.LibraryDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a library folder was made without a compiler: %v", err)
	}
}
