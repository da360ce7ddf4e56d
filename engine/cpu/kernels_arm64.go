//go:build !purego

package cpu

// vectorKernels is true: the NEON (Advanced SIMD) of kernels_arm64.s is
// part of every ARMv8-A core, the least that Go's arm64 port runs on.
const vectorKernels = true

// splitNibbles is false: the NEON qdot4Kernel takes x in its own order.
const splitNibbles = false
