package metal

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"petal/gpu"
)

// Compiled libraries bundled with Petal.app, so a launch need not compile
// every kernel from source: scripts/macapp.sh compiles each kernel source
// (as the driver would get it, includes expanded: cmd/metallib writes them)
// with Apple's offline compiler into Contents/Resources/metallib, next to
// the sha256 of that source. The driver loads a bundled library only when
// the hash matches the text it is asked to compile, so an app whose
// kernels changed after the bundle was built, or a petal run outside the
// bundle, compiles from source as before.

// LibraryDir is the folder of the bundle's Contents/Resources holding the
// compiled libraries.
const LibraryDir = "metallib"

// LibraryFiles names, for the kernel source called name, its compiled
// library and the file holding the sha256 of the source it was built
// from: qmv.metal gives qmv.metallib and qmv.metal.sha256.
func LibraryFiles(name string) (lib, sum string) {
	return strings.TrimSuffix(name, ".metal") + ".metallib", name + ".sha256"
}

// SourceSum is the sha256 of a source text as a .sha256 file holds it:
// lowercase hex.
func SourceSum(text string) string {
	s := sha256.Sum256([]byte(text))
	return hex.EncodeToString(s[:])
}

// bundledLibraryDir is where the bundle holding exe keeps its libraries
// (exe in <app>/Contents/MacOS), or "" when exe is not in a bundle.
func bundledLibraryDir(exe string) string {
	macOS := filepath.Dir(exe)
	contents := filepath.Dir(macOS)
	if filepath.Base(macOS) != "MacOS" || filepath.Base(contents) != "Contents" {
		return ""
	}
	return filepath.Join(contents, "Resources", LibraryDir)
}

// pickLibrary says where src's library comes from: the path of the bundled
// library built from exactly src.Text, or "" and why it is compiled from
// source instead. dir is the bundle's library folder ("" outside one).
func pickLibrary(dir string, src gpu.Source) (path, why string) {
	if dir == "" {
		return "", "not running from Petal.app"
	}
	lib, sum := LibraryFiles(src.Name)
	b, err := os.ReadFile(filepath.Join(dir, sum))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Sprintf("the app bundles no library for %s", src.Name)
	}
	if err != nil {
		return "", fmt.Sprintf("reading the bundled hash: %v", err)
	}
	want := SourceSum(src.Text)
	if got := strings.TrimSpace(string(b)); got != want {
		return "", fmt.Sprintf("the bundled %s was built from another source (sha256 %.12s, this build's is %.12s)", lib, got, want)
	}
	path = filepath.Join(dir, lib)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Sprintf("the bundled library is missing: %v", err)
	}
	return path, "bundled " + lib + ", built from this source"
}
