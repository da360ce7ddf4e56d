//go:build !purego

package cpu

// vectorKernels is true: the NEON (Advanced SIMD) of kernels_arm64.s is
// part of every ARMv8-A core, the least that Go's arm64 port runs on.
const vectorKernels = true

// wideKernels is false: arm64 has no wide kernel (see qdotx2).
const wideKernels = false

// qdot4Words is the multiple of words a group must span for the NEON
// 4-bit kernel.
const qdot4Words = 4

// qdot4Lanes returns x: the NEON qdot4Kernel takes x in its own order.
func qdot4Lanes(_ *[]float32, x []float32) []float32 { return x }

// qdotx2 is the NEON row kernel of bits on each of the two rows that
// qdotPairVec has checked: arm64 has no two-row kernel (its row kernels
// are not timed on arm64 hardware yet, so nothing says what would pay).
func qdotx2(bits int, words [2][]uint32, x []float32, scales, biases [2][]uint16, xsum []float32, groups, wordsPerGroup int, out *[2]float32) {
	for i := range 2 {
		if bits == 8 {
			out[i] = qdot8Kernel(&words[i][0], &x[0], &scales[i][0], &biases[i][0], &xsum[0], groups, wordsPerGroup)
		} else {
			out[i] = qdot4Kernel(&words[i][0], &x[0], &scales[i][0], &biases[i][0], &xsum[0], groups, wordsPerGroup)
		}
	}
}

// qdotQuadVec reports false: arm64 has no kernel of four inputs (see
// qdotx2), and each input takes the row kernel.
func qdotQuadVec(int, []uint32, [4][]float32, []uint16, []uint16, [4][]float32, int, *[4]float32) bool {
	return false
}

func qdotPairsWideVec([]uint32, []uint16, []uint16, int, []float32, []float32, int, []float32) bool {
	return false
}
