// Package sim is a gpu driver that runs Petal's Metal kernels on the CPU of
// any machine, so the GPU path is tested where no Mac is.
//
// # Compiling
//
// NewPipeline rewrites the MSL source into C++ (petal/gpu/msl: kernel
// signatures and their [[attributes]], threadgroup storage, function
// constants specialised as constexpr, swizzles, half and float literals),
// includes metal_compat.h (MSL math, simd-group functions, atomics, and the
// fiber runtime, over petal/gpu/msl's vector types and the math both
// compiling drivers write alike), and builds a shared library with the
// system C++ compiler (C++14, IEEE arithmetic: see cxxFlags and petal/gpu's
// Math section).
// Libraries are cached by the hash of compiler, flags, headers and text, under
// $PETAL_SIM_CACHE or os.UserCacheDir()/petal/sim, and loaded with purego:
// no cgo.
//
// # Apple's rules
//
// C++ takes much that Apple's Metal compiler refuses, so NewPipeline refuses
// it too (petal/gpu/msl, citing the MSL 3.1 specification), with a [*RuleError]
// that names the file and line (following #line from expanded includes):
// kernel position and size inputs all scalar or all vectors of one width,
// and of uint or ushort; an address space on every pointer and reference; no
// pointer flowing into another address space without a cast (within a
// function, from a named pointer or threadgroup array); program-scope and
// static local variables only in the constant address space; threadgroup
// storage declared only in a kernel's outermost block, not a helper or a
// nested block; atomics of
// 32-bit int, uint, bool or float only; no C library, CUDA or __ names; no
// double, recursion, function pointers, exceptions, C++ standard library,
// new/delete, virtual, derived classes, dynamic_cast, typeid, goto,
// register or thread_local; and C++14 only: the kernel compiles with
// -std=c++14 -pedantic-errors (the compat header as a system header) and
// C++17 attributes are refused. [Rules] lists them; testdata/rule_*.metal
// break one each; petal/gpu/msl's package comment lists the rules
// considered and left out, and why. What Apple's compiler checks beyond
// these (overload resolution across address spaces, address spaces inside
// macros and templates it instantiates, its own warnings-as-errors) is
// seen only on a Mac.
//
// # What kernels may use
//
// Plain MSL as Apple's compiler takes it, within these limits (extend
// petal/gpu/msl or metal_compat.h rather than bend a kernel):
//   - entry points are `kernel void name(...)` (or `[[kernel]] void`), every
//     parameter with one attribute: [[buffer(n)]] (optionally with
//     function_constant(c)), [[threadgroup(n)]] or a thread-position
//     builtin; templated entry points and [[host_name]] are not supported;
//   - function constants are bool, int, uint or float scalars;
//   - threadgroup variables are declared one per statement, without an
//     initialiser (as MSL requires);
//   - member names shaped like swizzles (xy, rgb, wzyx) are swizzles;
//   - everything in metal_compat.h and the msl headers it includes: scalar,
//     vector and packed types
//     (including half and bfloat), math in metal::, fast:: and precise::,
//     simd-group reductions, shuffles, prefix sums, ballot and broadcast,
//     8x8 simdgroup matrices (load, store, multiply, multiply-accumulate;
//     each lane holds the whole matrix), barriers, atomics on device and
//     threadgroup memory.
//
// # Executing
//
// Each dispatch's threadgroups are spread over worker goroutines; each
// threadgroup runs on one OS thread, its GPU threads as fibers (a
// hand-written context switch on x86-64 Linux and arm64, ucontext
// elsewhere). A fiber runs until a barrier, a simd-group call or its end.
// When all are blocked, simd-groups whose live lanes wait at the same simd
// call exchange values and resume (see ErrRace for which); otherwise a
// barrier that every thread reached releases. Within a level of
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
//     poison in threadgroup memory; the first run releases every waiting
//     simd-group at once, so simd-groups advance in step, the second only
//     the last, which runs ahead to its next barrier (so a write missing a
//     barrier after another simd-group's reads overtakes them, as it may on
//     the GPU); any difference in a buffer it may write
//     means the result depends on thread order (a missing barrier, a read of
//     threadgroup memory no one wrote, two threadgroups writing one
//     element). A simd shuffle or broadcast from a lane that returned or does
//     not exist yields poison, so a result depending on it is caught the same
//     way. A kernel whose output may legitimately depend on order (an atomic
//     append) needs a device with Options.Fast. Buffers from WrapNoCopy are
//     never snapshotted: kernels only read them.
//   - [ErrOutOfBounds]: buffers the sim allocates end against a guard page;
//     an access past the end faults and is reported (an access past the end
//     but within the 16-byte alignment padding, or into a wrapped buffer, is
//     not caught). Writes to read-only mapped memory and overflows of a
//     simulated thread's stack are reported the same way.
//   - [ErrTrap]: integer division by zero, which traps on the CPU, and,
//     unless Options.Fast, a shift by the width of its operand or more (or
//     by a negative amount), which the kernels are then compiled to trap on
//     (see shiftCheckFlags): both are undefined, and a GPU answers them
//     differently from the CPU.
//
// Faults in Go code are passed on to Go's own handler, so they still panic.
package sim
