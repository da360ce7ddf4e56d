//go:build darwin && arm64

package metal

import (
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"petal/gpu"
	"petal/gpu/metal/mtl"
)

// maxAppleFamily is the newest family probed (Apple10 is M5).
const maxAppleFamily = 10

// Device is the Mac's GPU.
type Device struct {
	dev   mtl.Device
	queue mtl.CommandQueue
	info  gpu.Info

	math mathSettings

	mu     sync.Mutex
	libs   map[[32]byte]mtl.Library
	pipes  map[string]*pipeline
	closed bool
}

var _ gpu.Device = (*Device)(nil)

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

func open(math mathSettings) (*Device, error) {
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
	return &Device{
		dev:   dev,
		queue: q,
		info: gpu.Info{
			Name:                         name,
			AppleFamily:                  family,
			RecommendedMaxWorkingSetSize: dev.RecommendedMaxWorkingSetSize(),
			UnifiedMemory:                dev.HasUnifiedMemory(),
		},
		math:  math,
		libs:  map[[32]byte]mtl.Library{},
		pipes: map[string]*pipeline{},
	}, nil
}

// compileOptions are MSL 3.1 (bfloat needs it) with fast math off as
// d.math says (owned; release it).
func (d *Device) compileOptions() mtl.CompileOptions {
	o := mtl.NewCompileOptions()
	o.SetLanguageVersion(mtl.LanguageVersion3_1)
	if d.math.safeMathMode {
		o.SetMathMode(mtl.MathModeSafe)
		o.SetMathFloatingPointFunctions(mtl.MathFloatingPointFunctionsPrecise)
	}
	if d.math.fastMathOff {
		o.SetFastMathEnabled(false)
	}
	return o
}

// Info describes the GPU.
func (d *Device) Info() gpu.Info { return d.info }

// Close releases pipelines, libraries, the queue and the device. Buffers
// are released by their own Release.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	mtl.WithPool(func() {
		for _, p := range d.pipes {
			p.pso.Release()
		}
		for _, l := range d.libs {
			l.Release()
		}
		d.queue.Release()
		d.dev.Release()
	})
	return nil
}

// ---------------------------------------------------------------- buffers

type buffer struct {
	b       mtl.Buffer
	data    []byte
	release sync.Once
}

func (b *buffer) Len() int         { return len(b.data) }
func (b *buffer) Contents() []byte { return b.data }
func (b *buffer) Release() {
	b.release.Do(func() {
		mtl.WithPool(b.b.Release)
		b.data = nil
	})
}

// NewBuffer allocates a zeroed shared buffer.
func (d *Device) NewBuffer(length int) (gpu.Buffer, error) {
	if length <= 0 {
		return nil, fmt.Errorf("%w: buffer length %d", gpu.ErrInvalid, length)
	}
	var b mtl.Buffer
	var err error
	mtl.WithPool(func() { b, err = d.dev.NewBufferWithLength(uint(length), mtl.ResourceStorageModeShared) })
	if err != nil {
		return nil, err
	}
	data := unsafe.Slice((*byte)(b.Contents()), length)
	clear(data)
	return &buffer{b: b, data: data}, nil
}

// WrapNoCopy makes a buffer over mem (an mmapped, page-aligned region);
// the length Metal sees is rounded up to whole pages, which the mapping
// covers.
func (d *Device) WrapNoCopy(mem []byte) (gpu.Buffer, error) {
	if err := gpu.CheckNoCopy(mem); err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	length := (len(mem) + page - 1) / page * page
	var b mtl.Buffer
	var err error
	mtl.WithPool(func() {
		b, err = d.dev.NewBufferWithBytesNoCopy(unsafe.Pointer(&mem[0]), uint(length), mtl.ResourceStorageModeShared)
	})
	if err != nil {
		return nil, err
	}
	return &buffer{b: b, data: mem[:len(mem):len(mem)]}, nil
}

// ---------------------------------------------------------------- pipelines

type pipeline struct {
	name string
	pso  mtl.ComputePipelineState
	max  int
	dev  *Device
}

func (p *pipeline) Name() string    { return p.name }
func (p *pipeline) MaxThreads() int { return p.max }

// NewPipeline compiles (or reuses) the library of src and specialises
// function with constants.
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
	var p *pipeline
	var err error
	mtl.WithPool(func() { p, err = d.compile(src, function, constants) })
	if err != nil {
		return nil, err
	}
	d.pipes[key] = p
	return p, nil
}

func (d *Device) compile(src gpu.Source, function string, constants []gpu.Constant) (*pipeline, error) {
	sum := sha256.Sum256([]byte(src.Text))
	lib, ok := d.libs[sum]
	if !ok {
		var err error
		opts := d.compileOptions()
		lib, err = d.dev.NewLibraryWithSource(src.Text, opts)
		opts.Release()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", gpu.ErrCompile, src.Name, err)
		}
		d.libs[sum] = lib
	}
	values := mtl.NewFunctionConstantValues()
	defer values.Release()
	// Metal copies each value in setConstantValue, so one slot per
	// constant only has to live through the call.
	for _, c := range constants {
		v := c.Bits
		var t mtl.DataType
		switch c.Type {
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
		values.SetConstantValue(unsafe.Pointer(&v), t, uint(c.Index))
	}
	fn, err := lib.NewFunctionWithConstants(function, values)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s: %v", gpu.ErrCompile, src.Name, function, err)
	}
	defer fn.Release()
	pso, err := d.dev.NewComputePipelineStateWithFunction(fn)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s: %v", gpu.ErrCompile, src.Name, function, err)
	}
	return &pipeline{name: function, pso: pso, max: pso.MaxTotalThreadsPerThreadgroup(), dev: d}, nil
}

// ---------------------------------------------------------------- command buffers

type commandBuffer struct {
	dev    *Device
	cb     mtl.CommandBuffer
	enc    mtl.ComputeCommandEncoder
	trace  gpu.Trace
	err    error
	status atomic.Int32
	wait   sync.Once
	runErr error

	mu       sync.Mutex // guards cb against Status racing with its release
	released bool
}

// NewCommandBuffer starts a concurrent compute pass.
func (d *Device) NewCommandBuffer() (gpu.CommandBuffer, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, gpu.ErrClosed
	}
	c := &commandBuffer{dev: d}
	var err error
	mtl.WithPool(func() {
		c.cb, err = d.queue.CommandBuffer()
		if err != nil {
			return
		}
		c.cb.Retain()
		c.enc, err = c.cb.ComputeCommandEncoderWithDispatchType(mtl.DispatchTypeConcurrent)
		if err != nil {
			c.cb.Release()
			return
		}
		c.enc.Retain()
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", gpu.ErrExecution, err)
	}
	return c, nil
}

func (c *commandBuffer) Trace() *gpu.Trace { return &c.trace }

func (c *commandBuffer) Dispatch(d *gpu.Dispatch) error {
	if c.err != nil {
		return c.err
	}
	if gpu.Status(c.status.Load()) != gpu.Encoding {
		return fmt.Errorf("%w: dispatch after commit", gpu.ErrInvalid)
	}
	if err := d.Check(); err != nil {
		c.err = err
		return err
	}
	p, ok := d.Pipeline.(*pipeline)
	if !ok || p.dev != c.dev {
		c.err = fmt.Errorf("%w: pipeline %s is not from this Metal device", gpu.ErrInvalid, d.Pipeline.Name())
		return c.err
	}
	bufs := make([]*buffer, len(d.Args))
	for i, a := range d.Args {
		if a.Bytes != nil {
			continue
		}
		b, ok := a.Buffer.(*buffer)
		if !ok || b.data == nil {
			c.err = fmt.Errorf("%w: %s: buffer at index %d is not a live Metal buffer", gpu.ErrInvalid, p.name, a.Index)
			return c.err
		}
		bufs[i] = b
	}
	mtl.WithPool(func() {
		c.enc.SetComputePipelineState(p.pso)
		for i, a := range d.Args {
			if a.Bytes != nil {
				c.enc.SetBytes(a.Bytes, uint(a.Index))
			} else {
				c.enc.SetBuffer(bufs[i].b, uint(a.Offset), uint(a.Index))
			}
		}
		for i, n := range d.ThreadgroupMemory {
			if n > 0 {
				c.enc.SetThreadgroupMemoryLength(uint(n), uint(i))
			}
		}
		c.enc.DispatchThreadgroups(
			mtl.Size{Width: uint(d.Groups.X), Height: uint(d.Groups.Y), Depth: uint(d.Groups.Z)},
			mtl.Size{Width: uint(d.Threads.X), Height: uint(d.Threads.Y), Depth: uint(d.Threads.Z)})
	})
	c.trace.AddDispatch(d)
	return nil
}

func (c *commandBuffer) Barrier() {
	if gpu.Status(c.status.Load()) != gpu.Encoding || c.err != nil {
		return
	}
	c.trace.AddBarrier()
	mtl.WithPool(func() { c.enc.MemoryBarrierWithScope(mtl.BarrierScopeBuffers) })
}

// Commit ends the pass and submits it; after an encoding error it ends the
// pass (Metal asserts on an encoder dropped mid-encoding) and submits
// nothing.
func (c *commandBuffer) Commit() error {
	if !c.status.CompareAndSwap(int32(gpu.Encoding), int32(gpu.Committed)) {
		return fmt.Errorf("%w: command buffer committed twice", gpu.ErrInvalid)
	}
	mtl.WithPool(func() {
		c.enc.EndEncoding()
		c.enc.Release()
		if c.err == nil {
			c.cb.Commit()
		}
	})
	if c.err != nil {
		c.wait.Do(func() { c.settle(c.err) })
		return c.err
	}
	return nil
}

// settle records the outcome and releases the command buffer; it runs once,
// inside c.wait.
func (c *commandBuffer) settle(err error) {
	c.runErr = err
	if err != nil {
		c.status.Store(int32(gpu.Failed))
	} else {
		c.status.Store(int32(gpu.Completed))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = true
	mtl.WithPool(c.cb.Release)
}

// Wait blocks until the GPU is done, then checks status and error. Any
// number of goroutines may wait: the first waits on the GPU inside c.wait,
// the others block in c.wait until it has settled, so none messages the
// command buffer after its release.
func (c *commandBuffer) Wait() error {
	if gpu.Status(c.status.Load()) == gpu.Encoding {
		return fmt.Errorf("%w: wait before commit", gpu.ErrInvalid)
	}
	c.wait.Do(func() {
		var err error
		mtl.WithPool(func() {
			c.cb.WaitUntilCompleted()
			if st := c.cb.Status(); st != mtl.CommandBufferStatusCompleted {
				err = fmt.Errorf("%w: status %d: %v", gpu.ErrExecution, st, c.cb.Error())
			}
		})
		c.settle(err)
	})
	return c.runErr
}

// Status reports the state without blocking.
func (c *commandBuffer) Status() gpu.Status {
	s := gpu.Status(c.status.Load())
	if s != gpu.Committed {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return gpu.Status(c.status.Load())
	}
	var st mtl.CommandBufferStatus
	mtl.WithPool(func() { st = c.cb.Status() })
	switch st {
	case mtl.CommandBufferStatusCompleted:
		return gpu.Completed
	case mtl.CommandBufferStatusError:
		return gpu.Failed
	}
	return gpu.Committed
}
