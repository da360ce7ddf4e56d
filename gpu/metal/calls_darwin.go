//go:build darwin && arm64

package metal

import (
	"unsafe"

	"petal/gpu/metal/mtl"
)

// darwinCalls are the driver's calls through purego (mtl/call_darwin.go):
// typed, with the arguments in the caller's frame.
var darwinCalls = &calls{
	poolPush: mtl.PoolPush,
	poolPop:  func(f *frame, pool uintptr) { mtl.PoolPop(args(f), pool) },
	retain:   func(f *frame, id uintptr) { mtl.Retain(args(f), id) },
	release:  func(f *frame, id uintptr) { mtl.Release(args(f), id) },
	newBuffer: func(f *frame, dev uintptr, length uint) (uintptr, unsafe.Pointer) {
		return mtl.NewBuffer(args(f), dev, length)
	},
	newNoCopy: func(f *frame, dev uintptr, p unsafe.Pointer, length uint) uintptr {
		return mtl.NewBufferNoCopy(args(f), dev, p, length)
	},
	commandBuffer: func(f *frame, queue uintptr) uintptr { return mtl.CommandBufferOf(args(f), queue) },
	encoder:       func(f *frame, cb uintptr) uintptr { return mtl.ConcurrentEncoder(args(f), cb) },
	setPipeline:   func(f *frame, enc, pso uintptr) { mtl.SetPipeline(args(f), enc, pso) },
	setBuffer: func(f *frame, enc, buf uintptr, offset, index uint) {
		mtl.SetBuffer(args(f), enc, buf, offset, index)
	},
	setBuffers: func(f *frame, enc uintptr, bufs *uintptr, offsets *uint, start, count uint) {
		mtl.SetBuffers(args(f), enc, bufs, offsets, start, count)
	},
	setBufferOffset: func(f *frame, enc uintptr, offset, index uint) {
		mtl.SetBufferOffset(args(f), enc, offset, index)
	},
	setBytes: func(f *frame, enc uintptr, p unsafe.Pointer, length, index uint) {
		mtl.SetBytes(args(f), enc, p, length, index)
	},
	setThreadgroupMemory: func(f *frame, enc uintptr, length, index uint) {
		mtl.SetThreadgroupMemoryLength(args(f), enc, length, index)
	},
	dispatch: func(f *frame, enc uintptr, groups, threads *mtlSize) {
		mtl.Dispatch(args(f), enc, (*mtl.Size)(unsafe.Pointer(groups)), (*mtl.Size)(unsafe.Pointer(threads)))
	},
	barrier:     func(f *frame, enc uintptr) { mtl.Barrier(args(f), enc) },
	endEncoding: func(f *frame, enc uintptr) { mtl.EndEncoding(args(f), enc) },
	commit:      func(f *frame, cb uintptr) { mtl.Commit(args(f), cb) },
	wait:        func(f *frame, cb uintptr) { mtl.WaitUntilCompleted(args(f), cb) },
	status:      func(f *frame, cb uintptr) cbStatus { return cbStatus(mtl.Status(args(f), cb)) },
	errorOf:     mtl.ErrorOf,
}

// args is f as mtl's argument block (the same array type: frameArgs
// equals mtl.MaxArgs, or this does not compile).
func args(f *frame) *mtl.Args { return (*mtl.Args)(f) }

// mtlSize and mtl.Size are both MTLSize.
var _ = [1]struct{}{}[unsafe.Sizeof(mtlSize{})-unsafe.Sizeof(mtl.Size{})]
