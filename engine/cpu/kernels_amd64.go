//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// vectorKernels says whether the AVX2+FMA kernels of kernels_amd64.s run
// here; without them the Go loops do the work.
var vectorKernels = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// splitNibbles says that qdot4Kernel takes x as qdot4Lanes splits it.
const splitNibbles = true

//go:noescape
func qdot4x2Kernel(words0, words1 *uint32, x *float32, scales0, scales1, biases0, biases1 *uint16, xsum *float32, groups, wordsPerGroup int, out *[2]float32)

// qdot4x2 is the two-row kernel on rows that qdot4PairVec has checked.
func qdot4x2(words [2][]uint32, x []float32, scales, biases [2][]uint16, xsum []float32, groups, wordsPerGroup int, out *[2]float32) {
	qdot4x2Kernel(&words[0][0], &words[1][0], &x[0], &scales[0][0], &scales[1][0], &biases[0][0], &biases[1][0], &xsum[0], groups, wordsPerGroup, out)
}
