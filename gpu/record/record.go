// Package record is a gpu driver that records command buffers without
// running them. It lets Petal count the dispatches, dependency levels and
// weight bytes of a decode step for a model shape whose weights are not on
// this machine (the 35B checkpoint), with the very encoding code the real
// drivers run.
package record

import (
	"fmt"
	"sync"

	"petal/gpu"
)

// Device records; its pipelines compile nothing and its command buffers
// complete at once.
type Device struct {
	mu         sync.Mutex
	traces     []*gpu.Trace
	counting   bool
	maxThreads int // what pipelines report; 0: Metal's limit
}

var _ gpu.Device = (*Device)(nil)

// New returns a recording device: its command buffers keep every event,
// and Traces returns them.
func New() *Device { return &Device{} }

// NewCounting returns a recording device whose command buffers count
// dispatches and levels only, and which keeps no traces: encoding into it
// costs what the real drivers' bookkeeping does (timing the host's
// encoding uses it).
func NewCounting() *Device { return &Device{counting: true} }

// Info describes the recorder.
func (d *Device) Info() gpu.Info { return gpu.Info{Name: "record"} }

// NewBuffer returns a zeroed buffer of length bytes; its memory is
// allocated when Contents is first called, so a recording of a long
// context's caches costs nothing.
func (d *Device) NewBuffer(length int) (gpu.Buffer, error) {
	if length < 0 {
		return nil, fmt.Errorf("%w: buffer of %d bytes", gpu.ErrInvalid, length)
	}
	return &buffer{n: length, lazy: true}, nil
}

// WrapNoCopy wraps mem.
func (d *Device) WrapNoCopy(mem []byte) (gpu.Buffer, error) {
	return &buffer{data: mem, n: len(mem)}, nil
}

// Placeholder is a buffer of length bytes with no memory behind it: weights
// that are counted but never read. Contents is nil.
func Placeholder(length int) gpu.Buffer { return &buffer{n: length} }

// SetMaxThreads makes the pipelines built from now on report n threads per
// threadgroup at most, as a GPU whose compiler could not grant a kernel
// more would; 0 restores Metal's limit. Pipelines built before keep theirs.
func (d *Device) SetMaxThreads(n int) error {
	if n < 0 || n > gpu.MaxThreadsPerThreadgroup {
		return fmt.Errorf("%w: %d threads per threadgroup, want 0..%d", gpu.ErrInvalid, n, gpu.MaxThreadsPerThreadgroup)
	}
	d.mu.Lock()
	d.maxThreads = n
	d.mu.Unlock()
	return nil
}

// NewPipeline returns a pipeline named after function; nothing compiles.
func (d *Device) NewPipeline(src gpu.Source, function string, constants ...gpu.Constant) (gpu.Pipeline, error) {
	if err := gpu.CheckConstants(constants); err != nil {
		return nil, err
	}
	d.mu.Lock()
	n := d.maxThreads
	d.mu.Unlock()
	if n == 0 {
		n = gpu.MaxThreadsPerThreadgroup
	}
	return pipeline{name: function, maxThreads: n}, nil
}

// NewCommandBuffer starts a recording.
func (d *Device) NewCommandBuffer() (gpu.CommandBuffer, error) {
	cb := &commandBuffer{trace: &gpu.Trace{Keep: !d.counting}}
	if !d.counting {
		d.mu.Lock()
		d.traces = append(d.traces, cb.trace)
		d.mu.Unlock()
	}
	return cb, nil
}

// Traces returns every command buffer recorded so far, in creation order
// (none on a counting device).
func (d *Device) Traces() []*gpu.Trace {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*gpu.Trace(nil), d.traces...)
}

// Close does nothing.
func (d *Device) Close() error { return nil }

type buffer struct {
	data []byte
	n    int
	lazy bool
}

func (b *buffer) Len() int { return b.n }

func (b *buffer) Contents() []byte {
	if b.lazy && b.data == nil {
		b.data = make([]byte, b.n)
	}
	return b.data
}
func (b *buffer) Release() {}

type pipeline struct {
	name       string
	maxThreads int
}

func (p pipeline) Name() string    { return p.name }
func (p pipeline) MaxThreads() int { return p.maxThreads }

type commandBuffer struct {
	trace  *gpu.Trace
	status gpu.Status
	err    error
}

func (c *commandBuffer) Dispatch(d *gpu.Dispatch) error {
	if c.status != gpu.Encoding {
		return fmt.Errorf("%w: dispatch after commit", gpu.ErrInvalid)
	}
	if err := d.Check(); err != nil {
		if c.err == nil {
			c.err = err
		}
		return err
	}
	c.trace.AddDispatch(d)
	return nil
}

func (c *commandBuffer) Barrier() { c.trace.AddBarrier() }

func (c *commandBuffer) Commit() error {
	if c.status != gpu.Encoding {
		return fmt.Errorf("%w: committed twice", gpu.ErrInvalid)
	}
	c.status = gpu.Completed
	return c.err
}

func (c *commandBuffer) Wait() error        { return c.err }
func (c *commandBuffer) Status() gpu.Status { return c.status }
func (c *commandBuffer) Trace() *gpu.Trace  { return c.trace }
