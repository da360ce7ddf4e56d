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
// # Math
//
// Kernels compute in IEEE 754 binary32 with fast math off, on both drivers.
// Metal's default (fastMathEnabled = YES) lets the compiler assume no NaN
// and no infinity, and then fold isnan(x) to false and x > -INFINITY to
// true; Petal's kernels depend on both: argmax and the router top-k skip NaN
// logits and start from -INFINITY, and the softmax of the router maps NaN to
// -INFINITY before exp. So petal/gpu/metal compiles with mathMode =
// MTLMathModeSafe and mathFloatingPointFunctions = Precise on macOS 15 and
// later, and fastMathEnabled = NO on macOS 14, which mean the same. The
// relaxed mode would keep NaN and infinity but let the compiler reassociate
// and contract, so results would move with compiler versions; kernels that
// want a faster function ask for it by name (fast::exp) where its accuracy
// is enough. petal/gpu/sim matches: no -ffast-math, no FMA contraction
// (-ffp-contract=off), floating literals without a suffix are float (Metal
// has no double), so the sim's results are the ones the Mac should give up
// to the documented error of Metal's precise functions.
//
// # Recording
//
// Every command buffer keeps a driver-independent [Trace] of what was encoded
// (pipelines, grid sizes, bindings, barriers), so tools can count dispatches
// and dependency levels per decode token without a GPU.
package gpu
