package gpu

import "fmt"

// Size is a 3-D extent: threadgroups per grid or threads per threadgroup.
type Size struct{ X, Y, Z int }

// Count is X*Y*Z.
func (s Size) Count() int { return s.X * s.Y * s.Z }

// Arg is one kernel argument slot: a buffer at an offset ([[buffer(Index)]]
// bound with setBuffer:offset:atIndex:), or a few inline bytes (setBytes).
type Arg struct {
	Index  int
	Buffer Buffer
	Offset int
	// Bytes, when not nil, is copied at encode time instead of binding a
	// buffer; at most MaxInlineBytes.
	Bytes []byte
}

// BufferArg binds b at offset to [[buffer(index)]].
func BufferArg(index int, b Buffer, offset int) Arg {
	return Arg{Index: index, Buffer: b, Offset: offset}
}

// BytesArg passes data inline to [[buffer(index)]], as setBytes does; use it
// for small argument structs.
func BytesArg(index int, data []byte) Arg { return Arg{Index: index, Bytes: data} }

// Dispatch is one dispatchThreadgroups call.
type Dispatch struct {
	Pipeline Pipeline
	Groups   Size // threadgroups per grid
	Threads  Size // threads per threadgroup
	Args     []Arg
	// ThreadgroupMemory[i] is the length in bytes of the [[threadgroup(i)]]
	// argument (setThreadgroupMemoryLength:atIndex:); Metal wants multiples
	// of 16.
	ThreadgroupMemory []int
}

// Check reports what makes d invalid for any driver.
func (d *Dispatch) Check() error {
	if d.Pipeline == nil {
		return fmt.Errorf("%w: dispatch without a pipeline", ErrInvalid)
	}
	name := d.Pipeline.Name()
	for _, s := range []Size{d.Groups, d.Threads} {
		if s.X < 1 || s.Y < 1 || s.Z < 1 {
			return fmt.Errorf("%w: %s: empty grid %+v x %+v", ErrInvalid, name, d.Groups, d.Threads)
		}
	}
	if n := d.Threads.Count(); n > d.Pipeline.MaxThreads() {
		return fmt.Errorf("%w: %s: %d threads per threadgroup, pipeline allows %d", ErrInvalid, name, n, d.Pipeline.MaxThreads())
	}
	var seen [MaxBindings]bool
	for _, a := range d.Args {
		if a.Index < 0 || a.Index >= MaxBindings {
			return fmt.Errorf("%w: %s: buffer index %d out of range [0,%d)", ErrInvalid, name, a.Index, MaxBindings)
		}
		if seen[a.Index] {
			return fmt.Errorf("%w: %s: buffer index %d bound twice", ErrInvalid, name, a.Index)
		}
		seen[a.Index] = true
		switch {
		case a.Bytes != nil:
			if len(a.Bytes) == 0 || len(a.Bytes) > MaxInlineBytes {
				return fmt.Errorf("%w: %s: %d inline bytes at index %d, want 1..%d", ErrInvalid, name, len(a.Bytes), a.Index, MaxInlineBytes)
			}
		case a.Buffer == nil:
			return fmt.Errorf("%w: %s: index %d has neither buffer nor bytes", ErrInvalid, name, a.Index)
		case a.Offset < 0 || a.Offset >= a.Buffer.Len():
			return fmt.Errorf("%w: %s: offset %d outside the %d-byte buffer at index %d", ErrInvalid, name, a.Offset, a.Buffer.Len(), a.Index)
		case a.Offset%4 != 0:
			return fmt.Errorf("%w: %s: offset %d at index %d is not 4-byte aligned", ErrInvalid, name, a.Offset, a.Index)
		}
	}
	if len(d.ThreadgroupMemory) > MaxThreadgroupMemoryBindings {
		return fmt.Errorf("%w: %s: %d threadgroup memory slots, at most %d", ErrInvalid, name, len(d.ThreadgroupMemory), MaxThreadgroupMemoryBindings)
	}
	total := 0
	for i, n := range d.ThreadgroupMemory {
		if n < 0 || n%16 != 0 {
			return fmt.Errorf("%w: %s: threadgroup memory %d at index %d is not a multiple of 16", ErrInvalid, name, n, i)
		}
		total += n
	}
	if total > MaxThreadgroupMemory {
		return fmt.Errorf("%w: %s: %d bytes of threadgroup memory, at most %d", ErrInvalid, name, total, MaxThreadgroupMemory)
	}
	return nil
}

// Status is where a command buffer is in its life.
type Status int

// Command buffer states, in order.
const (
	Encoding Status = iota
	Committed
	Completed
	Failed
)

func (s Status) String() string {
	switch s {
	case Encoding:
		return "encoding"
	case Committed:
		return "committed"
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// CommandBuffer is one concurrent compute pass being encoded, then run.
// Encoding methods are not safe for concurrent use; errors from encoding are
// sticky and returned again by Commit.
type CommandBuffer interface {
	// Dispatch encodes one dispatchThreadgroups call. Drivers copy what
	// they need (inline bytes included) before returning, so the caller may
	// change and reuse d at once: a decode step's plan replays the same
	// dispatches, patched, into every step's command buffer.
	Dispatch(d *Dispatch) error
	// Barrier orders every dispatch before it against every one after it
	// (a memory barrier over all buffers).
	Barrier()
	// Commit ends encoding and submits the command buffer.
	Commit() error
	// Wait blocks until the command buffer finished and returns its error,
	// wrapping ErrExecution (the sim's hazard errors wrap theirs too). Any
	// number of goroutines may wait on one command buffer (and call Status)
	// at once; all get the same result.
	Wait() error
	// Status reports the current state without blocking.
	Status() Status
	// Trace is what was encoded.
	Trace() *Trace
}
