// Package shaders holds Petal's Metal Shading Language kernels, embedded
// into the binary and compiled at run time by a gpu driver (Metal on a Mac,
// the sim everywhere).
//
// # Layout
//
// One .metal file per kernel family, each opening with what it computes, its
// input layouts, the thread-to-data mapping, its threadgroup memory and the
// CPU reference it must match. args.h holds the argument struct of every
// kernel (bound at [[buffer(0)]]) and the tiling constants host and kernel
// share; args.go mirrors the structs in Go, and a test checks the two
// layouts agree.
//
// # Sources
//
// [Source] returns a file with its local includes ("args.h") expanded, the
// self-contained translation unit that Metal's newLibraryWithSource and the
// sim's compiler both take.
package shaders
