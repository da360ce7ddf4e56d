//go:build !purego

package cpu

// vectorKernels is true: the NEON (Advanced SIMD) of kernels_arm64.s is
// part of every ARMv8-A core, the least that Go's arm64 port runs on.
const vectorKernels = true

// qdot4Words is the multiple of words a group must span for the NEON
// 4-bit kernel.
const qdot4Words = 4

// qdot4Lanes returns x: the NEON qdot4Kernel takes x in its own order.
func qdot4Lanes(_ *[]float32, x []float32) []float32 { return x }

// qdot4x2 is the NEON row kernel on each of the two rows that
// qdot4PairVec has checked: arm64 has no two-row kernel (its row kernel
// is not timed on arm64 hardware yet, so nothing says what would pay).
func qdot4x2(words [2][]uint32, x []float32, scales, biases [2][]uint16, xsum []float32, groups, wordsPerGroup int, out *[2]float32) {
	for k := range 2 {
		out[k] = qdot4Kernel(&words[k][0], &x[0], &scales[k][0], &biases[k][0], &xsum[0], groups, wordsPerGroup)
	}
}
