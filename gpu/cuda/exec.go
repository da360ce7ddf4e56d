package cuda

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"petal/gpu"
)

// params mirrors petal::Params in cuda_compat.h.
type params struct {
	buffers [gpu.MaxBindings]uint64
	tgoff   [gpu.MaxThreadgroupMemoryBindings]uint32
}

// paramsBytes is sizeof(petal::Params), which cuda_compat.h asserts.
const paramsBytes = 280

var _ [paramsBytes - unsafe.Sizeof(params{})]byte
var _ [unsafe.Sizeof(params{}) - paramsBytes]byte

// launch is one encoded dispatch.
type launch struct {
	name   string
	fn     uintptr
	grid   [3]uint32
	block  [3]uint32
	shmem  uint32
	params params
	// inline[i] is the offset in the command buffer's bytes of slot i's
	// setBytes data, or -1; patched into params at commit.
	inline [gpu.MaxBindings]int32
	// level is the dependency level (barriers before it) in its command
	// buffer.
	level int32
}

type commandBuffer struct {
	gpu.Completion
	dev      *Device
	trace    gpu.Trace
	launches []launch
	bytes    []byte // setBytes data of every dispatch, 16-byte aligned
	err      error
}

// NewCommandBuffer starts encoding. A command buffer runs on the device's
// one stream, so command buffers run in commit order, and each level of
// dispatches after the level before it: every barrier is honoured. The
// dispatches of one level may run at once, as in Metal's concurrent pass
// (with $PETAL_CUDA_GRAPHS=serial or off, each after the one before).
func (d *Device) NewCommandBuffer() (gpu.CommandBuffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, gpu.ErrClosed
	}
	return &commandBuffer{Completion: gpu.NewCompletion(), dev: d, trace: gpu.Trace{Keep: true}}, nil
}

func (c *commandBuffer) Trace() *gpu.Trace { return &c.trace }

func (c *commandBuffer) Barrier() {
	if c.Status() == gpu.Encoding {
		c.trace.AddBarrier()
	}
}

func (c *commandBuffer) Dispatch(d *gpu.Dispatch) error {
	if c.err != nil {
		return c.err
	}
	if c.Status() != gpu.Encoding {
		return fmt.Errorf("%w: dispatch after commit", gpu.ErrInvalid)
	}
	l, err := c.encode(d)
	if err != nil {
		c.err = err
		return err
	}
	c.trace.AddDispatch(d)
	l.level = int32(c.trace.Levels() - 1)
	c.launches = append(c.launches, l)
	return nil
}

// inlineAlign is the alignment Metal gives setBytes data.
const inlineAlign = 16

func (c *commandBuffer) encode(d *gpu.Dispatch) (launch, error) {
	if err := d.Check(); err != nil {
		return launch{}, err
	}
	p, ok := d.Pipeline.(*pipeline)
	if !ok || p.dev != c.dev {
		return launch{}, fmt.Errorf("%w: pipeline %s is not from this CUDA device", gpu.ErrInvalid, d.Pipeline.Name())
	}
	if d.Groups.X > 1<<31-1 || d.Groups.Y > c.dev.maxY || d.Groups.Z > c.dev.maxZ || d.Threads.Z > 64 {
		return launch{}, fmt.Errorf("%w: %s: grid %+v x %+v exceeds CUDA's limits (%d x %d x %d blocks, 64 threads in z)",
			gpu.ErrInvalid, p.name, d.Groups, d.Threads, 1<<31-1, c.dev.maxY, c.dev.maxZ)
	}
	l := launch{name: p.name, fn: p.fn}
	l.grid = [3]uint32{uint32(d.Groups.X), uint32(d.Groups.Y), uint32(d.Groups.Z)}
	l.block = [3]uint32{uint32(d.Threads.X), uint32(d.Threads.Y), uint32(d.Threads.Z)}
	for i := range l.inline {
		l.inline[i] = -1
	}
	for i, n := range d.ThreadgroupMemory {
		l.params.tgoff[i] = l.shmem
		l.shmem += uint32(n)
	}
	for _, a := range d.Args {
		if a.Bytes != nil {
			off := (len(c.bytes) + inlineAlign - 1) &^ (inlineAlign - 1)
			c.bytes = append(c.bytes[:len(c.bytes):len(c.bytes)], make([]byte, off-len(c.bytes))...)
			c.bytes = append(c.bytes, a.Bytes...)
			l.inline[a.Index] = int32(off)
			continue
		}
		b, ok := a.Buffer.(*buffer)
		if !ok || b.dev != c.dev || b.ptr == 0 {
			return launch{}, fmt.Errorf("%w: %s: buffer at index %d is not a live buffer of this CUDA device", gpu.ErrInvalid, p.name, a.Index)
		}
		l.params.buffers[a.Index] = b.addr(a.Offset)
	}
	return l, nil
}

// Commit puts the dispatches on the device's stream, as a replay of the
// graph of the command buffer's shape (graph.go) or, with
// $PETAL_CUDA_GRAPHS=off, as one launch each after copying the setBytes
// data to device memory from the stream's pool (freed on the stream after
// the last launch); then it records an event that a goroutine waits for.
func (c *commandBuffer) Commit() error {
	if err := c.Completion.Commit(); err != nil {
		return err
	}
	if c.err != nil {
		return c.End(c.err)
	}
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return c.End(gpu.ErrClosed)
	}
	d.enter()
	defer runtime.UnlockOSThread()
	if d.graphs.mode != graphOff && len(c.launches) > 0 {
		return c.replay()
	}
	var t *timings
	if d.prof != nil {
		t = &timings{}
	}
	start := time.Now()
	ev, err := c.launchAll(t)
	host := time.Since(start)
	if err != nil {
		c.endRun(err)
		return nil
	}
	go c.await(ev, t, host)
	return nil
}

// replay runs the command buffer as a graph. With $PETAL_CUDA_PROFILE=1
// it waits for the graph, whose event nodes time each kernel back to back.
func (c *commandBuffer) replay() error {
	d := c.dev
	start := time.Now()
	gr, err := d.graphs.replay(d, c)
	host := time.Since(start)
	if err != nil {
		c.endRun(err)
		return nil
	}
	if gr.timing != nil {
		if err := d.api.check(d.api.cuStreamSynchronize(d.stream), "running the command buffer"); err != nil {
			c.endRun(err)
			return nil
		}
		d.prof.add(gr.timing, d, host)
	}
	ev, err := c.event(nil)
	if err != nil {
		c.endRun(err)
		return nil
	}
	go c.await(ev, nil, host)
	return nil
}

// event records an event on the stream, with timing when t is not nil.
func (c *commandBuffer) event(t *timings) (uintptr, error) {
	api := c.dev.api
	var ev uintptr
	flags := uint32(eventDisableTiming)
	if t != nil {
		flags = 0
	}
	if err := api.check(api.cuEventCreate(&ev, flags), "cuEventCreate"); err != nil {
		return 0, err
	}
	if err := api.check(api.cuEventRecord(ev, c.dev.stream), "cuEventRecord"); err != nil {
		api.cuEventDestroy(ev)
		return 0, err
	}
	if t != nil {
		t.events = append(t.events, ev)
	}
	return ev, nil
}

func (c *commandBuffer) launchAll(t *timings) (uintptr, error) {
	d, api := c.dev, c.dev.api
	if len(c.bytes) > 0 {
		var arena uintptr
		if err := api.check(api.cuMemAllocAsync(&arena, uint64(len(c.bytes)), d.stream), "allocating inline bytes"); err != nil {
			return 0, err
		}
		defer api.cuMemFreeAsync(arena, d.stream)
		// From pageable memory the copy is staged before the call returns,
		// so c.bytes may go.
		if err := api.check(api.cuMemcpyHtoDAsync(arena, unsafe.Pointer(&c.bytes[0]), uint64(len(c.bytes)), d.stream), "copying inline bytes"); err != nil {
			return 0, err
		}
		for i := range c.launches {
			l := &c.launches[i]
			for slot, off := range l.inline {
				if off >= 0 {
					l.params.buffers[slot] = uint64(arena) + uint64(off)
				}
			}
		}
	}
	if t != nil {
		if _, err := c.event(t); err != nil {
			return 0, err
		}
	}
	for i := range c.launches {
		l := &c.launches[i]
		args := [1]unsafe.Pointer{unsafe.Pointer(&l.params)}
		r := api.cuLaunchKernel(l.fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shmem, d.stream, unsafe.Pointer(&args[0]), nil)
		if err := api.check(r, "launching "+l.name); err != nil {
			return 0, err
		}
		if t != nil {
			t.names, t.fns = append(t.names, l.name), append(t.fns, l.fn)
			if _, err := c.event(t); err != nil {
				return 0, err
			}
		}
	}
	if t != nil {
		return t.events[len(t.events)-1], nil
	}
	return c.event(nil)
}

// await blocks an OS thread until the GPU passed ev.
func (c *commandBuffer) await(ev uintptr, t *timings, host time.Duration) {
	d := c.dev
	d.enter()
	defer runtime.UnlockOSThread()
	err := d.api.check(d.api.cuEventSynchronize(ev), "running the command buffer")
	if t != nil {
		if err == nil {
			d.prof.add(t, d, host)
		}
		for _, e := range t.events {
			d.api.cuEventDestroy(e)
		}
	} else {
		d.api.cuEventDestroy(ev)
	}
	c.endRun(err)
}

// endRun ends a launched command buffer; a failure of the launch or the
// run is an execution error.
func (c *commandBuffer) endRun(err error) {
	if err != nil {
		err = fmt.Errorf("%w: %w", gpu.ErrExecution, err)
	}
	c.End(err)
}
