// Package msl is what the drivers that compile Metal Shading Language
// themselves share (the sim as host C++, the cuda driver as CUDA C++): the
// rewrite of what C++ cannot express ([Rewrite], for a driver's [Target]),
// the rules Apple's Metal compiler enforces ([Rules]), and the C++ headers
// of MSL's vector types and of the math both write alike over their own
// scalar math ([Headers]), which each driver's compat header includes.
//
// # The rules, and those left out
//
// Each [Rule] is something Apple's compiler refuses (or treats otherwise)
// that host C++ or CUDA takes, so a kernel breaking it would pass every
// test here and fail on a Mac. The list came from reading the MSL
// specification (3.1 and 3.2), Apple's headers and how MLX and llama.cpp
// write their kernels against what the two compat headers let through.
// Beside the rules, the sim itself catches at run time what only a run
// shows: divergent simd-group calls and barriers (ErrDivergence,
// ErrDeadlock), races and reads of unwritten threadgroup memory (ErrRace),
// out-of-bounds accesses, integer division by zero and shifts by a
// type's width or more (ErrTrap, from a trap compiled into every
// variable shift).
//
// Considered and left out, with the reason:
//   - Threadgroup arrays of non-constant size, and variable-length arrays
//     generally: the sim compiles with -std=c++14 -pedantic-errors, which
//     refuses them, and function constants (the only run-time constant MSL
//     allows there) become constexpr; a rule would repeat the compiler.
//   - A barrier or simd-group function in divergent control flow: whether
//     the flow diverges depends on the data, so a token rule would refuse
//     the uniform branches the kernels rely on; the sim reports the
//     divergent case when it happens (ErrDivergence, ErrDeadlock), and
//     the kernel tests run it.
//   - half and bfloat availability: Petal compiles with
//     MTLLanguageVersion 3.1, the first with bfloat, and needs Apple7, which
//     has both; no setting under which one is missing is ever used.
//   - simd_* functions, simdgroup matrices and other functions that need a
//     given GPU family: the compat headers define only what Apple7 (Petal's
//     minimum, gpu.MinAppleFamily) has, so a kernel calling anything newer
//     (simd_shuffle_and_fill_down, for one) does not
//     compile here; the header is the allow-list, and adding to it is where
//     a function's family is checked.
//   - The type of [[thread_position_in_grid]] and the other inputs is
//     RuleInputType and RuleInputShape; nothing further differs.
//   - Signed integer overflow: undefined in MSL as in C++, so no answer is
//     the GPU's to match; trapping on it (-fsanitize=signed-integer-overflow)
//     would check every int add and multiply of the hot loops. The host
//     refuses shapes whose element counts pass int32 instead.
//   - Misaligned vector loads through a cast pointer: the host checks the
//     alignment of every view a kernel reads as float4 (shaders' vectorAlign
//     and offsetAlign); a compiled-in check (-fsanitize=alignment) would
//     test every load.
//   - Metal's own keywords used as names (vertex, fragment, kernel, device,
//     constant, thread, threadgroup): the rewriter treats the last five as
//     keywords wherever they appear, so such a name fails the rewrite or
//     the C++ compile; vertex and fragment would pass, and Petal's kernels
//     are compute only, with no name that could collide.
//   - Member functions called on an object in the device or constant
//     address space, which MSL allows only when the function is declared
//     for that space: no kernel calls a member function on such an object
//     (argument structs are plain fields), and telling the spaces apart
//     needs the types a token rule does not have; Apple's compiler is the
//     check.
//   - [[max_total_threads_per_threadgroup(N)]] beyond the limit, and
//     attribute expressions: the rewrite refuses N outside 1..1024 and
//     evaluates integer macro expressions as Apple's compiler does.
package msl
