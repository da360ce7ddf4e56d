//go:build darwin && arm64

package metal

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	comp := newLibraries(&mtlCompiler{dev: dev, math: ms}, bundledLibraries())
	maxBuffer := int(min(dev.MaxBufferLength(), uint64(math.MaxInt)))
	return newDevice(darwinCalls, uintptr(dev.ID), uintptr(q.ID), info, os.Getpagesize(), maxBuffer, comp), nil
}

// mtlCompiler makes libraries and pipelines with Metal (the librarian of
// library.go): it loads the .metallib macapp.sh bundled for a source or
// compiles MSL.
type mtlCompiler struct {
	dev  mtl.Device
	math mathSettings
}

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

func (c *mtlCompiler) release(lib uintptr) {
	mtl.WithPool(func() { mtl.LibraryOf(lib).Release() })
}

func (c *mtlCompiler) load(path string) (lib uintptr, err error) {
	mtl.WithPool(func() {
		var l mtl.Library
		l, err = c.dev.NewLibraryWithURL(path)
		lib = uintptr(l.ID)
	})
	return lib, err
}

func (c *mtlCompiler) compile(src gpu.Source) (lib uintptr, err error) {
	mtl.WithPool(func() {
		opts := c.compileOptions()
		defer opts.Release()
		var l mtl.Library
		l, err = c.dev.NewLibraryWithSource(src.Text, opts)
		lib = uintptr(l.ID)
	})
	return lib, err
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

// specialise makes the pipeline of function in lib with constants.
func (c *mtlCompiler) specialise(lib uintptr, function string, constants []gpu.Constant) (pso uintptr, maxThreads int, err error) {
	mtl.WithPool(func() { pso, maxThreads, err = c.pipeline(mtl.LibraryOf(lib), function, constants) })
	return pso, maxThreads, err
}

func (c *mtlCompiler) pipeline(lib mtl.Library, function string, constants []gpu.Constant) (uintptr, int, error) {
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
		return 0, 0, err
	}
	defer fn.Release()
	pso, err := c.dev.NewComputePipelineStateWithFunction(fn)
	if err != nil {
		return 0, 0, err
	}
	return uintptr(pso.ID), pso.MaxTotalThreadsPerThreadgroup(), nil
}
