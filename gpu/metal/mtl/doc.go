// Package mtl binds the compute subset of Apple's Metal API that Petal
// uses, through purego and the Objective-C runtime (no cgo): device, command
// queue, command buffer, concurrent compute encoder, library compiled from
// source with function constants, compute pipeline, shared and no-copy
// buffers. It is a small fraction of Metal, wrapped by hand and called only
// by petal/gpu/metal.
//
// # Conventions
//
// Selectors and classes are registered once in package-level var blocks,
// named sel_ + selector (colons as underscores) and class_ + class name. Each
// Objective-C type is a small Go value holding its objc.ID, with one method
// per selector named from the selector's first part and a Reference link.
// Enums are typed integers with the values of Apple's headers. NSError
// out-parameters become Go errors where they arise; nil results are checked
// on the spot. The calls made for every dispatch (call_darwin.go) are plain
// functions of object ids instead, through objc_msgSend with purego.SyscallN
// on an argument block the caller keeps, which allocates nothing.
//
// # Lifetimes
//
// Objects returned by new/alloc/copy methods are owned (+1) and must be
// released with Release; other results are autoreleased, so callers run
// inside an autorelease pool on a locked OS thread ([WithPool]) and Retain
// what they keep.
//
// The code builds only for darwin/arm64 (the GPUs Petal supports); on other
// platforms the package is empty.
package mtl
