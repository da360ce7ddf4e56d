package sim

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"petal/gpu"
)

// groupsPerCall is how many threadgroups one call into C runs, so the cost
// of crossing into C is spread while work still balances over workers.
const groupsPerCall = 8

// worker is the memory one OS thread needs to run a threadgroup: the C
// runtime's state and a stack per simulated thread, each with a guard page.
type worker struct {
	mem  []byte
	base uintptr
}

func newWorker(lib *library) (*worker, error) {
	header := int(lib.abi(2))
	stack := int(lib.abi(3))
	page := os.Getpagesize()
	if header%page != 0 || stack%page != 0 {
		return nil, fmt.Errorf("sim: worker layout (%d, %d) not page-aligned", header, stack)
	}
	m, err := syscall.Mmap(-1, 0, header+gpu.MaxThreadsPerThreadgroup*stack, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("sim: worker memory: %w", err)
	}
	for i := range gpu.MaxThreadsPerThreadgroup {
		lo := header + i*stack
		if err := syscall.Mprotect(m[lo:lo+page], syscall.PROT_NONE); err != nil {
			syscall.Munmap(m)
			return nil, fmt.Errorf("sim: stack guard: %w", err)
		}
	}
	return &worker{mem: m, base: uintptr(unsafe.Pointer(&m[0]))}, nil
}

func (w *worker) free() { syscall.Munmap(w.mem) }

// getWorker takes a free worker, creating one while fewer than
// Options.Workers exist.
func (d *Device) getWorker(lib *library) (*worker, error) {
	select {
	case w := <-d.workers:
		return w, nil
	default:
	}
	d.mu.Lock()
	if d.nwork < d.opts.Workers {
		d.nwork++
		d.mu.Unlock()
		w, err := newWorker(lib)
		if err != nil {
			d.mu.Lock()
			d.nwork--
			d.mu.Unlock()
			return nil, err
		}
		d.mu.Lock()
		d.all = append(d.all, w)
		d.mu.Unlock()
		return w, nil
	}
	d.mu.Unlock()
	return <-d.workers, nil
}

// ---------------------------------------------------------------- encoding

// op is one encoded dispatch (or a barrier).
type op struct {
	barrier bool
	pipe    *pipeline
	launch  *cLaunch
	inline  [][]uint64        // setBytes copies, kept alive for C
	bound   map[*buffer][]int // buffers bound, with their indices
	written []*buffer         // what the race check snapshots
}

type commandBuffer struct {
	gpu.Completion
	dev   *Device
	trace gpu.Trace
	ops   []op
	err   error
}

// NewCommandBuffer starts encoding.
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
	if c.Status() != gpu.Encoding {
		return
	}
	c.trace.AddBarrier()
	if n := len(c.ops); n > 0 && !c.ops[n-1].barrier {
		c.ops = append(c.ops, op{barrier: true})
	}
}

func (c *commandBuffer) Dispatch(d *gpu.Dispatch) error {
	if c.err != nil {
		return c.err
	}
	if c.Status() != gpu.Encoding {
		return fmt.Errorf("%w: dispatch after commit", gpu.ErrInvalid)
	}
	o, err := c.encode(d)
	if err != nil {
		c.err = err
		return err
	}
	c.trace.AddDispatch(d)
	c.ops = append(c.ops, o)
	return nil
}

func (c *commandBuffer) encode(d *gpu.Dispatch) (op, error) {
	if err := d.Check(); err != nil {
		return op{}, err
	}
	p, ok := d.Pipeline.(*pipeline)
	if !ok || p.dev != c.dev {
		return op{}, fmt.Errorf("%w: pipeline %s is not from this sim device", gpu.ErrInvalid, d.Pipeline.Name())
	}
	l := &cLaunch{entry: p.entry}
	l.groups = [3]uint32{uint32(d.Groups.X), uint32(d.Groups.Y), uint32(d.Groups.Z)}
	l.threads = [3]uint32{uint32(d.Threads.X), uint32(d.Threads.Y), uint32(d.Threads.Z)}
	for i, n := range d.ThreadgroupMemory {
		l.tglen[i] = uint32(n)
	}
	o := op{pipe: p, launch: l, bound: map[*buffer][]int{}}
	for _, a := range d.Args {
		if a.Bytes != nil {
			// 16-byte aligned copy, as Metal gives setBytes data.
			words := make([]uint64, (len(a.Bytes)+7)/8+1)
			addr := uintptr(unsafe.Pointer(&words[0]))
			skip := int((bufferAlign - addr%bufferAlign) % bufferAlign)
			dst := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[skip:]
			copy(dst, a.Bytes)
			o.inline = append(o.inline, words)
			l.buffers[a.Index] = addr + uintptr(skip)
			continue
		}
		b, ok := a.Buffer.(*buffer)
		if !ok || b.dev != c.dev || b.data == nil {
			return op{}, fmt.Errorf("%w: %s: buffer at index %d is not a live buffer of this sim device", gpu.ErrInvalid, p.name, a.Index)
		}
		l.buffers[a.Index] = b.base() + uintptr(a.Offset)
		if o.bound[b] == nil && !b.wrapped {
			o.written = append(o.written, b)
		}
		o.bound[b] = append(o.bound[b], a.Index)
	}
	return o, nil
}

// Commit queues the command buffer behind the ones committed before it.
func (c *commandBuffer) Commit() error {
	if err := c.Completion.Commit(); err != nil {
		return err
	}
	if c.err != nil {
		return c.End(c.err)
	}
	d := c.dev
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return c.End(gpu.ErrClosed)
	}
	prev := d.tail
	d.tail = c.Done()
	d.mu.Unlock()
	go func() {
		<-prev
		c.End(c.run())
	}()
	return nil
}

// ---------------------------------------------------------------- execution

// run executes the pass level by level. Within a level the dispatches run in
// reverse encoding order: the GPU may run them in any order, and reversing
// makes a missing barrier between dependent dispatches show in the results.
func (c *commandBuffer) run() error {
	start := 0
	for i := 0; i <= len(c.ops); i++ {
		if i < len(c.ops) && !c.ops[i].barrier {
			continue
		}
		for k := i - 1; k >= start; k-- {
			if err := c.dev.runOp(&c.ops[k]); err != nil {
				return err
			}
		}
		start = i + 1
	}
	return nil
}

func (d *Device) runOp(o *op) error {
	if d.opts.Fast {
		return d.exec(o, 0, poisonFirst)
	}
	// Command buffers of a device run one at a time, so the snapshot
	// scratch is reused from dispatch to dispatch.
	d.before = snapshot(d.before, o.written)
	before := d.before
	if err := d.exec(o, 0, poisonFirst); err != nil {
		return err
	}
	// first holds what the first run wrote; a buffer it left unchanged (an
	// input) needs neither a copy nor a restore.
	d.first = grow(d.first, len(o.written))
	first := make([][]byte, len(o.written)) // views, never stored: no aliasing between dispatches
	for i, b := range o.written {
		if bytes.Equal(before[i], b.data) {
			first[i] = before[i]
			continue
		}
		d.first[i] = append(d.first[i][:0], b.data...)
		first[i] = d.first[i]
		copy(b.data, before[i])
	}
	if err := d.exec(o, 1, poisonSecond); err != nil {
		return err
	}
	for i, b := range o.written {
		if bytes.Equal(first[i], b.data) {
			continue
		}
		at := 0
		for at < len(b.data) && first[i][at] == b.data[at] {
			at++
		}
		return &HazardError{
			Kind:   ErrRace,
			Kernel: o.pipe.name,
			Thread: -1,
			Detail: fmt.Sprintf("the buffer bound at index %v differs at byte %d between two thread orders (%#x vs %#x)", o.bound[b], at, first[i][at], b.data[at]),
		}
	}
	return nil
}

// snapshot copies each buffer's contents into dst, reusing its memory.
func snapshot(dst [][]byte, bufs []*buffer) [][]byte {
	dst = grow(dst, len(bufs))
	for i, b := range bufs {
		dst[i] = append(dst[i][:0], b.data...)
	}
	return dst
}

// grow returns s with at least n elements, keeping their memory.
func grow(s [][]byte, n int) [][]byte {
	for len(s) < n {
		s = append(s, nil)
	}
	return s[:n]
}

// exec runs every threadgroup of o once, spread over the workers.
func (d *Device) exec(o *op, schedule, poison uint32) error {
	l := o.launch
	l.schedule = schedule
	l.poison = poison
	total := uint32(l.groups[0] * l.groups[1] * l.groups[2])
	par := min(d.opts.Workers, int((total+groupsPerCall-1)/groupsPerCall))
	var next atomic.Uint32
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	work := func() {
		w, err := d.getWorker(o.pipe.lib)
		if err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
			return
		}
		defer func() { d.workers <- w }()
		var res cResult
		for {
			begin := next.Add(groupsPerCall) - groupsPerCall
			if begin >= total {
				return
			}
			mu.Lock()
			stop := first != nil
			mu.Unlock()
			if stop {
				return
			}
			end := min(begin+groupsPerCall, total)
			if schedule == 1 {
				// The second run also takes threadgroups in reverse, so two
				// threadgroups writing one element disagree between runs.
				begin, end = total-end, total-begin
			}
			kind := o.pipe.lib.run(unsafe.Pointer(l), unsafe.Pointer(&w.mem[0]), uint64(len(w.mem)), begin, end, unsafe.Pointer(&res))
			runtime.KeepAlive(o)
			if kind != hazNone {
				err := d.hazard(o, kind, &res)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
		}
	}
	// This goroutine is one of the workers: waking another costs more than
	// a small kernel.
	for range par - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	return first
}

func (d *Device) hazard(o *op, kind int32, r *cResult) error {
	msg, _, _ := bytes.Cut(r.msg[:], []byte{0})
	e := &HazardError{Kernel: o.pipe.name, Group: r.group, Thread: int(r.thread), Detail: string(msg)}
	switch kind {
	case hazDivergence:
		e.Kind = ErrDivergence
	case hazDeadlock:
		e.Kind = ErrDeadlock
	case hazFault:
		e.Kind = ErrOutOfBounds
		e.Detail = d.describeFault(uintptr(r.addr), o.bound)
		switch syscall.Signal(r.sig) {
		case syscall.SIGFPE:
			e.Kind = ErrTrap
			e.Detail = "integer division by zero or overflow (a GPU returns an unspecified value instead)"
		case syscall.SIGILL, syscall.SIGTRAP:
			e.Kind = ErrTrap
			e.Detail = "a shift by the operand's width or more, or by a negative amount (undefined: a GPU gives some value, the CPU another)"
		}
	case hazSetup:
		return fmt.Errorf("%w: %s: sim runtime: %s", gpu.ErrExecution, o.pipe.name, msg)
	default:
		return fmt.Errorf("%w: %s: unknown sim result %d", gpu.ErrExecution, o.pipe.name, kind)
	}
	return e
}
