package metal

import "unsafe"

// frameArgs is the most arguments one call passes, receiver and selector
// included (newBufferWithBytesNoCopy:length:options:deallocator: has 6);
// it equals mtl.MaxArgs, which the darwin build's conversions check.
const frameArgs = 6

// frame is the argument block of one call. The darwin build writes a
// call's arguments into it and hands it to purego, which costs no
// allocation when the block lives in a heap object that outlives the call
// (a command buffer, a buffer); a fresh one would be moved to the heap on
// every call. Stand-ins ignore it.
type frame [frameArgs]uintptr

// mtlSize is an MTLSize: three NSUIntegers.
type mtlSize struct{ width, height, depth uint }

// cbStatus is an MTLCommandBufferStatus.
type cbStatus uint

// The statuses the driver tells apart.
const (
	cbCompleted cbStatus = 4
	cbError     cbStatus = 5
)

// calls is every Objective-C call the driver's buffers and command buffers
// make, as typed functions of object ids (uintptr). The darwin build fills
// it from purego (calls_darwin.go); tests on any machine fill it with
// counting stand-ins, so the encoding logic below runs and is measured
// off a Mac.
type calls struct {
	// poolPush and poolPop open and drain an autorelease pool on this
	// thread (objc_autoreleasePoolPush/Pop).
	poolPush func() uintptr
	poolPop  func(f *frame, pool uintptr)
	retain   func(f *frame, id uintptr)
	release  func(f *frame, id uintptr)

	// newBuffer is newBufferWithLength:options: (shared): the owned
	// buffer and its contents, or 0.
	newBuffer func(f *frame, dev uintptr, length uint) (uintptr, unsafe.Pointer)
	// newNoCopy is newBufferWithBytesNoCopy:length:options:deallocator:
	// (shared, no deallocator): owned, or 0.
	newNoCopy func(f *frame, dev uintptr, p unsafe.Pointer, length uint) uintptr

	// commandBuffer ([queue commandBuffer]) and encoder
	// (computeCommandEncoderWithDispatchType: concurrent) return
	// autoreleased objects, or 0.
	commandBuffer func(f *frame, queue uintptr) uintptr
	encoder       func(f *frame, cb uintptr) uintptr

	setPipeline     func(f *frame, enc, pso uintptr)
	setBuffer       func(f *frame, enc, buf uintptr, offset, index uint)
	setBufferOffset func(f *frame, enc uintptr, offset, index uint)
	// setBuffers binds count buffers (bufs[0:count] at offsets[0:count])
	// to the slots from start: one call for a run of slots.
	setBuffers func(f *frame, enc uintptr, bufs *uintptr, offsets *uint, start, count uint)
	// setBytes copies length bytes at p before it returns.
	setBytes             func(f *frame, enc uintptr, p unsafe.Pointer, length, index uint)
	setThreadgroupMemory func(f *frame, enc uintptr, length, index uint)
	dispatch             func(f *frame, enc uintptr, groups, threads *mtlSize)
	// barrier is memoryBarrierWithScope: buffers.
	barrier     func(f *frame, enc uintptr)
	endEncoding func(f *frame, enc uintptr)

	commit func(f *frame, cb uintptr)
	wait   func(f *frame, cb uintptr)
	status func(f *frame, cb uintptr) cbStatus
	// errorOf is the command buffer's error (inside a pool).
	errorOf func(cb uintptr) error
}
