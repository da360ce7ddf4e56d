//go:build !purego

#include "textflag.h"

// The NEON twins of kernels_amd64.s: same functions, same shapes served,
// same sums (fp32, the bias term apart), 4 lanes a register where AVX2 has
// 8. Go's arm64 assembler lacks the floating-point vector arithmetic
// (fadd, fmul, faddp, ucvtf, fmla by element, ...): those are WORD-encoded,
// each with its instruction in the comment, as the standard library does.

// CODES_DOT widens the 32 codes of a step, halfwords in code order in
// V5-V8, to floats and multiplies them by the next 32 floats of x (R1)
// into the group's accumulators V16-V19: the part of qdot4Kernel and
// qdot8Kernel after each has unpacked its codes.
#define CODES_DOT \
	VUXTL V5.H4, V9.S4; \
	VUXTL2 V5.H8, V10.S4; \
	VUXTL V6.H4, V11.S4; \
	VUXTL2 V6.H8, V12.S4; \
	VUXTL V7.H4, V13.S4; \
	VUXTL2 V7.H8, V14.S4; \
	VUXTL V8.H4, V15.S4; \
	VUXTL2 V8.H8, V28.S4; \
	WORD $0x6e21d929 /* ucvtf v9.4s, v9.4s */; \
	WORD $0x6e21d94a /* ucvtf v10.4s, v10.4s */; \
	WORD $0x6e21d96b /* ucvtf v11.4s, v11.4s */; \
	WORD $0x6e21d98c /* ucvtf v12.4s, v12.4s */; \
	WORD $0x6e21d9ad /* ucvtf v13.4s, v13.4s */; \
	WORD $0x6e21d9ce /* ucvtf v14.4s, v14.4s */; \
	WORD $0x6e21d9ef /* ucvtf v15.4s, v15.4s */; \
	WORD $0x6e21db9c /* ucvtf v28.4s, v28.4s */; \
	VLD1.P 64(R1), [V20.S4, V21.S4, V22.S4, V23.S4]; \
	VLD1.P 64(R1), [V24.S4, V25.S4, V26.S4, V27.S4]; \
	VFMLA V9.S4, V20.S4, V16.S4; \
	VFMLA V10.S4, V21.S4, V17.S4; \
	VFMLA V11.S4, V22.S4, V18.S4; \
	VFMLA V12.S4, V23.S4, V19.S4; \
	VFMLA V13.S4, V24.S4, V16.S4; \
	VFMLA V14.S4, V25.S4, V17.S4; \
	VFMLA V15.S4, V26.S4, V18.S4; \
	VFMLA V28.S4, V27.S4, V19.S4

// GROUP_SUM ends a group of qdot4Kernel and qdot8Kernel: its dot (the sum
// of V16-V19) times its bf16 scale (R2) into V30, its bias (R3) times the
// group's input sum (R4) into V29.
#define GROUP_SUM \
	WORD $0x4e31d610 /* fadd v16.4s, v16.4s, v17.4s */; \
	WORD $0x4e33d652 /* fadd v18.4s, v18.4s, v19.4s */; \
	WORD $0x4e32d610 /* fadd v16.4s, v16.4s, v18.4s */; \
	MOVHU.P 2(R2), R8; \
	LSLW $16, R8, R8; \
	FMOVS R8, F0; \
	WORD $0x4f80121e /* fmla v30.4s, v16.4s, v0.s[0] */; \
	MOVHU.P 2(R3), R8; \
	LSLW $16, R8, R8; \
	FMOVS R8, F1; \
	FMOVS.P 4(R4), F2; \
	WORD $0x4f81105d /* fmla v29.4s, v2.4s, v1.s[0] */

// func qdot4Kernel(words *uint32, x *float32, scales, biases *uint16, xsum *float32, groups, wordsPerGroup int) float32
//
// Sum over groups g of scale_g * (codes of group g . x of group g) +
// bias_g * xsum_g, codes 4-bit, 8 a word, lowest first. wordsPerGroup is a
// multiple of 4: each step takes 16 bytes (32 codes), splits low and high
// nibbles, interleaves them back into code order and widens them to 8
// vectors of floats, for 8 FMAs into 4 accumulators.
TEXT ·qdot4Kernel(SB), NOSPLIT, $0-60
	MOVD words+0(FP), R0
	MOVD x+8(FP), R1
	MOVD scales+16(FP), R2
	MOVD biases+24(FP), R3
	MOVD xsum+32(FP), R4
	MOVD groups+40(FP), R5
	MOVD wordsPerGroup+48(FP), R6
	VMOVI $15, V31.B16
	VEOR V30.B16, V30.B16, V30.B16 // sum of scale*dot
	VEOR V29.B16, V29.B16, V29.B16 // sum of bias*xsum, lane 0

group4:
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	MOVD R6, R7

word4:
	VLD1.P 16(R0), [V0.B16]
	VAND V31.B16, V0.B16, V1.B16 // codes 0, 2, 4, ...
	VUSHR $4, V0.B16, V2.B16     // codes 1, 3, 5, ...
	VZIP1 V2.B16, V1.B16, V3.B16 // codes 0..15
	VZIP2 V2.B16, V1.B16, V4.B16 // codes 16..31
	VUXTL V3.B8, V5.H8
	VUXTL2 V3.B16, V6.H8
	VUXTL V4.B8, V7.H8
	VUXTL2 V4.B16, V8.H8
	CODES_DOT
	SUBS $4, R7, R7
	BNE word4

	GROUP_SUM
	SUBS $1, R5, R5
	BNE group4

	WORD $0x6e3ed7de // faddp v30.4s, v30.4s, v30.4s
	WORD $0x7e30dbc0 // faddp s0, v30.2s
	FADDS F29, F0, F0
	FMOVS F0, ret+56(FP)
	RET

// func qdot8Kernel(words *uint32, x *float32, scales, biases *uint16, xsum *float32, groups, wordsPerGroup int) float32
//
// As qdot4Kernel for 8-bit codes, 4 a word: each step widens 32 bytes (8
// words); wordsPerGroup is a multiple of 8.
TEXT ·qdot8Kernel(SB), NOSPLIT, $0-60
	MOVD words+0(FP), R0
	MOVD x+8(FP), R1
	MOVD scales+16(FP), R2
	MOVD biases+24(FP), R3
	MOVD xsum+32(FP), R4
	MOVD groups+40(FP), R5
	MOVD wordsPerGroup+48(FP), R6
	VEOR V30.B16, V30.B16, V30.B16
	VEOR V29.B16, V29.B16, V29.B16

group8:
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	MOVD R6, R7

word8:
	VLD1.P 32(R0), [V0.B16, V1.B16]
	VUXTL V0.B8, V5.H8
	VUXTL2 V0.B16, V6.H8
	VUXTL V1.B8, V7.H8
	VUXTL2 V1.B16, V8.H8
	CODES_DOT
	SUBS $8, R7, R7
	BNE word8

	GROUP_SUM
	SUBS $1, R5, R5
	BNE group8

	WORD $0x6e3ed7de // faddp v30.4s, v30.4s, v30.4s
	WORD $0x7e30dbc0 // faddp s0, v30.2s
	FADDS F29, F0, F0
	FMOVS F0, ret+56(FP)
	RET

// func dotKernel(a, b *float32, n int) float32
//
// a . b over n floats, n a multiple of 32 (the caller does the tail).
TEXT ·dotKernel(SB), NOSPLIT, $0-28
	MOVD a+0(FP), R0
	MOVD b+8(FP), R1
	MOVD n+16(FP), R2
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16

dotloop:
	VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1.P 64(R1), [V8.S4, V9.S4, V10.S4, V11.S4]
	VLD1.P 64(R1), [V12.S4, V13.S4, V14.S4, V15.S4]
	VFMLA V0.S4, V8.S4, V16.S4
	VFMLA V1.S4, V9.S4, V17.S4
	VFMLA V2.S4, V10.S4, V18.S4
	VFMLA V3.S4, V11.S4, V19.S4
	VFMLA V4.S4, V12.S4, V20.S4
	VFMLA V5.S4, V13.S4, V21.S4
	VFMLA V6.S4, V14.S4, V22.S4
	VFMLA V7.S4, V15.S4, V23.S4
	SUBS $32, R2, R2
	BNE dotloop

	WORD $0x4e31d610 // fadd v16.4s, v16.4s, v17.4s
	WORD $0x4e33d652 // fadd v18.4s, v18.4s, v19.4s
	WORD $0x4e35d694 // fadd v20.4s, v20.4s, v21.4s
	WORD $0x4e37d6d6 // fadd v22.4s, v22.4s, v23.4s
	WORD $0x4e32d610 // fadd v16.4s, v16.4s, v18.4s
	WORD $0x4e36d694 // fadd v20.4s, v20.4s, v22.4s
	WORD $0x4e34d610 // fadd v16.4s, v16.4s, v20.4s
	WORD $0x6e30d610 // faddp v16.4s, v16.4s, v16.4s
	WORD $0x7e30da00 // faddp s0, v16.2s
	FMOVS F0, ret+24(FP)
	RET

// func dot4RowsKernel(rows *float32, stride int, x *float32, n int, out *float32)
//
// out[k] = rows[k*stride : k*stride+n] . x for k in 0..3, n a multiple of
// 8: each load of x feeds four rows.
TEXT ·dot4RowsKernel(SB), NOSPLIT, $0-40
	MOVD rows+0(FP), R0
	MOVD stride+8(FP), R1
	LSL $2, R1, R1
	MOVD x+16(FP), R2
	MOVD n+24(FP), R3
	MOVD out+32(FP), R4
	ADD R1, R0, R5
	ADD R1, R5, R6
	ADD R1, R6, R7
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16

rowsloop:
	VLD1.P 32(R2), [V0.S4, V1.S4]
	VLD1.P 32(R0), [V2.S4, V3.S4]
	VLD1.P 32(R5), [V4.S4, V5.S4]
	VLD1.P 32(R6), [V6.S4, V7.S4]
	VLD1.P 32(R7), [V8.S4, V9.S4]
	VFMLA V0.S4, V2.S4, V16.S4
	VFMLA V1.S4, V3.S4, V17.S4
	VFMLA V0.S4, V4.S4, V18.S4
	VFMLA V1.S4, V5.S4, V19.S4
	VFMLA V0.S4, V6.S4, V20.S4
	VFMLA V1.S4, V7.S4, V21.S4
	VFMLA V0.S4, V8.S4, V22.S4
	VFMLA V1.S4, V9.S4, V23.S4
	SUBS $8, R3, R3
	BNE rowsloop

	// Each row's two accumulators add, then pairwise sums of the four
	// leave [s0 s1 s2 s3].
	WORD $0x4e31d610 // fadd v16.4s, v16.4s, v17.4s
	WORD $0x4e33d652 // fadd v18.4s, v18.4s, v19.4s
	WORD $0x4e35d694 // fadd v20.4s, v20.4s, v21.4s
	WORD $0x4e37d6d6 // fadd v22.4s, v22.4s, v23.4s
	WORD $0x6e32d610 // faddp v16.4s, v16.4s, v18.4s
	WORD $0x6e36d694 // faddp v20.4s, v20.4s, v22.4s
	WORD $0x6e34d610 // faddp v16.4s, v16.4s, v20.4s
	VST1 [V16.S4], (R4)
	RET

// func dot4x3Kernel(rows *float32, rowStride int, x *float32, xStride, n int, out *float32)
//
// out[4j+k] = rows[k*rowStride:][:n] . x[j*xStride:][:n] for four rows k
// and three input rows j, n a multiple of 8: the prefill's register block,
// 7 loads per 12 FMAs, 4 floats a step.
TEXT ·dot4x3Kernel(SB), NOSPLIT, $0-48
	MOVD rows+0(FP), R0
	MOVD rowStride+8(FP), R2
	LSL $2, R2, R2
	MOVD x+16(FP), R1
	MOVD xStride+24(FP), R10
	LSL $2, R10, R10
	MOVD n+32(FP), R3
	MOVD out+40(FP), R4
	ADD R2, R0, R5
	ADD R2, R5, R6
	ADD R2, R6, R7
	ADD R10, R1, R8
	ADD R10, R8, R9
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16

blockloop:
	VLD1.P 16(R1), [V0.S4]
	VLD1.P 16(R8), [V1.S4]
	VLD1.P 16(R9), [V2.S4]
	VLD1.P 16(R0), [V3.S4]
	VLD1.P 16(R5), [V4.S4]
	VLD1.P 16(R6), [V5.S4]
	VLD1.P 16(R7), [V6.S4]
	// Accumulator 16+4j+k holds input j times row k.
	VFMLA V0.S4, V3.S4, V16.S4
	VFMLA V0.S4, V4.S4, V17.S4
	VFMLA V0.S4, V5.S4, V18.S4
	VFMLA V0.S4, V6.S4, V19.S4
	VFMLA V1.S4, V3.S4, V20.S4
	VFMLA V1.S4, V4.S4, V21.S4
	VFMLA V1.S4, V5.S4, V22.S4
	VFMLA V1.S4, V6.S4, V23.S4
	VFMLA V2.S4, V3.S4, V24.S4
	VFMLA V2.S4, V4.S4, V25.S4
	VFMLA V2.S4, V5.S4, V26.S4
	VFMLA V2.S4, V6.S4, V27.S4
	SUBS $4, R3, R3
	BNE blockloop

	// Pairwise sums of each input's four accumulators leave its
	// [s0 s1 s2 s3], in V16, V17 and V18 for the store.
	WORD $0x6e31d600 // faddp v0.4s, v16.4s, v17.4s
	WORD $0x6e33d641 // faddp v1.4s, v18.4s, v19.4s
	WORD $0x6e21d410 // faddp v16.4s, v0.4s, v1.4s
	WORD $0x6e35d680 // faddp v0.4s, v20.4s, v21.4s
	WORD $0x6e37d6c1 // faddp v1.4s, v22.4s, v23.4s
	WORD $0x6e21d411 // faddp v17.4s, v0.4s, v1.4s
	WORD $0x6e39d700 // faddp v0.4s, v24.4s, v25.4s
	WORD $0x6e3bd741 // faddp v1.4s, v26.4s, v27.4s
	WORD $0x6e21d412 // faddp v18.4s, v0.4s, v1.4s
	VST1 [V16.S4, V17.S4, V18.S4], (R4)
	RET

// func axpy64Kernel(v *float32, stride int, w *float32, n int, out *float32)
//
// out[0:64] += sum over p < n of w[p] * v[p*stride : p*stride+64]: 64
// columns held in sixteen accumulators, each row's weight a lane that
// FMA by element multiplies.
TEXT ·axpy64Kernel(SB), NOSPLIT, $0-40
	MOVD v+0(FP), R0
	MOVD stride+8(FP), R1
	LSL $2, R1, R1
	MOVD w+16(FP), R2
	MOVD n+24(FP), R3
	MOVD out+32(FP), R4
	MOVD R4, R5
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1.P 64(R5), [V20.S4, V21.S4, V22.S4, V23.S4]
	VLD1.P 64(R5), [V24.S4, V25.S4, V26.S4, V27.S4]
	VLD1 (R5), [V28.S4, V29.S4, V30.S4, V31.S4]
	CBZ R3, axpydone

axpyloop:
	FMOVS.P 4(R2), F0
	MOVD R0, R6
	VLD1.P 64(R6), [V1.S4, V2.S4, V3.S4, V4.S4]
	VLD1.P 64(R6), [V5.S4, V6.S4, V7.S4, V8.S4]
	WORD $0x4f801030 // fmla v16.4s, v1.4s, v0.s[0]
	WORD $0x4f801051 // fmla v17.4s, v2.4s, v0.s[0]
	WORD $0x4f801072 // fmla v18.4s, v3.4s, v0.s[0]
	WORD $0x4f801093 // fmla v19.4s, v4.4s, v0.s[0]
	WORD $0x4f8010b4 // fmla v20.4s, v5.4s, v0.s[0]
	WORD $0x4f8010d5 // fmla v21.4s, v6.4s, v0.s[0]
	WORD $0x4f8010f6 // fmla v22.4s, v7.4s, v0.s[0]
	WORD $0x4f801117 // fmla v23.4s, v8.4s, v0.s[0]
	VLD1.P 64(R6), [V1.S4, V2.S4, V3.S4, V4.S4]
	VLD1 (R6), [V5.S4, V6.S4, V7.S4, V8.S4]
	WORD $0x4f801038 // fmla v24.4s, v1.4s, v0.s[0]
	WORD $0x4f801059 // fmla v25.4s, v2.4s, v0.s[0]
	WORD $0x4f80107a // fmla v26.4s, v3.4s, v0.s[0]
	WORD $0x4f80109b // fmla v27.4s, v4.4s, v0.s[0]
	WORD $0x4f8010bc // fmla v28.4s, v5.4s, v0.s[0]
	WORD $0x4f8010dd // fmla v29.4s, v6.4s, v0.s[0]
	WORD $0x4f8010fe // fmla v30.4s, v7.4s, v0.s[0]
	WORD $0x4f80111f // fmla v31.4s, v8.4s, v0.s[0]
	ADD R1, R0, R0
	SUBS $1, R3, R3
	BNE axpyloop

axpydone:
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R4)
	VST1.P [V20.S4, V21.S4, V22.S4, V23.S4], 64(R4)
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R4)
	VST1 [V28.S4, V29.S4, V30.S4, V31.S4], (R4)
	RET

#include "expconsts.h"

// func expShiftKernel(s *float32, n int, shift float32) float32
//
// s[i] = exp(s[i] - shift) for i < n, n a multiple of 8 (taken 4 a step);
// returns their sum.
TEXT ·expShiftKernel(SB), NOSPLIT, $0-28
	MOVD s+0(FP), R0
	MOVD n+8(FP), R1
	FMOVS shift+16(FP), F16
	WORD $0x4e040610 // dup v16.4s, v16.s[0]
	MOVD $expConsts<>(SB), R2
	VLD1R.P 4(R2), [V17.S4] // log2(e)
	VLD1R.P 4(R2), [V18.S4] // ln2 high
	VLD1R.P 4(R2), [V19.S4] // ln2 low
	VLD1R.P 4(R2), [V20.S4] // p0..p5
	VLD1R.P 4(R2), [V21.S4]
	VLD1R.P 4(R2), [V22.S4]
	VLD1R.P 4(R2), [V23.S4]
	VLD1R.P 4(R2), [V24.S4]
	VLD1R.P 4(R2), [V25.S4]
	VLD1R.P 4(R2), [V26.S4] // 1
	VLD1R.P 4(R2), [V27.S4] // -87
	VLD1R (R2), [V28.S4]    // 88
	VEOR V29.B16, V29.B16, V29.B16

exploop:
	VLD1 (R0), [V0.S4]
	WORD $0x4eb0d400 // fsub v0.4s, v0.4s, v16.4s
	WORD $0x4e3bf400 // fmax v0.4s, v0.4s, v27.4s
	WORD $0x4ebcf400 // fmin v0.4s, v0.4s, v28.4s
	// n = round(x*log2e) (to nearest, ties even), r = x - n*ln2
	WORD $0x6e31dc01 // fmul v1.4s, v0.4s, v17.4s
	WORD $0x4e218821 // frintn v1.4s, v1.4s
	VFMLS V1.S4, V18.S4, V0.S4
	VFMLS V1.S4, V19.S4, V0.S4
	// p(r) by Horner from p0, each step a copy of the next coefficient
	// plus the last times r; then exp(r) = p r^2 + r + 1.
	VORR V21.B16, V21.B16, V2.B16
	VFMLA V20.S4, V0.S4, V2.S4
	VORR V22.B16, V22.B16, V3.B16
	VFMLA V2.S4, V0.S4, V3.S4
	VORR V23.B16, V23.B16, V2.B16
	VFMLA V3.S4, V0.S4, V2.S4
	VORR V24.B16, V24.B16, V3.B16
	VFMLA V2.S4, V0.S4, V3.S4
	VORR V25.B16, V25.B16, V2.B16
	VFMLA V3.S4, V0.S4, V2.S4
	WORD $0x6e20dc03 // fmul v3.4s, v0.4s, v0.4s
	VORR V0.B16, V0.B16, V4.B16
	VFMLA V2.S4, V3.S4, V4.S4
	WORD $0x4e3ad484 // fadd v4.4s, v4.4s, v26.4s
	// times 2^n, built in the exponent field
	WORD $0x4ea1b821 // fcvtzs v1.4s, v1.4s
	VSHL $23, V1.S4, V1.S4
	VADD V1.S4, V4.S4, V4.S4
	VST1.P [V4.S4], 16(R0)
	WORD $0x4e24d7bd // fadd v29.4s, v29.4s, v4.4s
	SUBS $4, R1, R1
	BNE exploop

	WORD $0x6e3dd7bd // faddp v29.4s, v29.4s, v29.4s
	WORD $0x7e30dba0 // faddp s0, v29.2s
	FMOVS F0, ret+24(FP)
	RET

// func deltaRows32Kernel(s *float32, stride int, k, q *float32, n int, alpha float32, kv, o *float32)
//
// DeltaNet's state update over 32 columns: for each of n rows a,
// row = alpha*row + k[a]*kv, then o += row*q[a]; kv and o stay in
// registers over all the rows.
TEXT ·deltaRows32Kernel(SB), NOSPLIT, $0-64
	MOVD s+0(FP), R0
	MOVD stride+8(FP), R1
	LSL $2, R1, R1
	MOVD k+16(FP), R2
	MOVD q+24(FP), R3
	MOVD n+32(FP), R4
	FMOVS alpha+40(FP), F0
	MOVD kv+48(FP), R5
	MOVD o+56(FP), R6
	VLD1.P 64(R5), [V24.S4, V25.S4, V26.S4, V27.S4]
	VLD1 (R5), [V28.S4, V29.S4, V30.S4, V31.S4]
	MOVD R6, R7
	VLD1.P 64(R7), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1 (R7), [V20.S4, V21.S4, V22.S4, V23.S4]
	CBZ R4, deltadone

deltaloop:
	FMOVS.P 4(R2), F1
	FMOVS.P 4(R3), F2
	MOVD R0, R7
	VLD1.P 64(R7), [V3.S4, V4.S4, V5.S4, V6.S4]
	VLD1 (R7), [V7.S4, V8.S4, V9.S4, V10.S4]
	WORD $0x4f809063 // fmul v3.4s, v3.4s, v0.s[0]
	WORD $0x4f809084 // fmul v4.4s, v4.4s, v0.s[0]
	WORD $0x4f8090a5 // fmul v5.4s, v5.4s, v0.s[0]
	WORD $0x4f8090c6 // fmul v6.4s, v6.4s, v0.s[0]
	WORD $0x4f8090e7 // fmul v7.4s, v7.4s, v0.s[0]
	WORD $0x4f809108 // fmul v8.4s, v8.4s, v0.s[0]
	WORD $0x4f809129 // fmul v9.4s, v9.4s, v0.s[0]
	WORD $0x4f80914a // fmul v10.4s, v10.4s, v0.s[0]
	WORD $0x4f811303 // fmla v3.4s, v24.4s, v1.s[0]
	WORD $0x4f811324 // fmla v4.4s, v25.4s, v1.s[0]
	WORD $0x4f811345 // fmla v5.4s, v26.4s, v1.s[0]
	WORD $0x4f811366 // fmla v6.4s, v27.4s, v1.s[0]
	WORD $0x4f811387 // fmla v7.4s, v28.4s, v1.s[0]
	WORD $0x4f8113a8 // fmla v8.4s, v29.4s, v1.s[0]
	WORD $0x4f8113c9 // fmla v9.4s, v30.4s, v1.s[0]
	WORD $0x4f8113ea // fmla v10.4s, v31.4s, v1.s[0]
	MOVD R0, R7
	VST1.P [V3.S4, V4.S4, V5.S4, V6.S4], 64(R7)
	VST1 [V7.S4, V8.S4, V9.S4, V10.S4], (R7)
	WORD $0x4f821070 // fmla v16.4s, v3.4s, v2.s[0]
	WORD $0x4f821091 // fmla v17.4s, v4.4s, v2.s[0]
	WORD $0x4f8210b2 // fmla v18.4s, v5.4s, v2.s[0]
	WORD $0x4f8210d3 // fmla v19.4s, v6.4s, v2.s[0]
	WORD $0x4f8210f4 // fmla v20.4s, v7.4s, v2.s[0]
	WORD $0x4f821115 // fmla v21.4s, v8.4s, v2.s[0]
	WORD $0x4f821136 // fmla v22.4s, v9.4s, v2.s[0]
	WORD $0x4f821157 // fmla v23.4s, v10.4s, v2.s[0]
	ADD R1, R0, R0
	SUBS $1, R4, R4
	BNE deltaloop

deltadone:
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R6)
	VST1 [V20.S4, V21.S4, V22.S4, V23.S4], (R6)
	RET

// SCALE_CODES16 widens 16 codes, bytes in code order in V4, to floats,
// multiplies them by the group's scale (V0 lane 0) and stores them at R2:
// the part of scaledCodes4Kernel and scaledCodes8Kernel after each has
// its codes in V4.
#define SCALE_CODES16 \
	VUXTL V4.B8, V5.H8; \
	VUXTL2 V4.B16, V6.H8; \
	VUXTL V5.H4, V16.S4; \
	VUXTL2 V5.H8, V17.S4; \
	VUXTL V6.H4, V18.S4; \
	VUXTL2 V6.H8, V19.S4; \
	WORD $0x6e21da10 /* ucvtf v16.4s, v16.4s */; \
	WORD $0x6e21da31 /* ucvtf v17.4s, v17.4s */; \
	WORD $0x6e21da52 /* ucvtf v18.4s, v18.4s */; \
	WORD $0x6e21da73 /* ucvtf v19.4s, v19.4s */; \
	WORD $0x4f809210 /* fmul v16.4s, v16.4s, v0.s[0] */; \
	WORD $0x4f809231 /* fmul v17.4s, v17.4s, v0.s[0] */; \
	WORD $0x4f809252 /* fmul v18.4s, v18.4s, v0.s[0] */; \
	WORD $0x4f809273 /* fmul v19.4s, v19.4s, v0.s[0] */; \
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R2)

// func scaledCodes4Kernel(words *uint32, scales *uint16, dst *float32, groups, wordsPerGroup int)
//
// dst = scale*code for every 4-bit code of groups groups (the tiles of
// prompt chunks), two words (16 codes) a step: nibbles split, interleaved
// back into code order and widened as in qdot4Kernel.
TEXT ·scaledCodes4Kernel(SB), NOSPLIT, $0-40
	MOVD words+0(FP), R0
	MOVD scales+8(FP), R1
	MOVD dst+16(FP), R2
	MOVD groups+24(FP), R3
	MOVD wordsPerGroup+32(FP), R4
	VMOVI $15, V31.B16

sgroup4:
	MOVHU.P 2(R1), R8
	LSLW $16, R8, R8
	FMOVS R8, F0
	MOVD R4, R5

sword4:
	VLD1.P 8(R0), [V1.B8]
	VAND V31.B16, V1.B16, V2.B16
	VUSHR $4, V1.B16, V3.B16
	VZIP1 V3.B16, V2.B16, V4.B16 // codes 0..15
	SCALE_CODES16
	SUBS $2, R5, R5
	BNE sword4

	SUBS $1, R3, R3
	BNE sgroup4
	RET

// func scaledCodes8Kernel(words *uint32, scales *uint16, dst *float32, groups, wordsPerGroup int)
//
// As scaledCodes4Kernel for 8-bit codes, four words (16 codes) a step.
TEXT ·scaledCodes8Kernel(SB), NOSPLIT, $0-40
	MOVD words+0(FP), R0
	MOVD scales+8(FP), R1
	MOVD dst+16(FP), R2
	MOVD groups+24(FP), R3
	MOVD wordsPerGroup+32(FP), R4

sgroup8:
	MOVHU.P 2(R1), R8
	LSLW $16, R8, R8
	FMOVS R8, F0
	MOVD R4, R5

sword8:
	VLD1.P 16(R0), [V4.B16]
	SCALE_CODES16
	SUBS $4, R5, R5
	BNE sword8

	SUBS $1, R3, R3
	BNE sgroup8
	RET

// func axpy32x3Kernel(v *float32, stride int, w *float32, wStride int, n int, out *float32, outStride int)
//
// out[j*outStride:][:32] += sum over p < n of w[j*wStride+p] *
// v[p*stride:][:32] for three rows j, each value row loaded once for all
// three: 24 accumulators, the three weights lanes of V0-V2.
TEXT ·axpy32x3Kernel(SB), NOSPLIT, $0-56
	MOVD v+0(FP), R0
	MOVD stride+8(FP), R1
	LSL $2, R1, R1
	MOVD w+16(FP), R2
	MOVD wStride+24(FP), R3
	LSL $2, R3, R3
	MOVD n+32(FP), R4
	MOVD out+40(FP), R5
	MOVD outStride+48(FP), R6
	LSL $2, R6, R6
	ADD R3, R2, R7
	ADD R3, R7, R8
	ADD R6, R5, R9
	ADD R6, R9, R10
	MOVD R5, R11
	VLD1.P 64(R11), [V8.S4, V9.S4, V10.S4, V11.S4]
	VLD1 (R11), [V12.S4, V13.S4, V14.S4, V15.S4]
	MOVD R9, R11
	VLD1.P 64(R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1 (R11), [V20.S4, V21.S4, V22.S4, V23.S4]
	MOVD R10, R11
	VLD1.P 64(R11), [V24.S4, V25.S4, V26.S4, V27.S4]
	VLD1 (R11), [V28.S4, V29.S4, V30.S4, V31.S4]
	CBZ R4, axpy3done

axpy3loop:
	FMOVS.P 4(R2), F0
	FMOVS.P 4(R7), F1
	FMOVS.P 4(R8), F2
	MOVD R0, R11
	VLD1.P 64(R11), [V3.S4, V4.S4, V5.S4, V6.S4]
	WORD $0x4f801068 // fmla v8.4s, v3.4s, v0.s[0]
	WORD $0x4f801089 // fmla v9.4s, v4.4s, v0.s[0]
	WORD $0x4f8010aa // fmla v10.4s, v5.4s, v0.s[0]
	WORD $0x4f8010cb // fmla v11.4s, v6.4s, v0.s[0]
	WORD $0x4f811070 // fmla v16.4s, v3.4s, v1.s[0]
	WORD $0x4f811091 // fmla v17.4s, v4.4s, v1.s[0]
	WORD $0x4f8110b2 // fmla v18.4s, v5.4s, v1.s[0]
	WORD $0x4f8110d3 // fmla v19.4s, v6.4s, v1.s[0]
	WORD $0x4f821078 // fmla v24.4s, v3.4s, v2.s[0]
	WORD $0x4f821099 // fmla v25.4s, v4.4s, v2.s[0]
	WORD $0x4f8210ba // fmla v26.4s, v5.4s, v2.s[0]
	WORD $0x4f8210db // fmla v27.4s, v6.4s, v2.s[0]
	VLD1 (R11), [V3.S4, V4.S4, V5.S4, V6.S4]
	WORD $0x4f80106c // fmla v12.4s, v3.4s, v0.s[0]
	WORD $0x4f80108d // fmla v13.4s, v4.4s, v0.s[0]
	WORD $0x4f8010ae // fmla v14.4s, v5.4s, v0.s[0]
	WORD $0x4f8010cf // fmla v15.4s, v6.4s, v0.s[0]
	WORD $0x4f811074 // fmla v20.4s, v3.4s, v1.s[0]
	WORD $0x4f811095 // fmla v21.4s, v4.4s, v1.s[0]
	WORD $0x4f8110b6 // fmla v22.4s, v5.4s, v1.s[0]
	WORD $0x4f8110d7 // fmla v23.4s, v6.4s, v1.s[0]
	WORD $0x4f82107c // fmla v28.4s, v3.4s, v2.s[0]
	WORD $0x4f82109d // fmla v29.4s, v4.4s, v2.s[0]
	WORD $0x4f8210be // fmla v30.4s, v5.4s, v2.s[0]
	WORD $0x4f8210df // fmla v31.4s, v6.4s, v2.s[0]
	ADD R1, R0, R0
	SUBS $1, R4, R4
	BNE axpy3loop

axpy3done:
	VST1.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R5)
	VST1 [V12.S4, V13.S4, V14.S4, V15.S4], (R5)
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R9)
	VST1 [V20.S4, V21.S4, V22.S4, V23.S4], (R9)
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R10)
	VST1 [V28.S4, V29.S4, V30.S4, V31.S4], (R10)
	RET
