//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// vectorKernels says whether the AVX2+FMA kernels of kernels_amd64.s run
// here; without them the Go loops do the work.
var vectorKernels = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// splitNibbles says that qdot4Kernel takes x as qdot4Lanes splits it.
const splitNibbles = true
