package metal

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"petal/gpu"
)

// Device is the Mac's GPU. Its buffers and command buffers make their
// Objective-C calls through calls, which the darwin build fills from
// purego; pipelines come from comp.
type Device struct {
	calls      *calls
	dev, queue uintptr
	info       gpu.Info
	// page is the VM page a no-copy buffer starts on and spans whole
	// pages of; maxBuffer is the device's maxBufferLength.
	page, maxBuffer int
	comp            compiler

	mu     sync.Mutex
	pipes  map[string]*pipeline
	closed bool
	// free holds settled command buffers handed back by Recycle, for
	// NewCommandBuffer to reuse: free[:nfree].
	free  [maxRecycled]*commandBuffer
	nfree int
}

// maxRecycled bounds the settled command buffers a device keeps for reuse.
// A decode has at most three in flight (a constrained step's forward pass
// and draw, and the next forward pass), so four cover a step's turnover;
// prefill commits more per chunk, and those past the bound are made anew
// as before (a chunk's few dozen allocations beside 512 tokens' work).
const maxRecycled = 4

var (
	_ gpu.Device        = (*Device)(nil)
	_ gpu.TensorWrapper = (*Device)(nil)
)

// compiler makes pipelines; the darwin build's compiles MSL with Metal (or
// loads a bundled .metallib).
type compiler interface {
	// pipeline returns the owned pipeline state of function specialised
	// with constants, and its maxTotalThreadsPerThreadgroup.
	pipeline(src gpu.Source, function string, constants []gpu.Constant) (pso uintptr, maxThreads int, err error)
	// close releases what the compiler keeps (libraries).
	close()
	// libraryNotes says, for each source compiled so far, where its
	// library came from.
	libraryNotes() []string
}

// newDevice is a device over an opened MTLDevice and command queue, both
// owned and released by Close.
func newDevice(c *calls, dev, queue uintptr, info gpu.Info, page, maxBuffer int, comp compiler) *Device {
	return &Device{calls: c, dev: dev, queue: queue, info: info, page: page, maxBuffer: maxBuffer, comp: comp, pipes: map[string]*pipeline{}}
}

// inPool runs f inside an autorelease pool on a locked OS thread, for the
// calls that may leave autoreleased objects: Objective-C frees them when
// the pool drains, and no run loop drains one for the driver's threads.
func (c *calls) inPool(fr *frame, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := c.poolPush()
	defer c.poolPop(fr, pool)
	f()
}

// Info describes the GPU.
func (d *Device) Info() gpu.Info { return d.info }

// Libraries says, for each kernel source compiled so far, whether its
// library was the one bundled with Petal.app or compiled from source, and
// why (for the log and petal doctor).
func (d *Device) Libraries() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.comp.libraryNotes()
}

// Close releases pipelines, the compiler's libraries, the queue and the
// device. Buffers are released by their own Release.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.free, d.nfree = [maxRecycled]*commandBuffer{}, 0
	var f frame
	d.calls.inPool(&f, func() {
		for _, p := range d.pipes {
			d.calls.release(&f, p.pso)
		}
		d.comp.close()
		d.calls.release(&f, d.queue)
		d.calls.release(&f, d.dev)
	})
	return nil
}

// ---------------------------------------------------------------- buffers

// buffer is one Metal buffer, or a region longer than one may be wrapped
// as several views (views.go).
type buffer struct {
	dev   *Device
	views []uintptr
	plan  viewPlan
	data  []byte
	// f is the argument block of the buffer's own calls.
	f       frame
	release sync.Once
}

func (b *buffer) Len() int         { return len(b.data) }
func (b *buffer) Contents() []byte { return b.data }
func (b *buffer) Release() {
	b.release.Do(func() {
		b.dev.calls.inPool(&b.f, func() {
			for _, v := range b.views {
				b.dev.calls.release(&b.f, v)
			}
		})
		b.data, b.views = nil, nil
	})
}

// view is the Metal buffer holding offset, and offset within it.
func (b *buffer) view(offset int) (uintptr, int) {
	k, local := b.plan.resolve(offset)
	return b.views[k], local
}

// NewBuffer allocates a zeroed shared buffer.
func (d *Device) NewBuffer(length int) (gpu.Buffer, error) {
	if length <= 0 {
		return nil, fmt.Errorf("%w: buffer length %d", gpu.ErrInvalid, length)
	}
	if length > d.maxBuffer {
		return nil, fmt.Errorf("%w: a %d-byte buffer is longer than this GPU's buffers hold (maxBufferLength %d bytes)", gpu.ErrInvalid, length, d.maxBuffer)
	}
	b := &buffer{dev: d, plan: viewPlan{count: 1}}
	var id uintptr
	var p unsafe.Pointer
	d.calls.inPool(&b.f, func() { id, p = d.calls.newBuffer(&b.f, d.dev, uint(length)) })
	if id == 0 {
		return nil, fmt.Errorf("metal: newBufferWithLength(%d) returned nil", length)
	}
	b.views = []uintptr{id}
	// Metal does not promise zeroed memory.
	b.data = unsafe.Slice((*byte)(p), length)
	clear(b.data)
	return b, nil
}

// WrapNoCopy makes a buffer over mem (an mmapped, page-aligned region) that
// fits one Metal buffer; the length Metal sees is rounded up to whole
// pages, which the mapping covers. A longer region needs
// WrapNoCopyTensors.
func (d *Device) WrapNoCopy(mem []byte) (gpu.Buffer, error) { return d.WrapNoCopyTensors(mem, nil) }

// WrapNoCopyTensors makes a buffer over mem, which holds tensors: as one
// no-copy Metal buffer when it fits, else as overlapping views with every
// tensor wholly inside one (views.go). It fails only when a tensor is
// longer than a view can be.
func (d *Device) WrapNoCopyTensors(mem []byte, tensors []gpu.Extent) (gpu.Buffer, error) {
	if err := gpu.CheckNoCopy(mem); err != nil {
		return nil, err
	}
	if addr := uintptr(unsafe.Pointer(&mem[0])); addr%uintptr(d.page) != 0 {
		return nil, fmt.Errorf("%w: no-copy region at %#x does not start on a %d-byte page", gpu.ErrInvalid, addr, d.page)
	}
	plan, err := planViews(len(mem), d.maxBuffer, d.page, tensors)
	if err != nil {
		return nil, err
	}
	b := &buffer{dev: d, plan: plan, data: mem[:len(mem):len(mem)]}
	padded := roundUp(len(mem), d.page)
	d.calls.inPool(&b.f, func() {
		for k := range plan.count {
			start, n := plan.bounds(k, padded)
			id := d.calls.newNoCopy(&b.f, d.dev, unsafe.Add(unsafe.Pointer(&mem[0]), start), uint(n))
			if id == 0 {
				err = fmt.Errorf("metal: newBufferWithBytesNoCopy refused view %d of %d (%d bytes at %d)", k+1, plan.count, n, start)
				return
			}
			b.views = append(b.views, id)
		}
	})
	if err != nil {
		b.Release()
		return nil, err
	}
	return b, nil
}

// ---------------------------------------------------------------- pipelines

type pipeline struct {
	name string
	pso  uintptr
	max  int
	dev  *Device
}

func (p *pipeline) Name() string    { return p.name }
func (p *pipeline) MaxThreads() int { return p.max }

// NewPipeline compiles (or reuses) function of src specialised with
// constants.
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
	pso, max, err := d.comp.pipeline(src, function, constants)
	if err != nil {
		return nil, err
	}
	p := &pipeline{name: function, pso: pso, max: max, dev: d}
	d.pipes[key] = p
	return p, nil
}
