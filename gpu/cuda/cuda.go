package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"petal/gpu"
)

// Options configure [Open]. The zero value opens the first GPU.
type Options struct {
	// Ordinal is the CUDA device to open (after CUDA_VISIBLE_DEVICES).
	Ordinal int
	// CacheDir holds compiled cubins, keyed by content hash. Default:
	// $PETAL_CUDA_CACHE, else os.UserCacheDir()/petal/cuda.
	CacheDir string
}

// Device is one NVIDIA GPU behind gpu.Device.
type Device struct {
	api    *driverAPI
	nv     *compiler
	dev    int32
	ctx    uintptr
	stream uintptr // every command buffer, in commit order
	aux    uintptr // zeroing new buffers, off the command stream
	name   string
	maxY   int
	maxZ   int

	prof *profile // nil unless $PETAL_CUDA_PROFILE=1

	graphs *graphCache // guarded by mu

	mu     sync.Mutex
	mods   map[string]uintptr // module by cubin cache key
	pipes  map[string]*pipeline
	closed bool
}

var (
	_ gpu.Device   = (*Device)(nil)
	_ gpu.Uploader = (*Device)(nil)
)

// Open loads libcuda and libnvrtc, and opens the GPU: ErrNoDriver,
// ErrNoDevice or ErrNoCompiler say what is missing.
func Open(opts Options) (*Device, error) {
	api, err := loadDriver()
	if err != nil {
		return nil, err
	}
	if r := api.cuInit(0); r != cudaSuccess {
		if r == cudaNoDevice {
			return nil, ErrNoDevice
		}
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, api.check(r, "cuInit"))
	}
	var n int32
	if err := api.check(api.cuDeviceGetCount(&n), "cuDeviceGetCount"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	if opts.Ordinal < 0 || int(n) <= opts.Ordinal {
		return nil, fmt.Errorf("%w: device %d asked for, %d present", ErrNoDevice, opts.Ordinal, n)
	}
	graphs, err := newGraphCache()
	if err != nil {
		return nil, err
	}
	d := &Device{api: api, mods: map[string]uintptr{}, pipes: map[string]*pipeline{}, prof: newProfile(), graphs: graphs}
	if err := api.check(api.cuDeviceGet(&d.dev, int32(opts.Ordinal)), "cuDeviceGet"); err != nil {
		return nil, err
	}
	attr := func(a int32) int {
		var v int32
		api.cuDeviceGetAttribute(&v, a, d.dev)
		return int(v)
	}
	major, minor := attr(attrComputeMajor), attr(attrComputeMinor)
	// Volta and later: independent thread scheduling (the *_sync warp
	// intrinsics), 64 KiB of shared memory.
	if major < 7 {
		return nil, fmt.Errorf("%w: compute capability %d.%d, Petal needs 7.0 or later", gpu.ErrUnsupported, major, minor)
	}
	// Contents is managed memory, which the CPU may touch while kernels
	// run only with concurrent managed access (Linux, Pascal and later).
	if attr(attrManagedMemory) == 0 || attr(attrConcurrentManagedAcces) == 0 {
		return nil, fmt.Errorf("%w: the GPU has no concurrent managed memory access", gpu.ErrUnsupported)
	}
	d.maxY, d.maxZ = attr(attrMaxGridDimY), attr(attrMaxGridDimZ)
	var name [256]byte
	api.cuDeviceGetName(&name[0], int32(len(name)), d.dev)
	var ver int32
	api.cuDriverGetVersion(&ver)
	d.name = fmt.Sprintf("%s (sm_%d%d, %d SMs, CUDA driver %d.%d)", cString(&name[0]), major, minor, attr(attrMultiprocessors), ver/1000, ver%1000/10)

	if opts.CacheDir == "" {
		opts.CacheDir = os.Getenv("PETAL_CUDA_CACHE")
	}
	if opts.CacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		opts.CacheDir = filepath.Join(dir, "petal", "cuda")
	}
	if d.nv, err = newCompiler(fmt.Sprintf("sm_%d%d", major, minor), opts.CacheDir); err != nil {
		return nil, err
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := api.check(api.cuDevicePrimaryCtxRetain(&d.ctx, d.dev), "cuDevicePrimaryCtxRetain"); err != nil {
		return nil, err
	}
	if err := api.check(api.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent"); err != nil {
		api.cuDevicePrimaryCtxRelease(d.dev)
		return nil, err
	}
	for _, s := range []*uintptr{&d.stream, &d.aux} {
		if err := api.check(api.cuStreamCreate(s, streamNonBlocking), "cuStreamCreate"); err != nil {
			api.cuDevicePrimaryCtxRelease(d.dev)
			return nil, err
		}
	}
	return d, nil
}

// enter makes the device's context current on this goroutine's OS thread,
// which it locks; the caller defers runtime.UnlockOSThread.
func (d *Device) enter() {
	runtime.LockOSThread()
	d.api.cuCtxSetCurrent(d.ctx)
}

// Info reports the card, and as the working set the memory free on it now,
// which the memory-fit check compares the model with.
func (d *Device) Info() gpu.Info {
	d.enter()
	defer runtime.UnlockOSThread()
	var free, total uint64
	d.api.cuMemGetInfo(&free, &total)
	return gpu.Info{Name: d.name, RecommendedMaxWorkingSetSize: free}
}

// Close waits for committed work and releases the context.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.enter()
	defer runtime.UnlockOSThread()
	err := d.api.check(d.api.cuStreamSynchronize(d.stream), "closing")
	d.graphs.close(d)
	if d.prof != nil {
		d.prof.print(os.Stderr, d)
	}
	d.api.cuStreamDestroy(d.stream)
	d.api.cuStreamDestroy(d.aux)
	d.api.cuDevicePrimaryCtxRelease(d.dev)
	return err
}

// ---------------------------------------------------------------- buffers

// buffer is managed memory (NewBuffer), which the CPU reads and writes in
// place and the driver migrates to the GPU when a kernel touches it, or
// device memory holding a copy of a wrapped region that kernels only read.
type buffer struct {
	dev  *Device
	ptr  uintptr
	n    int
	host []byte // Contents
	once sync.Once
}

func (b *buffer) Len() int            { return b.n }
func (b *buffer) Contents() []byte    { return b.host }
func (b *buffer) addr(off int) uint64 { return uint64(b.ptr) + uint64(off) }

func (b *buffer) Release() {
	b.once.Do(func() {
		d := b.dev
		d.enter()
		defer runtime.UnlockOSThread()
		// cuMemFree waits for the kernels that may still use it.
		d.api.cuMemFree(b.ptr)
		b.host, b.ptr = nil, 0
	})
}

// NewBuffer returns zeroed managed memory. It refuses more than the card has
// free: managed memory beyond that would page between host and GPU.
func (d *Device) NewBuffer(length int) (gpu.Buffer, error) {
	if length <= 0 {
		return nil, fmt.Errorf("%w: buffer of %d bytes", gpu.ErrInvalid, length)
	}
	d.enter()
	defer runtime.UnlockOSThread()
	var free, total uint64
	d.api.cuMemGetInfo(&free, &total)
	if uint64(length) > free {
		return nil, fmt.Errorf("%w: a %d-byte buffer, %d bytes free on the GPU", gpu.ErrInvalid, length, free)
	}
	var p uintptr
	if err := d.api.check(d.api.cuMemAllocManaged(&p, uint64(length), memAttachGlobal), fmt.Sprintf("allocating %d bytes", length)); err != nil {
		return nil, err
	}
	// Zeroed by the GPU, so its pages start there.
	if err := d.api.check(d.api.cuMemsetD8Async(p, 0, uint64(length), d.aux), "zeroing a buffer"); err != nil {
		d.api.cuMemFree(p)
		return nil, err
	}
	if err := d.api.check(d.api.cuStreamSynchronize(d.aux), "zeroing a buffer"); err != nil {
		d.api.cuMemFree(p)
		return nil, err
	}
	return &buffer{dev: d, ptr: p, n: length, host: unsafe.Slice((*byte)(unsafePointer(p)), length)}, nil
}

// WrapNoCopy copies mem to device memory once (weights go to the GPU at
// load); Contents stays mem, which kernels only read.
func (d *Device) WrapNoCopy(mem []byte) (gpu.Buffer, error) {
	if err := gpu.CheckNoCopy(mem); err != nil {
		return nil, err
	}
	return d.Upload(mem)
}

// Upload is WrapNoCopy for mem anywhere: a misaligned tensor's bytes in a
// shard go to device memory of their own without a host copy.
func (d *Device) Upload(mem []byte) (gpu.Buffer, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("%w: uploading nothing", gpu.ErrInvalid)
	}
	d.enter()
	defer runtime.UnlockOSThread()
	var p uintptr
	if err := d.api.check(d.api.cuMemAlloc(&p, uint64(len(mem))), fmt.Sprintf("allocating %d bytes for weights", len(mem))); err != nil {
		return nil, err
	}
	if err := d.api.check(d.api.cuMemcpyHtoD(p, unsafe.Pointer(&mem[0]), uint64(len(mem))), "copying weights"); err != nil {
		d.api.cuMemFree(p)
		return nil, err
	}
	return &buffer{dev: d, ptr: p, n: len(mem), host: mem}, nil
}

// ---------------------------------------------------------------- pipelines

type pipeline struct {
	name       string
	fn         uintptr
	maxThreads int
	dev        *Device
}

func (p *pipeline) Name() string    { return p.name }
func (p *pipeline) MaxThreads() int { return p.maxThreads }

// NewPipeline rewrites src for cuda_compat.h with an entry point for
// function alone, compiles it with NVRTC for this GPU (or takes the cubin
// from the cache) and loads it.
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
	rw, err := rewrite(src.Name, src.Text, function, constants)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", gpu.ErrCompile, err)
	}
	info, ok := rw.Kernels[function]
	if !ok {
		return nil, fmt.Errorf("%w: %s has no kernel %q", gpu.ErrCompile, src.Name, function)
	}
	cubin, err := d.nv.cubin(src.Name, rw.Text)
	if err != nil {
		return nil, err
	}
	d.enter()
	defer runtime.UnlockOSThread()
	var mod uintptr
	if err := d.api.check(d.api.cuModuleLoadData(&mod, unsafe.Pointer(&cubin[0])), "loading "+src.Name); err != nil {
		return nil, fmt.Errorf("%w: %w", gpu.ErrCompile, err)
	}
	var fn uintptr
	if err := d.api.check(d.api.cuModuleGetFunction(&fn, mod, "petal_kernel_"+function), "finding "+function); err != nil {
		return nil, fmt.Errorf("%w: %w", gpu.ErrCompile, err)
	}
	// The kernel's own bound, lowered to what the function can launch with
	// (its registers); where the driver does not say, the bound alone.
	maxThreads := info.MaxThreads
	var maxT int32
	if d.api.cuFuncGetAttribute(&maxT, funcAttrMaxThreads, fn) == cudaSuccess && maxT > 0 {
		maxThreads = min(maxThreads, int(maxT))
	}
	p := &pipeline{name: function, fn: fn, maxThreads: maxThreads, dev: d}
	d.pipes[key] = p
	return p, nil
}

// describe is what NVRTC made of fn: registers and local (spilled) bytes
// per thread, static shared bytes; the context is current.
func (d *Device) describe(fn uintptr) string {
	var regs, local, shared int32
	d.api.cuFuncGetAttribute(&regs, funcAttrNumRegs, fn)
	d.api.cuFuncGetAttribute(&local, funcAttrLocalBytes, fn)
	d.api.cuFuncGetAttribute(&shared, funcAttrStaticShmem, fn)
	return fmt.Sprintf("%d regs, %d local B, %d shared B", regs, local, shared)
}
