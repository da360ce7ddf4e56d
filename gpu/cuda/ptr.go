package cuda

import "unsafe"

// unsafePointer turns a CUDA managed-memory address, which is valid in the
// process's address space and not Go memory, into a pointer.
func unsafePointer(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}
