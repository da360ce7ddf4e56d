// Package gpu is Petal's device layer: the small interface through which the
// engine drives a GPU, and the types its drivers share.
//
// # Layers
//
// The engine talks only to [Device], [Buffer], [Pipeline] and
// [CommandBuffer]. Two drivers implement them: petal/gpu/metal runs on the
// Mac's GPU (darwin/arm64, purego + Objective-C, no cgo) and petal/gpu/sim
// runs the very same Metal Shading Language kernels on the CPU of any
// machine, with threadgroup semantics and hazard checks. Kernels live in
// petal/shaders; this package does not import them.
//
// # Execution model
//
// A command buffer holds one concurrent compute pass: dispatches between two
// barriers may run in any order or overlap, and [CommandBuffer.Barrier] orders
// everything before it against everything after it (Metal's
// memoryBarrierWithScope over buffers). A command buffer is encoded, then
// committed, then waited on; command buffers of one device run in commit
// order, so two may be in flight at once.
//
// # Recording
//
// Every command buffer keeps a driver-independent [Trace] of what was encoded
// (pipelines, grid sizes, bindings, barriers), so tools can count dispatches
// and dependency levels per decode token without a GPU.
package gpu
