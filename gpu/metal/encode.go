package metal

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"petal/gpu"
)

// The encoding path: what a decode step's few hundred dispatches and
// barriers cost the host. It opens autorelease pools only where objects are
// autoreleased (making the command buffer and its encoder, committing, and
// reading an error), never per dispatch or barrier, whose calls return
// nothing; it sends a pipeline, a buffer or a threadgroup memory length only
// when it differs from what the encoder has bound at that slot (Metal keeps
// bindings across an encoder's dispatches), binds a run of consecutive
// slots in one setBuffers call (a kernel's buffers are numbered from 0, so
// most dispatches bind one run), moves only the offset when a lone slot's
// buffer stays, and drops a barrier with no dispatch since the last one.
// Encoding a dispatch allocates nothing.

// binding is what the encoder has at one buffer slot.
type binding struct {
	buf    uintptr // 0: nothing, or inline bytes
	offset int
}

type commandBuffer struct {
	dev     *Device
	c       *calls
	cb, enc uintptr
	trace   gpu.Trace
	err     error
	status  atomic.Int32
	wait    sync.Once
	runErr  error

	mu       sync.Mutex // guards cb against Status racing with its release
	released bool
	recycled bool // handed back to the device (guarded by mu)

	// The encoder's bindings.
	pso     uintptr
	buffers [gpu.MaxBindings]binding
	tgMem   [gpu.MaxThreadgroupMemoryBindings]int
	open    bool // a dispatch since the last barrier

	// nextBuf and nextOff are a dispatch's changed bindings by slot, which
	// setBuffers reads by address.
	nextBuf [gpu.MaxBindings]uintptr
	nextOff [gpu.MaxBindings]uint

	// Argument blocks: f for the encoding goroutine, waitF inside c.wait,
	// statusF under mu. groups, threads and inline are the copies that
	// dispatch and setBytes pass by address.
	f, waitF, statusF frame
	groups, threads   mtlSize
	inline            [gpu.MaxInlineBytes]byte
}

// NewCommandBuffer starts a concurrent compute pass, in a command buffer
// recycled by Recycle when the device has one.
func (d *Device) NewCommandBuffer() (gpu.CommandBuffer, error) {
	var c *commandBuffer
	d.mu.Lock()
	closed := d.closed
	if !closed && d.nfree > 0 {
		d.nfree--
		c, d.free[d.nfree] = d.free[d.nfree], nil
	}
	d.mu.Unlock()
	if closed {
		return nil, gpu.ErrClosed
	}
	if c == nil {
		c = new(commandBuffer)
	}
	// A recycled one keeps nothing of its last use: bindings, status,
	// errors, the Once of its wait, trace, argument blocks and flags all
	// start afresh.
	*c = commandBuffer{dev: d, c: d.calls}
	var err error
	d.calls.inPool(&c.f, func() {
		if c.cb = c.c.commandBuffer(&c.f, d.queue); c.cb == 0 {
			err = fmt.Errorf("%w: commandBuffer returned nil", gpu.ErrExecution)
			return
		}
		c.c.retain(&c.f, c.cb)
		if c.enc = c.c.encoder(&c.f, c.cb); c.enc == 0 {
			c.c.release(&c.f, c.cb)
			err = fmt.Errorf("%w: computeCommandEncoderWithDispatchType returned nil", gpu.ErrExecution)
			return
		}
		c.c.retain(&c.f, c.enc)
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *commandBuffer) Trace() *gpu.Trace { return &c.trace }

func (c *commandBuffer) fail(err error) error {
	c.err = err
	return err
}

func (c *commandBuffer) Dispatch(d *gpu.Dispatch) error {
	if c.err != nil {
		return c.err
	}
	if gpu.Status(c.status.Load()) != gpu.Encoding {
		return fmt.Errorf("%w: dispatch after commit", gpu.ErrInvalid)
	}
	if err := d.Check(); err != nil {
		return c.fail(err)
	}
	p, ok := d.Pipeline.(*pipeline)
	if !ok || p.dev != c.dev {
		return c.fail(fmt.Errorf("%w: pipeline %s is not from this Metal device", gpu.ErrInvalid, d.Pipeline.Name()))
	}
	// Bindings go out as they are checked: a failure leaves the command
	// buffer unusable, so what was bound before it does not matter.
	var changed uint32 // slots whose buffer or offset differs from the encoder's
	for _, a := range d.Args {
		if a.Bytes != nil {
			n := copy(c.inline[:], a.Bytes)
			c.c.setBytes(&c.f, c.enc, unsafe.Pointer(&c.inline[0]), uint(n), uint(a.Index))
			c.buffers[a.Index] = binding{}
			continue
		}
		b, ok := a.Buffer.(*buffer)
		if !ok || b.data == nil || b.dev != c.dev {
			return c.fail(fmt.Errorf("%w: %s: buffer at index %d is not a live buffer of this Metal device", gpu.ErrInvalid, p.name, a.Index))
		}
		id, offset := b.view(a.Offset)
		if c.buffers[a.Index] != (binding{id, offset}) {
			c.nextBuf[a.Index], c.nextOff[a.Index] = id, uint(offset)
			changed |= 1 << a.Index
		}
	}
	c.bindRuns(changed)
	if c.pso != p.pso {
		c.c.setPipeline(&c.f, c.enc, p.pso)
		c.pso = p.pso
	}
	for i, n := range d.ThreadgroupMemory {
		if n > 0 && c.tgMem[i] != n {
			c.c.setThreadgroupMemory(&c.f, c.enc, uint(n), uint(i))
			c.tgMem[i] = n
		}
	}
	c.groups = mtlSize{uint(d.Groups.X), uint(d.Groups.Y), uint(d.Groups.Z)}
	c.threads = mtlSize{uint(d.Threads.X), uint(d.Threads.Y), uint(d.Threads.Z)}
	c.c.dispatch(&c.f, c.enc, &c.groups, &c.threads)
	c.open = true
	c.trace.AddDispatch(d)
	return nil
}

// bindRuns sends the changed slots' bindings (nextBuf, nextOff): a run of
// consecutive slots in one setBuffers call, a lone slot with setBuffer, or
// setBufferOffset when only its offset moved.
func (c *commandBuffer) bindRuns(changed uint32) {
	for changed != 0 {
		start := bits.TrailingZeros32(changed)
		n := bits.TrailingZeros32(^(changed >> start))
		changed &^= (1<<n - 1) << start
		switch {
		case n > 1:
			c.c.setBuffers(&c.f, c.enc, &c.nextBuf[start], &c.nextOff[start], uint(start), uint(n))
		case c.buffers[start].buf == c.nextBuf[start]:
			c.c.setBufferOffset(&c.f, c.enc, c.nextOff[start], uint(start))
		default:
			c.c.setBuffer(&c.f, c.enc, c.nextBuf[start], c.nextOff[start], uint(start))
		}
		for i := start; i < start+n; i++ {
			c.buffers[i] = binding{c.nextBuf[i], int(c.nextOff[i])}
		}
	}
}

func (c *commandBuffer) Barrier() {
	if gpu.Status(c.status.Load()) != gpu.Encoding || c.err != nil || !c.open {
		return
	}
	c.open = false
	c.trace.AddBarrier()
	c.c.barrier(&c.f, c.enc)
}

// Commit ends the pass and submits it; after an encoding error it ends the
// pass (Metal asserts on an encoder dropped mid-encoding) and submits
// nothing.
func (c *commandBuffer) Commit() error {
	if !c.status.CompareAndSwap(int32(gpu.Encoding), int32(gpu.Committed)) {
		return fmt.Errorf("%w: command buffer committed twice", gpu.ErrInvalid)
	}
	c.c.inPool(&c.f, func() {
		c.c.endEncoding(&c.f, c.enc)
		c.c.release(&c.f, c.enc)
		if c.err == nil {
			c.c.commit(&c.f, c.cb)
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
	c.c.release(&c.statusF, c.cb)
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
		c.c.wait(&c.waitF, c.cb)
		var err error
		if st := c.c.status(&c.waitF, c.cb); st != cbCompleted {
			c.c.inPool(&c.waitF, func() {
				err = fmt.Errorf("%w: status %d: %v", gpu.ErrExecution, st, c.c.errorOf(c.cb))
			})
		}
		c.settle(err)
	})
	return c.runErr
}

// Recycle hands the command buffer back to its device for reuse
// (gpu.Recycler). Its Metal objects were released when it settled (the
// encoder at Commit, the command buffer in settle), so only the Go value
// is reused and nothing is released twice. One that has not settled, or
// was recycled already, is ignored, as is one past the device's bound or
// of a closed device.
func (c *commandBuffer) Recycle() {
	c.mu.Lock()
	ok := c.released && !c.recycled
	if ok {
		c.recycled = true
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.nfree == len(d.free) {
		return
	}
	d.free[d.nfree] = c
	d.nfree++
}

var _ gpu.Recycler = (*commandBuffer)(nil)

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
	switch c.c.status(&c.statusF, c.cb) {
	case cbCompleted:
		return gpu.Completed
	case cbError:
		return gpu.Failed
	}
	return gpu.Committed
}
