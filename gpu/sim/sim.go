package sim

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"petal/gpu"
	"petal/gpu/msl"
)

//go:embed metal_compat.h
var compatHeader string

// Hazards the sim reports. A [HazardError] wraps one of them and
// gpu.ErrExecution.
var (
	ErrDivergence  = errors.New("sim: simd-group function not reached by every live lane")
	ErrDeadlock    = errors.New("sim: threadgroup barrier deadlock")
	ErrRace        = errors.New("sim: result depends on thread order (threadgroup memory race, uninitialised read or a shuffle from an inactive lane)")
	ErrOutOfBounds = errors.New("sim: memory fault (out-of-bounds access)")
	ErrTrap        = errors.New("sim: arithmetic trap (integer division by zero, or a shift by the operand's width or more)")
)

// HazardError says which kernel, threadgroup and thread went wrong, and how.
type HazardError struct {
	Kind   error // one of ErrDivergence, ErrDeadlock, ErrRace, ErrOutOfBounds, ErrTrap
	Kernel string
	Group  [3]uint32 // threadgroup position in the grid
	Thread int       // thread_index_in_threadgroup; -1 when not one thread's
	Detail string
}

func (e *HazardError) Error() string {
	if e.Thread < 0 {
		return fmt.Sprintf("%v: kernel %s: %s", e.Kind, e.Kernel, e.Detail)
	}
	return fmt.Sprintf("%v: kernel %s, threadgroup %v, thread %d: %s", e.Kind, e.Kernel, e.Group, e.Thread, e.Detail)
}

// Unwrap lets errors.Is match both the hazard and gpu.ErrExecution.
func (e *HazardError) Unwrap() []error { return []error{e.Kind, gpu.ErrExecution} }

// Options configure [Open]. The zero value is what tests want.
type Options struct {
	// CacheDir holds compiled kernel libraries, keyed by content hash.
	// Default: $PETAL_SIM_CACHE, else os.UserCacheDir()/petal/sim (the
	// temporary directory when there is no user cache directory).
	CacheDir string
	// Compiler is the C++ compiler. Default: $CXX, else c++, else g++.
	Compiler string
	// Workers is how many threadgroups run at once. Default: GOMAXPROCS.
	Workers int
	// Fast skips the race check, which runs every dispatch twice (threads in
	// index order, then in reverse, with different poison in threadgroup
	// memory) and compares every buffer it could have written, and the
	// shift check (shiftCheckFlags).
	Fast bool
}

// Compiler flags; part of each library's content hash.
//
// MSL 3.1 is C++14 (MSL 3.1 section 1.4), so kernels compile as C++14 with
// -pedantic-errors: a C++17 feature (if constexpr, structured bindings,
// inline variables, fold expressions, nested namespaces, init-statements in
// if/switch, hexadecimal float literals...) is an error, as it is for
// Apple's compiler. metal_compat.h itself is C++17 and is compiled as a
// system header, where those diagnostics are off.
//
// Arithmetic is IEEE binary32 as the Metal driver asks for it (gpu/doc.go):
// no -ffast-math or -ffinite-math-only, so NaN and infinity survive isnan
// and comparisons; -ffp-contract=off, so a*b+c rounds twice as Metal's safe
// math mode does and results do not depend on whether the host has FMA
// (x86-64 without -mfma never fuses, arm64 would). -fno-math-errno only
// stops libm from setting errno.
var cxxFlags = []string{"-std=c++14", "-pedantic-errors", "-O2", "-shared", "-fPIC", "-fno-strict-aliasing", "-fno-exceptions", "-fno-rtti", "-fno-math-errno", "-ffp-contract=off"}

// shiftCheckFlags are added where the device checks for hazards (not
// Options.Fast). A shift by the width of its (promoted) left operand or
// more, or by a negative amount, is undefined in MSL as in C++, and the CPU
// hides it: x86 takes the amount mod 32, so a kernel shifting by 32 gets
// its answer here and another on a GPU. -fsanitize=shift-exponent checks
// every shift whose amount is not a constant and traps (no runtime
// library) when it is out of range; the sim reports the trap as ErrTrap.
// The checks cost the sampler's radix passes 7-9% (BenchmarkSample at
// 248,320 logits), so a fast device, the product's sim backend among them,
// goes without.
var shiftCheckFlags = []string{"-fsanitize=shift-exponent", "-fsanitize-undefined-trap-on-error"}

// flags are the compiler flags of d's libraries, a new slice.
func (d *Device) flags() []string {
	f := append([]string{}, cxxFlags...)
	if !d.opts.Fast {
		f = append(f, shiftCheckFlags...)
	}
	return f
}

// compatHeaders are what kernels include: metal_compat.h and the
// petal/gpu/msl headers it includes.
var compatHeaders = append([]msl.Header{{Name: "metal_compat.h", Text: compatHeader}}, msl.Headers()...)

// compatDir is the directory the compat headers are written to, next to the
// sources that include them; its name holds their hash.
var compatDir = func() string {
	h := sha256.New()
	for _, hd := range compatHeaders {
		fmt.Fprintf(h, "%s\x00%s\x00", hd.Name, hd.Text)
	}
	return "metal_compat-" + hex.EncodeToString(h.Sum(nil)[:8])
}()

// maxCompileLog bounds the compiler output kept in an error.
const maxCompileLog = 8 << 10

// Device is the simulated GPU.
type Device struct {
	opts     Options
	compiler string

	mu      sync.Mutex
	libs    map[string]*library
	pipes   map[string]*pipeline
	tail    <-chan struct{} // closed when the last committed command buffer is done
	closed  bool
	workers chan *worker
	nwork   int
	all     []*worker
	bufs    map[uintptr]*buffer // by base address of the data, for fault reports

	// The race check's snapshots, reused by the one command buffer that
	// runs at a time.
	before, first [][]byte
}

var _ gpu.Device = (*Device)(nil)

// Open starts a simulated device. It checks that a C++ compiler exists; the
// first pipeline compiles a library.
func Open(opts Options) (*Device, error) {
	if opts.CacheDir == "" {
		opts.CacheDir = os.Getenv("PETAL_SIM_CACHE")
	}
	if opts.CacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		opts.CacheDir = filepath.Join(dir, "petal", "sim")
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: cache directory: %w", err)
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	cands := []string{opts.Compiler}
	if opts.Compiler == "" {
		cands = []string{os.Getenv("CXX"), "c++", "g++", "clang++"}
	}
	compiler := ""
	for _, c := range cands {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			compiler = p
			break
		}
	}
	if compiler == "" {
		return nil, fmt.Errorf("%w: sim needs a C++ compiler (tried %s)", gpu.ErrUnsupported, strings.Join(cands, ", "))
	}
	done := make(chan struct{})
	close(done)
	return &Device{
		opts:     opts,
		compiler: compiler,
		libs:     map[string]*library{},
		pipes:    map[string]*pipeline{},
		tail:     done,
		workers:  make(chan *worker, opts.Workers),
		bufs:     map[uintptr]*buffer{},
	}, nil
}

// Info describes the sim; its working-set size is the machine's memory.
func (d *Device) Info() gpu.Info {
	return gpu.Info{
		Name:                         fmt.Sprintf("Petal sim (%d workers, %s)", d.opts.Workers, filepath.Base(d.compiler)),
		RecommendedMaxWorkingSetSize: systemMemory(),
		UnifiedMemory:                true,
	}
}

// Close waits for committed work and frees the workers. Compiled libraries
// stay loaded for the life of the process: their thread-local threadgroup
// storage cannot be unloaded safely.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	tail := d.tail
	d.mu.Unlock()
	<-tail
	for _, w := range d.all {
		w.free()
	}
	d.all = nil
	return nil
}

// ---------------------------------------------------------------- pipelines

type library struct {
	handle  uintptr
	run     func(launch, worker unsafe.Pointer, workerBytes uint64, begin, end uint32, result unsafe.Pointer) int32
	abi     func(what int32) uint64
	kernels map[string]msl.KernelInfo
}

type pipeline struct {
	name       string
	maxThreads int
	entry      uintptr
	lib        *library
	dev        *Device
}

func (p *pipeline) Name() string    { return p.name }
func (p *pipeline) MaxThreads() int { return p.maxThreads }

// NewPipeline rewrites src for C++, compiles it (or finds it in the cache)
// and returns the named kernel.
func (d *Device) NewPipeline(src gpu.Source, function string, constants ...gpu.Constant) (gpu.Pipeline, error) {
	if err := gpu.CheckConstants(constants); err != nil {
		return nil, err
	}
	key := gpu.PipelineKey(src, function, constants)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, gpu.ErrClosed
	}
	if p, ok := d.pipes[key]; ok {
		return p, nil
	}
	rw, err := rewrite(src.Name, src.Text, constants)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", gpu.ErrCompile, err)
	}
	info, ok := rw.Kernels[function]
	if !ok {
		return nil, fmt.Errorf("%w: %s has no kernel %q", gpu.ErrCompile, src.Name, function)
	}
	lib, err := d.library(src.Name, rw)
	if err != nil {
		return nil, err
	}
	entry, err := purego.Dlsym(lib.handle, "petal_kernel_"+function)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", gpu.ErrCompile, function, err)
	}
	p := &pipeline{name: function, maxThreads: info.MaxThreads, entry: entry, lib: lib, dev: d}
	d.pipes[key] = p
	return p, nil
}

// library compiles the rewritten source once per content hash; d.mu is held.
func (d *Device) library(name string, rw *msl.Rewritten) (*library, error) {
	text := fmt.Sprintf("#include %q\n%s", compatDir+"/metal_compat.h", rw.Text)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", d.compiler, strings.Join(d.flags(), " "), compatDir, text)
	sum := hex.EncodeToString(h.Sum(nil))[:32]
	if lib, ok := d.libs[sum]; ok {
		return lib, nil
	}
	path := filepath.Join(d.opts.CacheDir, sum+".so")
	if _, err := os.Stat(path); err != nil {
		if err := d.compile(name, text, path); err != nil {
			return nil, err
		}
	}
	handle, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: loading %s: %v", gpu.ErrCompile, path, err)
	}
	lib := &library{handle: handle, kernels: rw.Kernels}
	purego.RegisterLibFunc(&lib.run, handle, "petal_run")
	purego.RegisterLibFunc(&lib.abi, handle, "petal_abi")
	if got, want := lib.abi(0), uint64(unsafe.Sizeof(cLaunch{})); got != want {
		return nil, fmt.Errorf("%w: launch layout mismatch (C %d bytes, Go %d)", gpu.ErrCompile, got, want)
	}
	if got, want := lib.abi(1), uint64(unsafe.Sizeof(cResult{})); got != want {
		return nil, fmt.Errorf("%w: result layout mismatch (C %d bytes, Go %d)", gpu.ErrCompile, got, want)
	}
	d.libs[sum] = lib
	return lib, nil
}

func (d *Device) compile(name, text, path string) error {
	if err := d.writeCompatHeaders(); err != nil {
		return err
	}
	// Unique temporary names: other processes (parallel go test packages)
	// may build the same library at the same time.
	src, err := os.CreateTemp(d.opts.CacheDir, "build-*.cpp")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	_, werr := src.WriteString(text)
	if cerr := src.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(src.Name())
		return fmt.Errorf("sim: %w", werr)
	}
	lib := strings.TrimSuffix(src.Name(), ".cpp") + ".so"
	defer os.Remove(lib)
	args := append(d.flags(), "-x", "c++", src.Name(), "-o", lib)
	out, err := exec.Command(d.compiler, args...).CombinedOutput()
	if err != nil {
		// Keep the source for inspection, named after the library.
		kept := strings.TrimSuffix(path, ".so") + ".cpp"
		os.Rename(src.Name(), kept)
		log := string(out)
		if len(log) > maxCompileLog {
			log = log[:maxCompileLog] + "\n..."
		}
		if rerr := cxx17Error(log); rerr != nil {
			return fmt.Errorf("%w: %w (C++ source kept at %s)\n%s", gpu.ErrCompile, rerr, kept, log)
		}
		return fmt.Errorf("%w: %s (C++ source kept at %s): %v\n%s", gpu.ErrCompile, name, kept, err, log)
	}
	os.Remove(src.Name())
	// Rename is atomic, so no process loads a half-written library.
	if err := os.Rename(lib, path); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// compilerErrorRE matches a compiler's error line: file:line:column: error: text.
var compilerErrorRE = regexp.MustCompile(`(?m)^([^:\n]+):(\d+):\d+: error: (.*)$`)

// cxx17Error turns the first error of a failed compile into a RuleError when
// it is -pedantic-errors refusing a C++17 feature (RuleCxx14).
func cxx17Error(log string) *RuleError {
	m := compilerErrorRE.FindStringSubmatch(log)
	if m == nil || !strings.Contains(strings.ToLower(m[3]), "c++17") {
		return nil
	}
	line, _ := strconv.Atoi(m[2])
	return &RuleError{File: m[1], Line: line, Rule: RuleCxx14, Detail: m[3]}
}

// writeCompatHeaders puts the compat headers in the cache directory, where
// the sources include them, each marked as a system header (see cxxFlags).
// Their directory's name holds their hash, so one already there holds the
// same headers; a new one is renamed into place whole, since other processes
// may compile at once.
func (d *Device) writeCompatHeaders() error {
	dir := filepath.Join(d.opts.CacheDir, compatDir)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(d.opts.CacheDir, "headers-*")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	for _, hd := range compatHeaders {
		if err := os.WriteFile(filepath.Join(tmp, hd.Name), []byte("#pragma GCC system_header\n"+hd.Text), 0o644); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("sim: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Stat(dir); serr == nil {
			return nil // another process put the same headers there first
		}
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// cLaunch mirrors petal::Launch in metal_compat.h (checked at load).
type cLaunch struct {
	entry    uintptr
	buffers  [gpu.MaxBindings]uintptr
	groups   [3]uint32
	threads  [3]uint32
	tglen    [gpu.MaxThreadgroupMemoryBindings]uint32
	schedule uint32
	poison   uint32
}

// cResult mirrors petal::Result.
type cResult struct {
	kind   int32
	line   int32
	group  [3]uint32
	thread uint32
	sig    int32
	_      int32
	addr   uint64
	msg    [256]byte
}

// Hazard kinds returned by petal_run.
const (
	hazNone = iota
	hazDivergence
	hazDeadlock
	hazFault
	hazSetup
)

// Poison bytes written over threadgroup memory before each threadgroup: a
// NaN pattern in the first run, a large finite one in the second, so a read
// of memory no thread wrote changes the result between the two runs.
const (
	poisonFirst  = 0xff
	poisonSecond = 0x7f
)
