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
// (as the driver would get it, includes expanded: gpu/metal/metalsrc writes
// them) with Apple's offline compiler into Contents/Resources/metallib,
// next to the sha256 of that source. The driver loads a bundled library
// only when the hash matches the text it is asked to compile, so an app
// whose kernels changed after the bundle was built, or a petal run outside
// the bundle, compiles from source as before. A bundled library that loads
// but cannot make a kernel's pipeline (an offline toolchain's output this
// macOS refuses only then) is dropped for the source as well.

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

// librarian is what the library cache needs of Metal, each call in its own
// autorelease pool and every id it returns owned: the darwin build's makes
// MTLLibrary and pipeline objects, tests stand in.
type librarian interface {
	// load is newLibraryWithURL:error: of a bundled .metallib.
	load(path string) (lib uintptr, err error)
	// compile is newLibraryWithSource:options:error:.
	compile(src gpu.Source) (lib uintptr, err error)
	// specialise makes the pipeline of function in lib with constants,
	// and its maxTotalThreadsPerThreadgroup.
	specialise(lib uintptr, function string, constants []gpu.Constant) (pso uintptr, maxThreads int, err error)
	release(lib uintptr)
}

// libraries is the driver's compiler (device.go): one library per source
// text, the bundled one when pickLibrary finds it, else compiled from
// source.
type libraries struct {
	m      librarian
	bundle string // the bundle's library folder, "" outside Petal.app
	libs   map[[sha256.Size]byte]library
	notes  []libraryNote
}

type library struct {
	id      uintptr
	bundled bool
}

// libraryNote is where the library of one source came from.
type libraryNote struct{ name, where string }

func newLibraries(m librarian, bundle string) *libraries {
	return &libraries{m: m, bundle: bundle, libs: map[[sha256.Size]byte]library{}}
}

func (l *libraries) note(name, where string) {
	for i := range l.notes {
		if l.notes[i].name == name {
			l.notes[i].where = where
			return
		}
	}
	l.notes = append(l.notes, libraryNote{name, where})
}

func (l *libraries) libraryNotes() []string {
	out := make([]string, len(l.notes))
	for i, n := range l.notes {
		out[i] = n.name + ": " + n.where
	}
	return out
}

func (l *libraries) close() {
	for _, lib := range l.libs {
		l.m.release(lib.id)
	}
	clear(l.libs)
}

// pipeline specialises function of src's library. When a bundled library
// fails to, the source is compiled and tried instead: a library macOS
// loads may still be one its pipeline compiler refuses, and from source
// the kernel builds as it would without the bundle.
func (l *libraries) pipeline(src gpu.Source, function string, constants []gpu.Constant) (uintptr, int, error) {
	sum := sha256.Sum256([]byte(src.Text))
	lib, err := l.library(sum, src)
	if err != nil {
		return 0, 0, err
	}
	pso, maxThreads, err := l.m.specialise(lib.id, function, constants)
	if err == nil || !lib.bundled {
		return pso, maxThreads, wrapCompile(src, function, err)
	}
	fromSource, cerr := l.m.compile(src)
	if cerr != nil {
		return 0, 0, fmt.Errorf("%w: %s: the bundled library could not make %s (%v), nor could the source: %v", gpu.ErrCompile, src.Name, function, err, cerr)
	}
	// Pipelines made from the bundled library keep working without it.
	l.m.release(lib.id)
	l.libs[sum] = library{id: fromSource}
	l.note(src.Name, fmt.Sprintf("compiled from source: the bundled library could not make %s: %v", function, err))
	pso, maxThreads, err = l.m.specialise(fromSource, function, constants)
	return pso, maxThreads, wrapCompile(src, function, err)
}

func wrapCompile(src gpu.Source, function string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %s: %v", gpu.ErrCompile, src.Name, function, err)
}

// library is src's library (sum is its text's sha256): the bundled one
// built from this very text when there is one, else compiled from source.
// Either way it notes where it came from.
func (l *libraries) library(sum [sha256.Size]byte, src gpu.Source) (library, error) {
	if lib, ok := l.libs[sum]; ok {
		return lib, nil
	}
	path, why := pickLibrary(l.bundle, src)
	if path != "" {
		id, err := l.m.load(path)
		if err == nil {
			lib := library{id: id, bundled: true}
			l.libs[sum] = lib
			l.note(src.Name, why)
			return lib, nil
		}
		why = fmt.Sprintf("loading the bundled library failed: %v", err)
	}
	id, err := l.m.compile(src)
	if err != nil {
		return library{}, fmt.Errorf("%w: %s: %v", gpu.ErrCompile, src.Name, err)
	}
	lib := library{id: id}
	l.libs[sum] = lib
	l.note(src.Name, "compiled from source: "+why)
	return lib, nil
}
