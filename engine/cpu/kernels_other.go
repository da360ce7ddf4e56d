//go:build !(amd64 || arm64) || purego

package cpu

// vectorKernels is false: this build has only the Go loops.
const vectorKernels = false

const wideKernels = false

func servesGroups(int, int) bool { return false }

func qdotRowVec(int, []uint32, []float32, []uint16, []uint16, []float32, int) (float32, bool) {
	return 0, false
}

func qdotPairVec(int, [2][]uint32, []float32, [2][]uint16, [2][]uint16, []float32, int, *[2]float32) bool {
	return false
}

func qdotQuadVec(int, []uint32, [4][]float32, []uint16, []uint16, [4][]float32, int, *[4]float32) bool {
	return false
}

func qdot4Lanes(_ *[]float32, x []float32) []float32 { return x }

func dotVec(_, _ []float32) (float32, int) { return 0, 0 }

func dot4RowsVec([]float32, int, []float32, int, *[4]float32) bool { return false }

func dot4x3Vec([]float32, int, []float32, int, int, *[12]float32) bool { return false }

func axpy64Vec([]float32, int, []float32, []float32) bool { return false }

func axpy32x3Vec([]float32, int, []float32, int, int, []float32, int) bool { return false }

func expShiftVec([]float32, float32) (float32, int) { return 0, 0 }

func deltaRows32Vec([]float32, int, []float32, []float32, float32, []float32, []float32) bool {
	return false
}

func scaledCodesVec(int, []uint32, []uint16, []float32, int) bool { return false }

func qdotPairsWideVec([]uint32, []uint16, []uint16, int, []float32, []float32, int, []float32) bool {
	return false
}
