package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"

	"petal/gpu"
)

// The CUDA driver API and NVRTC, loaded at run time with purego (no cgo),
// so the package builds everywhere and fails at Open where no NVIDIA driver
// is installed.

// result is a CUresult (driver) or nvrtcResult.
type result = uint32

// CUDA driver errors Petal names.
const (
	cudaSuccess  = 0
	cudaNoDevice = 100
)

// Device attributes (CUdevice_attribute).
const (
	attrMaxGridDimY            = 6
	attrMaxGridDimZ            = 7
	attrMultiprocessors        = 16
	attrComputeMajor           = 75
	attrComputeMinor           = 76
	attrManagedMemory          = 83
	attrConcurrentManagedAcces = 89
)

// Flags.
const (
	streamNonBlocking   = 1
	eventDisableTiming  = 2
	memAttachGlobal     = 1
	funcAttrMaxThreads  = 0
	funcAttrNumRegs     = 4
	funcAttrLocalBytes  = 3
	funcAttrStaticShmem = 1
)

type driverAPI struct {
	cuInit                    func(flags uint32) result
	cuDriverGetVersion        func(v *int32) result
	cuDeviceGetCount          func(n *int32) result
	cuDeviceGet               func(dev *int32, ordinal int32) result
	cuDeviceGetName           func(name *byte, n int32, dev int32) result
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) result
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) result
	cuDevicePrimaryCtxRelease func(dev int32) result
	cuCtxSetCurrent           func(ctx uintptr) result
	cuMemGetInfo              func(free, total *uint64) result
	cuMemAlloc                func(p *uintptr, n uint64) result
	cuMemAllocManaged         func(p *uintptr, n uint64, flags uint32) result
	cuMemFree                 func(p uintptr) result
	cuMemcpyHtoD              func(dst uintptr, src unsafe.Pointer, n uint64) result
	cuMemsetD8Async           func(dst uintptr, v uint8, n uint64, s uintptr) result
	cuMemcpyHtoDAsync         func(dst uintptr, src unsafe.Pointer, n uint64, s uintptr) result
	cuMemAllocAsync           func(p *uintptr, n uint64, s uintptr) result
	cuMemFreeAsync            func(p uintptr, s uintptr) result
	cuStreamCreate            func(s *uintptr, flags uint32) result
	cuStreamSynchronize       func(s uintptr) result
	cuStreamDestroy           func(s uintptr) result
	cuEventCreate             func(e *uintptr, flags uint32) result
	cuEventRecord             func(e, s uintptr) result
	cuEventSynchronize        func(e uintptr) result
	cuEventDestroy            func(e uintptr) result
	cuEventElapsedTime        func(ms *float32, start, end uintptr) result
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) result
	cuModuleGetFunction       func(f *uintptr, m uintptr, name string) result
	cuFuncGetAttribute        func(v *int32, attr int32, f uintptr) result
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, s uintptr, params, extra unsafe.Pointer) result
	cuGetErrorName            func(e result, s **byte) result

	cuGraphCreate                  func(g *uintptr, flags uint32) result
	cuGraphDestroy                 func(g uintptr) result
	cuGraphAddKernelNode           func(n *uintptr, g uintptr, deps *uintptr, ndeps uint64, p *kernelNodeParams) result
	cuGraphAddEventRecordNode      func(n *uintptr, g uintptr, deps *uintptr, ndeps uint64, ev uintptr) result
	cuGraphInstantiateWithFlags    func(e *uintptr, g uintptr, flags uint64) result
	cuGraphExecKernelNodeSetParams func(e, n uintptr, p *kernelNodeParams) result
	cuGraphExecDestroy             func(e uintptr) result
	cuGraphLaunch                  func(e, s uintptr) result
}

// kernelNodeParams is CUDA_KERNEL_NODE_PARAMS_v2 (72 bytes); drivers that
// bind the first version read only the fields up to extra.
type kernelNodeParams struct {
	fn                  uintptr
	gridX, gridY, gridZ uint32
	blkX, blkY, blkZ    uint32
	shmem               uint32
	params              unsafe.Pointer // void**: one pointer, to the Params
	// extra, kern (CUkernel) and ctx (CUcontext), left zero: fn is used,
	// in the current context.
	_ [3]uintptr
}

var _ [72 - unsafe.Sizeof(kernelNodeParams{})]byte
var _ [unsafe.Sizeof(kernelNodeParams{}) - 72]byte

type nvrtcAPI struct {
	nvrtcVersion           func(major, minor *int32) result
	nvrtcCreateProgram     func(prog *uintptr, src, name *byte, n int32, headers, names unsafe.Pointer) result
	nvrtcCompileProgram    func(prog uintptr, n int32, opts unsafe.Pointer) result
	nvrtcGetProgramLogSize func(prog uintptr, n *uint64) result
	nvrtcGetProgramLog     func(prog uintptr, log *byte) result
	nvrtcGetCUBINSize      func(prog uintptr, n *uint64) result
	nvrtcGetCUBIN          func(prog uintptr, out *byte) result
	nvrtcDestroyProgram    func(prog *uintptr) result
	nvrtcGetErrorString    func(r result) *byte
}

// bind fills each func field of api (a pointer to struct) from lib, by the
// field's name or the name with the _v2 suffix CUDA gives revised entry
// points, the _v2 first: cuda.h maps each name bound here to its _v2 where
// there is one (cuMemAlloc_v2, cuGraphAddKernelNode_v2, ...), with the
// signature the field declares. A name whose _v2 has another signature
// than the header's plain name (cuGraphExecUpdate_v2, cuGraphAddNode_v2)
// must not be bound through this rule.
func bind(lib uintptr, libName string, fields map[string]any) error {
	for name, fp := range fields {
		addr, err := purego.Dlsym(lib, name+"_v2")
		if err != nil {
			addr, err = purego.Dlsym(lib, name)
		}
		if err != nil {
			return fmt.Errorf("%w: %s has no %s", gpu.ErrUnsupported, libName, name)
		}
		purego.RegisterFunc(fp, addr)
	}
	return nil
}

// Names of the libraries, newest first; $PETAL_LIBCUDA and $PETAL_NVRTC
// name a file to use instead.
var (
	cudaNames  = []string{"libcuda.so.1", "libcuda.so"}
	nvrtcNames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}
	nvrtcDirs  = []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/sbsa-linux/lib"}
)

// ErrNoDriver is returned by Open where libcuda cannot be loaded (no NVIDIA
// driver installed, or not Linux); ErrNoDevice where the driver finds no
// GPU; ErrNoCompiler where libnvrtc cannot be loaded. Each wraps
// gpu.ErrUnsupported.
var (
	ErrNoDriver   = fmt.Errorf("%w: no NVIDIA driver (libcuda) found", gpu.ErrUnsupported)
	ErrNoDevice   = fmt.Errorf("%w: no NVIDIA GPU found", gpu.ErrUnsupported)
	ErrNoCompiler = fmt.Errorf("%w: no NVRTC (libnvrtc) found", gpu.ErrUnsupported)
)

func dlopenFirst(env string, names, dirs []string) (uintptr, string, error) {
	if p := os.Getenv(env); p != "" {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return 0, p, fmt.Errorf("$%s=%s: %v", env, p, err)
		}
		return h, p, nil
	}
	var errs []error
	cands := append([]string{}, names...)
	for _, d := range dirs {
		for _, n := range names {
			cands = append(cands, filepath.Join(d, n))
		}
	}
	for _, n := range cands {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err)
	}
	return 0, "", errors.Join(errs...)
}

func loadDriver() (*driverAPI, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w (CUDA needs Linux; this is %s)", ErrNoDriver, runtime.GOOS)
	}
	lib, _, err := dlopenFirst("PETAL_LIBCUDA", cudaNames, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	a := &driverAPI{}
	err = bind(lib, "libcuda", map[string]any{
		"cuInit": &a.cuInit, "cuDriverGetVersion": &a.cuDriverGetVersion,
		"cuDeviceGetCount": &a.cuDeviceGetCount, "cuDeviceGet": &a.cuDeviceGet,
		"cuDeviceGetName": &a.cuDeviceGetName, "cuDeviceGetAttribute": &a.cuDeviceGetAttribute,
		"cuDevicePrimaryCtxRetain": &a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRelease": &a.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent": &a.cuCtxSetCurrent, "cuMemGetInfo": &a.cuMemGetInfo,
		"cuMemAlloc": &a.cuMemAlloc, "cuMemAllocManaged": &a.cuMemAllocManaged, "cuMemFree": &a.cuMemFree,
		"cuMemcpyHtoD": &a.cuMemcpyHtoD, "cuMemsetD8Async": &a.cuMemsetD8Async, "cuMemcpyHtoDAsync": &a.cuMemcpyHtoDAsync,
		"cuMemAllocAsync": &a.cuMemAllocAsync, "cuMemFreeAsync": &a.cuMemFreeAsync,
		"cuStreamCreate": &a.cuStreamCreate, "cuStreamSynchronize": &a.cuStreamSynchronize, "cuStreamDestroy": &a.cuStreamDestroy,
		"cuEventCreate": &a.cuEventCreate, "cuEventRecord": &a.cuEventRecord, "cuEventSynchronize": &a.cuEventSynchronize,
		"cuEventDestroy": &a.cuEventDestroy, "cuEventElapsedTime": &a.cuEventElapsedTime,
		"cuModuleLoadData": &a.cuModuleLoadData, "cuModuleGetFunction": &a.cuModuleGetFunction,
		"cuFuncGetAttribute": &a.cuFuncGetAttribute, "cuLaunchKernel": &a.cuLaunchKernel, "cuGetErrorName": &a.cuGetErrorName,
		"cuGraphCreate": &a.cuGraphCreate, "cuGraphDestroy": &a.cuGraphDestroy,
		"cuGraphAddKernelNode": &a.cuGraphAddKernelNode, "cuGraphAddEventRecordNode": &a.cuGraphAddEventRecordNode,
		"cuGraphInstantiateWithFlags": &a.cuGraphInstantiateWithFlags, "cuGraphExecKernelNodeSetParams": &a.cuGraphExecKernelNodeSetParams,
		"cuGraphExecDestroy": &a.cuGraphExecDestroy, "cuGraphLaunch": &a.cuGraphLaunch,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

func loadNVRTC() (*nvrtcAPI, string, error) {
	lib, path, err := dlopenFirst("PETAL_NVRTC", nvrtcNames, nvrtcDirs)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrNoCompiler, err)
	}
	a := &nvrtcAPI{}
	err = bind(lib, "libnvrtc", map[string]any{
		"nvrtcVersion": &a.nvrtcVersion, "nvrtcCreateProgram": &a.nvrtcCreateProgram,
		"nvrtcCompileProgram": &a.nvrtcCompileProgram, "nvrtcGetProgramLogSize": &a.nvrtcGetProgramLogSize,
		"nvrtcGetProgramLog": &a.nvrtcGetProgramLog, "nvrtcGetCUBINSize": &a.nvrtcGetCUBINSize,
		"nvrtcGetCUBIN": &a.nvrtcGetCUBIN, "nvrtcDestroyProgram": &a.nvrtcDestroyProgram,
		"nvrtcGetErrorString": &a.nvrtcGetErrorString,
	})
	if err != nil {
		return nil, "", err
	}
	return a, path, nil
}

// cString reads a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cBytes is s NUL-terminated, for C.
func cBytes(s string) []byte { return append([]byte(s), 0) }

// check turns a CUresult into an error naming what was being done.
func (a *driverAPI) check(r result, what string) error {
	if r == cudaSuccess {
		return nil
	}
	var name *byte
	a.cuGetErrorName(r, &name)
	return &Error{Code: int(r), Name: cString(name), Op: what}
}

// Error is a failed CUDA driver call.
type Error struct {
	Code int
	Name string // CUDA_ERROR_...
	Op   string
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code) }
