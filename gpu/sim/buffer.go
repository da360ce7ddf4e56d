package sim

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"petal/gpu"
)

// bufferAlign is the alignment of a sim buffer's first byte: enough for any
// vector load (uint4, float4).
const bufferAlign = 16

// buffer is a sim buffer. One the sim allocates is mmapped with its end
// against an inaccessible guard page (and another guard page below its data
// pages), so a kernel reading or writing past the end faults and the fault
// becomes an ErrOutOfBounds report.
type buffer struct {
	dev     *Device
	data    []byte // exactly Len bytes
	mapping []byte // whole mmap including the guard pages; nil for wrapped memory
	wrapped bool
	once    sync.Once
}

func (b *buffer) Len() int         { return len(b.data) }
func (b *buffer) Contents() []byte { return b.data }
func (b *buffer) base() uintptr    { return uintptr(unsafe.Pointer(&b.data[0])) }

// Release unmaps a sim-allocated buffer; a wrapped region stays the caller's.
func (b *buffer) Release() {
	b.once.Do(func() {
		b.dev.mu.Lock()
		delete(b.dev.bufs, b.base())
		b.dev.mu.Unlock()
		if b.mapping != nil {
			syscall.Munmap(b.mapping)
		}
		b.data = nil
	})
}

// NewBuffer returns a zeroed buffer of length bytes.
func (d *Device) NewBuffer(length int) (gpu.Buffer, error) {
	if length <= 0 {
		return nil, fmt.Errorf("%w: buffer length %d", gpu.ErrInvalid, length)
	}
	page := os.Getpagesize()
	padded := (length + bufferAlign - 1) / bufferAlign * bufferAlign
	dataPages := (padded + page - 1) / page * page
	// Layout: guard page, data pages with the buffer at their end, guard page.
	m, err := syscall.Mmap(-1, 0, page+dataPages+page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("sim: allocating %d bytes: %w", length, err)
	}
	for _, g := range [][]byte{m[:page], m[page+dataPages:]} {
		if err := syscall.Mprotect(g, syscall.PROT_NONE); err != nil {
			syscall.Munmap(m)
			return nil, fmt.Errorf("sim: guard page: %w", err)
		}
	}
	start := page + dataPages - padded
	b := &buffer{dev: d, data: m[start : start+length : start+length], mapping: m}
	d.mu.Lock()
	d.bufs[b.base()] = b
	d.mu.Unlock()
	return b, nil
}

// WrapNoCopy uses mem in place. The race check never snapshots a wrapped
// buffer (kernels only read weights), so wrapping gigabytes costs nothing.
func (d *Device) WrapNoCopy(mem []byte) (gpu.Buffer, error) {
	if err := gpu.CheckNoCopy(mem); err != nil {
		return nil, err
	}
	b := &buffer{dev: d, data: mem[:len(mem):len(mem)], wrapped: true}
	d.mu.Lock()
	d.bufs[b.base()] = b
	d.mu.Unlock()
	return b, nil
}

// describeFault names what a faulting address hit.
func (d *Device) describeFault(addr uintptr, bound map[*buffer][]int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	page := uintptr(os.Getpagesize())
	for b, idx := range bound {
		if b.mapping == nil {
			continue
		}
		lo := uintptr(unsafe.Pointer(&b.mapping[0]))
		hi := lo + uintptr(len(b.mapping))
		end := b.base() + uintptr(len(b.data))
		switch {
		case addr >= hi-page && addr < hi:
			return fmt.Sprintf("access %d bytes past the end of the %d-byte buffer bound at index %v", addr-end, len(b.data), idx)
		case addr >= lo && addr < lo+page:
			return fmt.Sprintf("access %d bytes or more before the start of the %d-byte buffer bound at index %v", b.base()-(lo+page), len(b.data), idx)
		}
	}
	for b, idx := range bound {
		if addr >= b.base() && addr < b.base()+uintptr(len(b.data)) {
			return fmt.Sprintf("access inside the buffer bound at index %v faulted (a write to read-only mapped memory?)", idx)
		}
	}
	for _, w := range d.all {
		if addr >= w.base && addr < w.base+uintptr(len(w.mem)) {
			return "stack overflow of a simulated thread (kernel locals larger than the sim's stacks)"
		}
	}
	return fmt.Sprintf("fault at address %#x (outside every bound buffer's guard page)", addr)
}
