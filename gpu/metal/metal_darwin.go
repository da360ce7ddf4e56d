//go:build darwin && arm64

package metal

import (
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"unsafe"

	"petal/gpu"
	"petal/gpu/metal/mtl"
)

// maxAppleFamily is the newest family probed (Apple10 is M5).
const maxAppleFamily = 10

// Open takes the system default GPU; it refuses macOS older than 14 and
// GPUs older than Apple7.
func Open() (gpu.Device, error) {
	v, err := runningMacOS()
	if err != nil {
		return nil, err
	}
	if err := checkMacOS(v); err != nil {
		return nil, err
	}
	var d *Device
	mtl.WithPool(func() { d, err = open(mathFor(v)) })
	if err != nil {
		return nil, err
	}
	return d, nil
}

// runningMacOS reads the product version from the kernel (the same sysctl
// sw_vers reads; the syscall package calls it without cgo).
func runningMacOS() (macOSVersion, error) {
	s, err := syscall.Sysctl("kern.osproductversion")
	if err != nil {
		return macOSVersion{}, fmt.Errorf("%w: reading the macOS version: %v", gpu.ErrUnsupported, err)
	}
	return parseMacOSVersion(s)
}

func open(ms mathSettings) (*Device, error) {
	dev, err := mtl.CreateSystemDefaultDevice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", gpu.ErrUnsupported, err)
	}
	family := 0
	for n := maxAppleFamily; n >= 1; n-- {
		if dev.SupportsFamily(mtl.GPUFamilyApple1 + mtl.GPUFamily(n-1)) {
			family = n
			break
		}
	}
	name := dev.Name()
	if family < gpu.MinAppleFamily {
		dev.Release()
		return nil, fmt.Errorf("%w: %s is an Apple%d GPU; Petal needs Apple%d (M1) or newer", gpu.ErrUnsupported, name, family, gpu.MinAppleFamily)
	}
	q, err := dev.NewCommandQueue()
	if err != nil {
		dev.Release()
		return nil, err
	}
	info := gpu.Info{
		Name:                         name,
		AppleFamily:                  family,
		RecommendedMaxWorkingSetSize: dev.RecommendedMaxWorkingSetSize(),
		UnifiedMemory:                dev.HasUnifiedMemory(),
	}
	comp := &mtlCompiler{dev: dev, math: ms, libs: map[[32]byte]mtl.Library{}, bundle: bundledLibraries()}
	maxBuffer := int(min(dev.MaxBufferLength(), uint64(math.MaxInt)))
	return newDevice(darwinCalls, uintptr(dev.ID), uintptr(q.ID), info, os.Getpagesize(), maxBuffer, comp), nil
}

// mtlCompiler compiles MSL with Metal, or loads the .metallib macapp.sh
// bundled for a source (library.go), one library per source text.
type mtlCompiler struct {
	dev    mtl.Device
	math   mathSettings
	libs   map[[32]byte]mtl.Library
	bundle string // the bundle's library folder, "" outside Petal.app
	notes  []string
}

func (c *mtlCompiler) note(name, where string) {
	c.notes = append(c.notes, name+": "+where)
}

func (c *mtlCompiler) libraryNotes() []string { return slices.Clone(c.notes) }

// bundledLibraries is the library folder of the bundle this executable
// runs from, "" outside one.
func bundledLibraries() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return bundledLibraryDir(exe)
}

func (c *mtlCompiler) close() {
	for _, l := range c.libs {
		l.Release()
	}
}

// compileOptions are MSL 3.1 (bfloat needs it) with fast math off as
// c.math says (owned; release it).
func (c *mtlCompiler) compileOptions() mtl.CompileOptions {
	o := mtl.NewCompileOptions()
	o.SetLanguageVersion(mtl.LanguageVersion3_1)
	if c.math.safeMathMode {
		o.SetMathMode(mtl.MathModeSafe)
		o.SetMathFloatingPointFunctions(mtl.MathFloatingPointFunctionsPrecise)
	}
	if c.math.fastMathOff {
		o.SetFastMathEnabled(false)
	}
	return o
}

// pipeline compiles (or reuses) the library of src and specialises
// function with constants.
func (c *mtlCompiler) pipeline(src gpu.Source, function string, constants []gpu.Constant) (pso uintptr, maxThreads int, err error) {
	mtl.WithPool(func() { pso, maxThreads, err = c.compile(src, function, constants) })
	return pso, maxThreads, err
}

func (c *mtlCompiler) compile(src gpu.Source, function string, constants []gpu.Constant) (uintptr, int, error) {
	lib, err := c.library(src)
	if err != nil {
		return 0, 0, err
	}
	values := mtl.NewFunctionConstantValues()
	defer values.Release()
	// Metal copies each value in setConstantValue, so one slot per
	// constant only has to live through the call.
	for _, k := range constants {
		v := k.Bits
		var t mtl.DataType
		switch k.Type {
		case gpu.Bool:
			t = mtl.DataTypeBool
		case gpu.Int32:
			t = mtl.DataTypeInt
		case gpu.Uint32:
			t = mtl.DataTypeUInt
		case gpu.Float32:
			t = mtl.DataTypeFloat
		}
		// A bool is one byte; little-endian puts it first.
		values.SetConstantValue(unsafe.Pointer(&v), t, uint(k.Index))
	}
	fn, err := lib.NewFunctionWithConstants(function, values)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %s: %v", gpu.ErrCompile, src.Name, function, err)
	}
	defer fn.Release()
	pso, err := c.dev.NewComputePipelineStateWithFunction(fn)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %s: %v", gpu.ErrCompile, src.Name, function, err)
	}
	return uintptr(pso.ID), pso.MaxTotalThreadsPerThreadgroup(), nil
}

// library is src's library: the bundled one built from this very text
// when there is one (library.go), else compiled from source. Either way
// it notes where it came from.
func (c *mtlCompiler) library(src gpu.Source) (mtl.Library, error) {
	sum := sha256.Sum256([]byte(src.Text))
	if lib, ok := c.libs[sum]; ok {
		return lib, nil
	}
	path, why := pickLibrary(c.bundle, src)
	if path != "" {
		lib, err := c.dev.NewLibraryWithURL(path)
		if err == nil {
			c.libs[sum] = lib
			c.note(src.Name, why)
			return lib, nil
		}
		why = fmt.Sprintf("loading the bundled library failed: %v", err)
	}
	opts := c.compileOptions()
	lib, err := c.dev.NewLibraryWithSource(src.Text, opts)
	opts.Release()
	if err != nil {
		return mtl.Library{}, fmt.Errorf("%w: %s: %v", gpu.ErrCompile, src.Name, err)
	}
	c.libs[sum] = lib
	c.note(src.Name, "compiled from source: "+why)
	return lib, nil
}
