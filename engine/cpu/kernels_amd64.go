//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// vectorKernels says whether the AVX2+FMA kernels of kernels_amd64.s run
// here; without them the Go loops do the work.
var vectorKernels = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// wideKernels says whether the AVX-512 kernel of four inputs
// (qdot4x4PairsKernel, which also takes 256-bit registers past the 16 of
// AVX2) runs here as well.
var wideKernels = vectorKernels && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL

// qdot4Words is the multiple of words a group must span for the 4-bit
// kernels: they take 8 words (64 codes) a load.
const qdot4Words = 8

//go:noescape
func qdot4x2Kernel(words0, words1 *uint32, x *float32, scales0, scales1, biases0, biases1 *uint16, xsum *float32, groups, wordsPerGroup int, out *[2]float32)

//go:noescape
func qdot8x2Kernel(words0, words1 *uint32, x *float32, scales0, scales1, biases0, biases1 *uint16, xsum *float32, groups, wordsPerGroup int, out *[2]float32)

//go:noescape
func qdot4x4Kernel(words *uint32, x0, x1, x2, x3 *float32, scales, biases *uint16, xs0, xs1, xs2, xs3 *float32, groups, wordsPerGroup int, out *[4]float32)

// qdotQuadVec sets out[i] to the product of the row of 4-bit codes words,
// scales and biases with x[i] (group sums xsum[i]) for i < 4, the bits
// qdotRowVec gives each, or reports false where the kernel does not
// serve the shape (8-bit codes among them). x is in qdot4Lanes' order.
func qdotQuadVec(bits int, words []uint32, x [4][]float32, scales, biases []uint16, xsum [4][]float32, wordsPerGroup int, out *[4]float32) bool {
	groups := len(scales)
	if bits != 4 || !servesGroups(bits, wordsPerGroup) || groups == 0 || len(biases) != groups || len(words) != groups*wordsPerGroup {
		return false
	}
	for i := range 4 {
		if len(x[i]) < len(words)*8 || len(xsum[i]) < groups {
			return false
		}
	}
	qdot4x4Kernel(&words[0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], &scales[0], &biases[0], &xsum[0][0], &xsum[1][0], &xsum[2][0], &xsum[3][0], groups, wordsPerGroup, out)
	return true
}

// qdotx2 is the two-row kernel of bits on rows that qdotPairVec has
// checked.
func qdotx2(bits int, words [2][]uint32, x []float32, scales, biases [2][]uint16, xsum []float32, groups, wordsPerGroup int, out *[2]float32) {
	// Direct calls: through a func value the kernels' pointers would
	// escape, and out with them.
	if bits == 8 {
		qdot8x2Kernel(&words[0][0], &words[1][0], &x[0], &scales[0][0], &scales[1][0], &biases[0][0], &biases[1][0], &xsum[0], groups, wordsPerGroup, out)
		return
	}
	qdot4x2Kernel(&words[0][0], &words[1][0], &x[0], &scales[0][0], &scales[1][0], &biases[0][0], &biases[1][0], &xsum[0], groups, wordsPerGroup, out)
}

// nibbleScales[k] is what qdot4Lanes scales x by against the k-th code of
// a word, which the kernels take in place as 16^k times its value (the
// last code is shifted down, so it is not scaled). Powers of two: x times
// them is exact (for |x| above 2^-102, where it stays normal), so each
// FMA forms the exact product code*x, as the kernels did with the codes
// widened.
var nibbleScales = [8]float32{1, 0x1p-4, 0x1p-8, 0x1p-12, 0x1p-16, 0x1p-20, 0x1p-24, 1}

// qdot4Lanes returns x in the 4-bit kernels' order, in dst's storage:
// each 64 floats (the codes of 8 words) become 8 runs of 8, run k the
// floats that meet code k of each word, times nibbleScales[k]. x is
// returned as it is where its length is not a multiple of 64, which no
// group the kernels take leaves.
func qdot4Lanes(dst *[]float32, x []float32) []float32 {
	if !vectorKernels || len(x)%64 != 0 {
		return x
	}
	d := grow(dst, len(x))
	for b := 0; b < len(x); b += 64 {
		src, out := x[b:b+64:b+64], d[b:b+64:b+64]
		for k, s := range nibbleScales {
			for j := range 8 {
				out[8*k+j] = src[8*j+k] * s
			}
		}
	}
	return d
}

//go:noescape
func qdot4x4PairsKernel(words *uint32, scales, biases *uint16, x, xsum, out *float32, pairs, groups, wordsPerGroup, rowWords, rowGroups int)

// qdotPairsWideVec sets out[4r+i], for r < rows and i < 4, to the product
// of the r-th of rows consecutive 4-bit rows (words, scales and biases,
// groups of wordsPerGroup words) with input i of x and xsum (four inputs
// as packWide lays them out), the bits qdotRowVec gives each; or reports
// false where the kernel does not run here or does not serve the shape.
// out holds 4 floats past the rows' where rows is odd.
func qdotPairsWideVec(words []uint32, scales, biases []uint16, rows int, x, xsum []float32, wordsPerGroup int, out []float32) bool {
	if !wideKernels || rows <= 0 || !servesGroups(4, wordsPerGroup) || len(scales)%rows != 0 {
		return false
	}
	groups := len(scales) / rows
	rowWords := groups * wordsPerGroup
	if groups == 0 || len(biases) != len(scales) || len(words) != rows*rowWords || len(x) < 4*8*rowWords || len(xsum) < 4*groups || len(out) < 4*(rows+rows%2) {
		return false
	}
	if pairs := rows / 2; pairs > 0 {
		qdot4x4PairsKernel(&words[0], &scales[0], &biases[0], &x[0], &xsum[0], &out[0], pairs, groups, wordsPerGroup, rowWords, groups)
	}
	if r := rows - 1; rows%2 != 0 {
		// The last row twice: its second products land past the rows'.
		qdot4x4PairsKernel(&words[r*rowWords], &scales[r*groups], &biases[r*groups], &x[0], &xsum[0], &out[4*r], 1, groups, wordsPerGroup, 0, 0)
	}
	return true
}
