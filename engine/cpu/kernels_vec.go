//go:build (amd64 || arm64) && !purego

package cpu

// The kernels below are in assembly, one file an architecture:
// kernels_amd64.s (AVX2+FMA) and kernels_arm64.s (NEON). The Go wrappers
// check the shapes both serve and fall back to the Go loops where
// vectorKernels is false or the shape is not served.

//go:noescape
func qdot4Kernel(words *uint32, x *float32, scales, biases *uint16, xsum *float32, groups, wordsPerGroup int) float32

//go:noescape
func qdot8Kernel(words *uint32, x *float32, scales, biases *uint16, xsum *float32, groups, wordsPerGroup int) float32

//go:noescape
func dotKernel(a, b *float32, n int) float32

//go:noescape
func dot4RowsKernel(rows *float32, stride int, x *float32, n int, out *float32)

//go:noescape
func dot4x3Kernel(rows *float32, rowStride int, x *float32, xStride, n int, out *float32)

//go:noescape
func axpy64Kernel(v *float32, stride int, w *float32, n int, out *float32)

//go:noescape
func deltaRows32Kernel(s *float32, stride int, k, q *float32, n int, alpha float32, kv, o *float32)

//go:noescape
func scaledCodes4Kernel(words *uint32, scales *uint16, dst *float32, groups, wordsPerGroup int)

//go:noescape
func scaledCodes8Kernel(words *uint32, scales *uint16, dst *float32, groups, wordsPerGroup int)

//go:noescape
func axpy32x3Kernel(v *float32, stride int, w *float32, wStride int, n int, out *float32, outStride int)

//go:noescape
func expShiftKernel(s *float32, n int, shift float32) float32

// qdotRowVec is the product of a quantized row with x by the vector
// kernels: sum over groups of scale*(codes.x) + bias*xsum, xsum holding
// x's group sums; or false where they do not serve the shape (the caller
// then runs the Go loop). For 4-bit codes x is in the kernel's lane order,
// as qdot4Lanes returns it.
func qdotRowVec(bits int, words []uint32, x []float32, scales, biases []uint16, xsum []float32, wordsPerGroup int) (float32, bool) {
	groups := len(scales)
	if !servesGroups(bits, wordsPerGroup) || groups == 0 || len(biases) != groups || len(xsum) < groups || len(words) != groups*wordsPerGroup || len(x) < len(words)*32/bits {
		return 0, false
	}
	if bits == 4 {
		return qdot4Kernel(&words[0], &x[0], &scales[0], &biases[0], &xsum[0], groups, wordsPerGroup), true
	}
	return qdot8Kernel(&words[0], &x[0], &scales[0], &biases[0], &xsum[0], groups, wordsPerGroup), true
}

// servesGroups says whether the decode kernels take bits-bit codes in
// groups of wordsPerGroup words: 8-bit ones 8 words a step, 4-bit ones
// qdot4Words.
func servesGroups(bits, wordsPerGroup int) bool {
	return vectorKernels && wordsPerGroup > 0 &&
		(bits == 4 && wordsPerGroup%qdot4Words == 0 || bits == 8 && wordsPerGroup%8 == 0)
}

// qdotPairVec sets out[k] to the product of x with the row of bits-bit
// codes words[k], scales[k] and biases[k] for k < 2, as qdotRowVec
// computes it (the same bits), or reports false where the kernels do not
// serve the shape. For 4-bit codes x is in qdot4Lanes' order.
func qdotPairVec(bits int, words [2][]uint32, x []float32, scales, biases [2][]uint16, xsum []float32, wordsPerGroup int, out *[2]float32) bool {
	groups := len(scales[0])
	if !servesGroups(bits, wordsPerGroup) || groups == 0 || len(xsum) < groups || len(x) < groups*wordsPerGroup*32/bits {
		return false
	}
	for k := range 2 {
		if len(scales[k]) != groups || len(biases[k]) != groups || len(words[k]) != groups*wordsPerGroup {
			return false
		}
	}
	qdotx2(bits, words, x, scales, biases, xsum, groups, wordsPerGroup, out)
	return true
}

// dotVec is a . b over the longest prefix the vector kernel takes, and
// how many floats that was.
func dotVec(a, b []float32) (float32, int) {
	n := len(a) &^ 31
	if !vectorKernels || n == 0 || len(b) < n {
		return 0, 0
	}
	return dotKernel(&a[0], &b[0], n), n
}

// dot4RowsVec sets out[k] = rows[k*stride:k*stride+n] . x[:n] for k < 4,
// or reports false where the kernel does not serve the shape.
func dot4RowsVec(rows []float32, stride int, x []float32, n int, out *[4]float32) bool {
	if !vectorKernels || n == 0 || n%8 != 0 || len(x) < n || len(rows) < 3*stride+n {
		return false
	}
	dot4RowsKernel(&rows[0], stride, &x[0], n, &out[0])
	return true
}

// dot4x3Vec sets out[4j+k] = rows[k*rowStride:][:n] . x[j*xStride:][:n]
// for k < 4, j < 3, or reports false where the kernel does not serve the
// shape.
func dot4x3Vec(rows []float32, rowStride int, x []float32, xStride, n int, out *[12]float32) bool {
	if !vectorKernels || n == 0 || n%8 != 0 || len(x) < 2*xStride+n || len(rows) < 3*rowStride+n {
		return false
	}
	dot4x3Kernel(&rows[0], rowStride, &x[0], xStride, n, &out[0])
	return true
}

// axpy64Vec adds w[p] * v[p*stride:][:64] over p < len(w) to out[:64], or
// reports false where the kernel does not serve the shape.
func axpy64Vec(v []float32, stride int, w, out []float32) bool {
	n := len(w)
	if !vectorKernels || len(out) < 64 || (n > 0 && len(v) < (n-1)*stride+64) {
		return false
	}
	if n > 0 {
		axpy64Kernel(&v[0], stride, &w[0], n, &out[0])
	}
	return true
}

// axpy32x3Vec adds w[j*wStride+p] * v[p*stride:][:32] over p < n to
// out[j*outStride:][:32] for j < 3, or reports false where the kernel does
// not serve the shape.
func axpy32x3Vec(v []float32, stride int, w []float32, wStride, n int, out []float32, outStride int) bool {
	if !vectorKernels || len(w) < 2*wStride+n || len(out) < 2*outStride+32 || (n > 0 && len(v) < (n-1)*stride+32) {
		return false
	}
	if n > 0 {
		axpy32x3Kernel(&v[0], stride, &w[0], wStride, n, &out[0], outStride)
	}
	return true
}

// expShiftVec sets s[i] = exp(s[i]-shift) over the longest prefix the
// kernel takes, returning their sum and how many it did.
func expShiftVec(s []float32, shift float32) (float32, int) {
	n := len(s) &^ 7
	if !vectorKernels || n == 0 {
		return 0, 0
	}
	return expShiftKernel(&s[0], n, shift), n
}

// deltaRows32Vec does DeltaNet's state update on 32 columns: for a <
// len(k), s[a*stride:][:32] = alpha*that + k[a]*kv[:32], then o[:32] +=
// it times q[a]; or reports false where the kernel does not serve the
// shape.
func deltaRows32Vec(s []float32, stride int, k, q []float32, alpha float32, kv, o []float32) bool {
	n := len(k)
	if !vectorKernels || len(q) < n || len(kv) < 32 || len(o) < 32 || (n > 0 && len(s) < (n-1)*stride+32) {
		return false
	}
	if n > 0 {
		deltaRows32Kernel(&s[0], stride, &k[0], &q[0], n, alpha, &kv[0], &o[0])
	}
	return true
}

// scaledCodesVec writes scale*code for the codes of words into dst, groups
// of wordsPerGroup words each with its bf16 scale, or reports false where
// the kernels do not serve the shape.
func scaledCodesVec(bits int, words []uint32, scales []uint16, dst []float32, wordsPerGroup int) bool {
	groups := len(scales)
	if !vectorKernels || groups == 0 || len(words) != groups*wordsPerGroup || len(dst) < len(words)*32/bits {
		return false
	}
	switch {
	case bits == 4 && wordsPerGroup%2 == 0:
		scaledCodes4Kernel(&words[0], &scales[0], &dst[0], groups, wordsPerGroup)
	case bits == 8 && wordsPerGroup%4 == 0:
		scaledCodes8Kernel(&words[0], &scales[0], &dst[0], groups, wordsPerGroup)
	default:
		return false
	}
	return true
}
