// Package sim is a gpu driver that runs Petal's Metal kernels on the CPU of
// any machine, so the GPU path is tested where no Mac is.
//
// # Compiling
//
// NewPipeline rewrites the MSL source into C++ (rewrite.go: kernel
// signatures and their [[attributes]], threadgroup storage, function
// constants specialised as constexpr, swizzles, half literals), prepends
// metal_compat.h (MSL types, math, simd-group functions, atomics, and the
// fiber runtime), and builds a shared library with the system C++ compiler.
// Libraries are cached by the hash of compiler, flags and full text, under
// $PETAL_SIM_CACHE or os.UserCacheDir()/petal/sim, and loaded with purego:
// no cgo.
//
// # Executing
//
// Each dispatch's threadgroups are spread over worker goroutines; each
// threadgroup runs on one OS thread, its GPU threads as fibers (a hand-written
// context switch on x86-64, ucontext elsewhere). A fiber runs until a
// barrier, a simd-group call or its end. When all are blocked, a simd-group
// whose live lanes wait at the same simd call exchanges values and resumes;
// otherwise a barrier that every thread reached releases. Within a level of
// a command buffer (between barriers) dispatches run in reverse order, so a
// missing barrier between dependent dispatches changes results.
//
// # Hazards
//
// Each is a [*HazardError] wrapping one sentinel:
//   - [ErrDivergence]: lanes of a simd-group are blocked at different simd
//     calls, or some at a simd call and some at a barrier. Lanes that have
//     returned are inactive, as on the GPU.
//   - [ErrDeadlock]: every live thread waits at a barrier but some threads
//     returned, or they wait at different barriers.
//   - [ErrRace]: unless Options.Fast, every dispatch runs twice, with threads
//     (and threadgroups) in index order and then in reverse, and different
//     poison in threadgroup memory; any difference in a buffer it may write
//     means the result depends on thread order (a missing barrier, a read of
//     threadgroup memory no one wrote, two threadgroups writing one element). A kernel whose output may legitimately depend
//     on order (an atomic append) needs a device with Options.Fast.
//     Buffers from WrapNoCopy are never snapshotted: kernels only read them.
//   - [ErrOutOfBounds]: buffers the sim allocates end against a guard page;
//     an access past the end faults and is reported (an access past the end
//     but within the 16-byte alignment padding, or into a wrapped buffer, is
//     not caught).
package sim
