//go:build darwin && arm64

package mtl

import (
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// The calls petal/gpu/metal makes for every dispatch and barrier go through
// objc_msgSend with concrete uintptr arguments and purego.SyscallN on an
// argument block the caller keeps (Args). objc.ID.Send boxes each argument
// in an any and goes through reflect, and a function registered with
// purego.RegisterFunc, however concrete its signature, goes through
// reflect.MakeFunc: both allocate 6-7 times a call (BenchmarkPuregoCall in
// petal/gpu/metal, on a loaded 2-core Linux VM with purego v0.11.3: 420-3000
// ns and 176 bytes a call, against 80-270 ns and none for SyscallN on a
// kept block; a fresh argument list costs SyscallN one allocation, as the
// uintptrescapes directive on it moves the list to the heap).
//
// No call here takes a float, which SyscallN cannot mix with integers, and
// an MTLSize (24 bytes, more than the 16 AAPCS64 passes in registers)
// travels as a pointer to a copy the caller keeps, which is how arm64
// passes a composite that large.

// MaxArgs is the most arguments a call below passes, receiver and selector
// included (newBufferWithBytesNoCopy:length:options:deallocator: has 6).
const MaxArgs = 6

// Args is the argument block of one call. Kept in a long-lived heap object
// (a command buffer), it costs no allocation; a pointer stored in it as a
// uintptr must point into the heap, which does not move, and stay alive
// through the call.
type Args = [MaxArgs]uintptr

var (
	msgSendFn uintptr
	poolPush  uintptr
	poolPop   uintptr
)

// msgSend sends sel to id with the first n-2 values of rest after them.
func msgSend(a *Args, id uintptr, sel objc.SEL, n int) uintptr {
	a[0], a[1] = id, uintptr(sel)
	r, _, _ := purego.SyscallN(msgSendFn, a[:n]...)
	return r
}

// PoolPush opens an autorelease pool on this thread.
//
// Reference: https://developer.apple.com/documentation/foundation/nsautoreleasepool
func PoolPush() uintptr {
	r, _, _ := purego.SyscallN(poolPush)
	return r
}

// PoolPop drains the pool PoolPush opened on this thread.
func PoolPop(a *Args, pool uintptr) {
	a[0] = pool
	purego.SyscallN(poolPop, a[:1]...)
}

// Retain takes a reference to id.
func Retain(a *Args, id uintptr) { msgSend(a, id, sel_retain, 2) }

// Release drops a reference to id.
func Release(a *Args, id uintptr) { msgSend(a, id, sel_release, 2) }

// NewBuffer is newBufferWithLength:options: (owned) and the buffer's
// contents; 0 and nil when Metal refused.
func NewBuffer(a *Args, dev uintptr, length uint) (uintptr, unsafe.Pointer) {
	a[2], a[3] = uintptr(length), uintptr(ResourceStorageModeShared)
	id := msgSend(a, dev, sel_newBufferWithLength_options, 4)
	if id == 0 {
		return 0, nil
	}
	return id, Buffer{Object{objc.ID(id)}}.Contents()
}

// NewBufferNoCopy is newBufferWithBytesNoCopy:length:options:deallocator:
// with no deallocator (owned; 0 when Metal refused). p and length must be
// page-aligned.
func NewBufferNoCopy(a *Args, dev uintptr, p unsafe.Pointer, length uint) uintptr {
	a[2], a[3], a[4], a[5] = uintptr(p), uintptr(length), uintptr(ResourceStorageModeShared), 0
	return msgSend(a, dev, sel_newBufferWithBytesNoCopy_length_options_deallocator, 6)
}

// CommandBufferOf is [queue commandBuffer] (autoreleased; 0 on failure).
func CommandBufferOf(a *Args, queue uintptr) uintptr { return msgSend(a, queue, sel_commandBuffer, 2) }

// ConcurrentEncoder is computeCommandEncoderWithDispatchType: concurrent
// (autoreleased; 0 on failure).
func ConcurrentEncoder(a *Args, cb uintptr) uintptr {
	a[2] = uintptr(DispatchTypeConcurrent)
	return msgSend(a, cb, sel_computeCommandEncoderWithDispatchType, 3)
}

// SetPipeline is setComputePipelineState:.
func SetPipeline(a *Args, enc, pso uintptr) {
	a[2] = pso
	msgSend(a, enc, sel_setComputePipelineState, 3)
}

// SetBuffer is setBuffer:offset:atIndex:.
func SetBuffer(a *Args, enc, buf uintptr, offset, index uint) {
	a[2], a[3], a[4] = buf, uintptr(offset), uintptr(index)
	msgSend(a, enc, sel_setBuffer_offset_atIndex, 5)
}

// SetBuffers is setBuffers:offsets:withRange:, binding count buffers
// from slot start; bufs and offsets point at count ids and offsets. The
// NSRange (16 bytes) travels in two registers, as arm64 passes a composite
// that small.
//
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443134-setbuffers
func SetBuffers(a *Args, enc uintptr, bufs *uintptr, offsets *uint, start, count uint) {
	a[2], a[3], a[4], a[5] = uintptr(unsafe.Pointer(bufs)), uintptr(unsafe.Pointer(offsets)), uintptr(start), uintptr(count)
	msgSend(a, enc, sel_setBuffers_offsets_withRange, 6)
}

// SetBufferOffset is setBufferOffset:atIndex: (the buffer bound there
// stays).
//
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443137-setbufferoffset
func SetBufferOffset(a *Args, enc uintptr, offset, index uint) {
	a[2], a[3] = uintptr(offset), uintptr(index)
	msgSend(a, enc, sel_setBufferOffset_atIndex, 4)
}

// SetBytes is setBytes:length:atIndex:; Metal copies the bytes before it
// returns.
func SetBytes(a *Args, enc uintptr, p unsafe.Pointer, length, index uint) {
	a[2], a[3], a[4] = uintptr(p), uintptr(length), uintptr(index)
	msgSend(a, enc, sel_setBytes_length_atIndex, 5)
}

// SetThreadgroupMemoryLength is setThreadgroupMemoryLength:atIndex:.
func SetThreadgroupMemoryLength(a *Args, enc uintptr, length, index uint) {
	a[2], a[3] = uintptr(length), uintptr(index)
	msgSend(a, enc, sel_setThreadgroupMemoryLength_atIndex, 4)
}

// Dispatch is dispatchThreadgroups:threadsPerThreadgroup:.
func Dispatch(a *Args, enc uintptr, groups, threads *Size) {
	a[2], a[3] = uintptr(unsafe.Pointer(groups)), uintptr(unsafe.Pointer(threads))
	msgSend(a, enc, sel_dispatchThreadgroups_threadsPerThreadgroup, 4)
}

// Barrier is memoryBarrierWithScope: buffers.
func Barrier(a *Args, enc uintptr) {
	a[2] = uintptr(BarrierScopeBuffers)
	msgSend(a, enc, sel_memoryBarrierWithScope, 3)
}

// EndEncoding closes the pass.
func EndEncoding(a *Args, enc uintptr) { msgSend(a, enc, sel_endEncoding, 2) }

// Commit submits a command buffer.
func Commit(a *Args, cb uintptr) { msgSend(a, cb, sel_commit, 2) }

// WaitUntilCompleted blocks until the GPU finished cb.
func WaitUntilCompleted(a *Args, cb uintptr) { msgSend(a, cb, sel_waitUntilCompleted, 2) }

// Status is cb's MTLCommandBufferStatus.
func Status(a *Args, cb uintptr) CommandBufferStatus {
	return CommandBufferStatus(msgSend(a, cb, sel_status, 2))
}

// ErrorOf is cb's execution error, nil if none; call it inside a pool.
func ErrorOf(cb uintptr) error { return CommandBuffer{Object{objc.ID(cb)}}.Error() }
