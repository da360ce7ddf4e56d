package metal

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"petal/gpu"
)

// The driver over counting stand-ins for its Objective-C calls: what runs
// on a Mac minus Metal itself, so the buffers, views and encoding are
// tested, and their calls counted, on any machine.

// call names one entry of the calls table.
type call int

const (
	cPoolPush call = iota
	cPoolPop
	cRetain
	cRelease
	cNewBuffer
	cNewNoCopy
	cCommandBuffer
	cEncoder
	cSetPipeline
	cSetBuffer
	cSetBufferOffset
	cSetBuffers
	cSetBytes
	cSetThreadgroupMemory
	cDispatch
	cBarrier
	cEndEncoding
	cCommit
	cWait
	cStatus
	cErrorOf
	numCalls
)

var callNames = [numCalls]string{
	"poolPush", "poolPop", "retain", "release", "newBuffer", "newNoCopy", "commandBuffer", "encoder",
	"setPipeline", "setBuffer", "setBufferOffset", "setBuffers", "setBytes", "setThreadgroupMemory", "dispatch",
	"barrier", "endEncoding", "commit", "wait", "status", "errorOf",
}

// bound is one setBuffer or setBufferOffset seen (buf 0 for the latter).
type bound struct {
	buf           uintptr
	offset, index uint
}

// noCopy is one no-copy buffer made: its id, start and length.
type noCopy struct {
	id     uintptr
	p      unsafe.Pointer
	length uint
}

// fake stands in for Metal. Counting allocates nothing; with log set it
// also keeps the bindings and views made. Like the darwin calls, each
// writes into the argument block it is handed.
type fake struct {
	mu     sync.Mutex
	n      [numCalls]int
	nextID uintptr
	pools  int // open autorelease pools
	log    bool
	binds  []bound
	views  []noCopy
	mem    map[uintptr][]byte
	status cbStatus
}

func (f *fake) count(c call) {
	f.mu.Lock()
	f.n[c]++
	f.mu.Unlock()
}

func (f *fake) id() uintptr {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return f.nextID
}

// counts returns the calls made so far and starts counting afresh.
func (f *fake) counts() [numCalls]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.n
	f.n = [numCalls]int{}
	return n
}

func (f *fake) table() *calls {
	return &calls{
		poolPush: func() uintptr {
			f.count(cPoolPush)
			f.mu.Lock()
			f.pools++
			f.mu.Unlock()
			return 1
		},
		poolPop: func(fr *frame, pool uintptr) {
			send(fr, pool)
			f.count(cPoolPop)
			f.mu.Lock()
			f.pools--
			f.mu.Unlock()
		},
		retain:  func(fr *frame, id uintptr) { send(fr, id); f.count(cRetain) },
		release: func(fr *frame, id uintptr) { send(fr, id); f.count(cRelease) },
		newBuffer: func(fr *frame, dev uintptr, length uint) (uintptr, unsafe.Pointer) {
			send(fr, dev)
			f.count(cNewBuffer)
			b := make([]byte, length)
			for i := range b {
				b[i] = 0xAA // Metal promises no zeroes; NewBuffer must clear
			}
			id := f.id()
			f.mu.Lock()
			f.mem[id] = b
			f.mu.Unlock()
			return id, unsafe.Pointer(&b[0])
		},
		newNoCopy: func(fr *frame, dev uintptr, p unsafe.Pointer, length uint) uintptr {
			send(fr, dev)
			f.count(cNewNoCopy)
			id := f.id()
			if f.log {
				f.mu.Lock()
				f.views = append(f.views, noCopy{id, p, length})
				f.mu.Unlock()
			}
			return id
		},
		commandBuffer: func(fr *frame, queue uintptr) uintptr { send(fr, queue); f.count(cCommandBuffer); return f.id() },
		encoder:       func(fr *frame, cb uintptr) uintptr { send(fr, cb); f.count(cEncoder); return f.id() },
		setPipeline:   func(fr *frame, enc, _ uintptr) { send(fr, enc); f.count(cSetPipeline) },
		setBuffer: func(fr *frame, enc uintptr, buf uintptr, offset, index uint) {
			send(fr, enc)
			f.count(cSetBuffer)
			if f.log {
				f.binds = append(f.binds, bound{buf, offset, index})
			}
		},
		setBufferOffset: func(fr *frame, enc uintptr, offset, index uint) {
			send(fr, enc)
			f.count(cSetBufferOffset)
			if f.log {
				f.binds = append(f.binds, bound{0, offset, index})
			}
		},
		setBuffers: func(fr *frame, enc uintptr, bufs *uintptr, offsets *uint, start, count uint) {
			send(fr, enc)
			f.count(cSetBuffers)
			if f.log {
				b, o := unsafe.Slice(bufs, count), unsafe.Slice(offsets, count)
				for i := range count {
					f.binds = append(f.binds, bound{b[i], o[i], start + i})
				}
			}
		},
		setBytes:             func(fr *frame, enc uintptr, _ unsafe.Pointer, _, _ uint) { send(fr, enc); f.count(cSetBytes) },
		setThreadgroupMemory: func(fr *frame, enc uintptr, _, _ uint) { send(fr, enc); f.count(cSetThreadgroupMemory) },
		dispatch:             func(fr *frame, enc uintptr, _, _ *mtlSize) { send(fr, enc); f.count(cDispatch) },
		barrier:              func(fr *frame, enc uintptr) { send(fr, enc); f.count(cBarrier) },
		endEncoding:          func(fr *frame, enc uintptr) { send(fr, enc); f.count(cEndEncoding) },
		commit:               func(fr *frame, cb uintptr) { send(fr, cb); f.count(cCommit) },
		wait:                 func(fr *frame, cb uintptr) { send(fr, cb); f.count(cWait) },
		status:               func(fr *frame, cb uintptr) cbStatus { send(fr, cb); f.count(cStatus); return f.status },
		errorOf: func(uintptr) error {
			f.count(cErrorOf)
			return fmt.Errorf("the GPU timed out")
		},
	}
}

// send writes a call's receiver into its argument block, as the darwin
// calls do, so that the race detector sees two calls sharing a block.
func send(fr *frame, id uintptr) { fr[0] = id }

// fakeCompiler hands out pipeline ids.
type fakeCompiler struct{ f *fake }

func (c fakeCompiler) pipeline(gpu.Source, string, []gpu.Constant) (uintptr, int, error) {
	return c.f.id(), gpu.MaxThreadsPerThreadgroup, nil
}
func (fakeCompiler) close()                 {}
func (fakeCompiler) libraryNotes() []string { return nil }

// applePage is Apple silicon's VM page.
const applePage = 16 << 10

// newFake opens the driver over a fake Metal whose buffers hold at most
// maxBuffer bytes.
func newFake(t testing.TB, maxBuffer int) (*Device, *fake) {
	f := &fake{mem: map[uintptr][]byte{}, status: cbCompleted, nextID: 100}
	d := newDevice(f.table(), f.id(), f.id(), gpu.Info{Name: "fake"}, applePage, maxBuffer, fakeCompiler{f})
	t.Cleanup(func() { d.Close() })
	return d, f
}
