//go:build !purego

#include "textflag.h"

// Lane k of nibbleShifts is the shift of the k-th 4-bit code of a word:
// MLX packs codes lowest first.
DATA nibbleShifts<>+0(SB)/4, $0
DATA nibbleShifts<>+4(SB)/4, $4
DATA nibbleShifts<>+8(SB)/4, $8
DATA nibbleShifts<>+12(SB)/4, $12
DATA nibbleShifts<>+16(SB)/4, $16
DATA nibbleShifts<>+20(SB)/4, $20
DATA nibbleShifts<>+24(SB)/4, $24
DATA nibbleShifts<>+28(SB)/4, $28
GLOBL nibbleShifts<>(SB), RODATA|NOPTR, $32

// Lane j of the 32 bytes at nibbleMasks+32*(k-1) masks the k-th 4-bit
// code of word j in place, for k from 1 to 6: code 0 takes Y14 (15 in
// every lane) and code 7 a shift, which also drops the sign bit that
// VCVTDQ2PS would read.
DATA nibbleMasks<>+0(SB)/4, $0x000000f0
DATA nibbleMasks<>+4(SB)/4, $0x000000f0
DATA nibbleMasks<>+8(SB)/4, $0x000000f0
DATA nibbleMasks<>+12(SB)/4, $0x000000f0
DATA nibbleMasks<>+16(SB)/4, $0x000000f0
DATA nibbleMasks<>+20(SB)/4, $0x000000f0
DATA nibbleMasks<>+24(SB)/4, $0x000000f0
DATA nibbleMasks<>+28(SB)/4, $0x000000f0
DATA nibbleMasks<>+32(SB)/4, $0x00000f00
DATA nibbleMasks<>+36(SB)/4, $0x00000f00
DATA nibbleMasks<>+40(SB)/4, $0x00000f00
DATA nibbleMasks<>+44(SB)/4, $0x00000f00
DATA nibbleMasks<>+48(SB)/4, $0x00000f00
DATA nibbleMasks<>+52(SB)/4, $0x00000f00
DATA nibbleMasks<>+56(SB)/4, $0x00000f00
DATA nibbleMasks<>+60(SB)/4, $0x00000f00
DATA nibbleMasks<>+64(SB)/4, $0x0000f000
DATA nibbleMasks<>+68(SB)/4, $0x0000f000
DATA nibbleMasks<>+72(SB)/4, $0x0000f000
DATA nibbleMasks<>+76(SB)/4, $0x0000f000
DATA nibbleMasks<>+80(SB)/4, $0x0000f000
DATA nibbleMasks<>+84(SB)/4, $0x0000f000
DATA nibbleMasks<>+88(SB)/4, $0x0000f000
DATA nibbleMasks<>+92(SB)/4, $0x0000f000
DATA nibbleMasks<>+96(SB)/4, $0x000f0000
DATA nibbleMasks<>+100(SB)/4, $0x000f0000
DATA nibbleMasks<>+104(SB)/4, $0x000f0000
DATA nibbleMasks<>+108(SB)/4, $0x000f0000
DATA nibbleMasks<>+112(SB)/4, $0x000f0000
DATA nibbleMasks<>+116(SB)/4, $0x000f0000
DATA nibbleMasks<>+120(SB)/4, $0x000f0000
DATA nibbleMasks<>+124(SB)/4, $0x000f0000
DATA nibbleMasks<>+128(SB)/4, $0x00f00000
DATA nibbleMasks<>+132(SB)/4, $0x00f00000
DATA nibbleMasks<>+136(SB)/4, $0x00f00000
DATA nibbleMasks<>+140(SB)/4, $0x00f00000
DATA nibbleMasks<>+144(SB)/4, $0x00f00000
DATA nibbleMasks<>+148(SB)/4, $0x00f00000
DATA nibbleMasks<>+152(SB)/4, $0x00f00000
DATA nibbleMasks<>+156(SB)/4, $0x00f00000
DATA nibbleMasks<>+160(SB)/4, $0x0f000000
DATA nibbleMasks<>+164(SB)/4, $0x0f000000
DATA nibbleMasks<>+168(SB)/4, $0x0f000000
DATA nibbleMasks<>+172(SB)/4, $0x0f000000
DATA nibbleMasks<>+176(SB)/4, $0x0f000000
DATA nibbleMasks<>+180(SB)/4, $0x0f000000
DATA nibbleMasks<>+184(SB)/4, $0x0f000000
DATA nibbleMasks<>+188(SB)/4, $0x0f000000
GLOBL nibbleMasks<>(SB), RODATA|NOPTR, $192

// CODE1 adds code k of the 8 words in Y10, masked in place by the mask
// at mask (16^k times the code, exact as a float), times the 8 floats at
// x(DI) (x scaled by 16^-k, as qdot4Lanes lays it out) into acc.
#define CODE1(mask, x, acc) \
	VPAND mask, Y10, Y6; \
	VCVTDQ2PS Y6, Y6; \
	VFMADD231PS x(DI), Y6, acc

// CODE2 is CODE1 on two rows' words at once, Y10 and Y11, into accA and
// accB: one load of the mask and of x serves both.
#define CODE2(mask, x, accA, accB) \
	VMOVDQU mask, Y13; \
	VPAND Y13, Y10, Y6; \
	VPAND Y13, Y11, Y7; \
	VCVTDQ2PS Y6, Y6; \
	VCVTDQ2PS Y7, Y7; \
	VMOVUPS x(DI), Y12; \
	VFMADD231PS Y12, Y6, accA; \
	VFMADD231PS Y12, Y7, accB

// func qdot4Kernel(words *uint32, x *float32, scales, biases *uint16, xsum *float32, groups, wordsPerGroup int) float32
//
// Sum over groups g of scale_g * (codes of group g . x of group g) +
// bias_g * xsum_g (xsum_g the sum of x over group g), codes 4-bit, 8 a
// word, x in qdot4Lanes' order. Each 8 words (64 codes) are one 32-byte
// load; code k of every word is masked where it lies, so the lane holds
// 16^k times it, converted exactly, and multiplies x scaled by 16^-k: the
// same product, without widening or shifting the codes apart (those uops
// bound the kernel, not the loads). wordsPerGroup is a multiple of 8.
// Even codes add into Y2, odd ones into Y3, zeroed each group, so the
// FMA chains of successive groups overlap; the bias terms are a pass of
// their own, 8 groups a vector.
TEXT ·qdot4Kernel(SB), NOSPLIT, $0-60
	MOVQ words+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), BX
	MOVQ xsum+32(FP), R10
	MOVQ groups+40(FP), CX
	MOVQ wordsPerGroup+48(FP), R8
	MOVL $15, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS Y0, Y0, Y0
	XORQ R11, R11

group4:
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ R8, R9

word4:
	VMOVDQU 0(SI), Y10
	CODE1(Y14, 0, Y2)
	CODE1(nibbleMasks<>+0(SB), 32, Y3)
	CODE1(nibbleMasks<>+32(SB), 64, Y2)
	CODE1(nibbleMasks<>+64(SB), 96, Y3)
	CODE1(nibbleMasks<>+96(SB), 128, Y2)
	CODE1(nibbleMasks<>+128(SB), 160, Y3)
	CODE1(nibbleMasks<>+160(SB), 192, Y2)
	VPSRLD $28, Y10, Y6
	VCVTDQ2PS Y6, Y6
	VFMADD231PS 224(DI), Y6, Y3
	ADDQ $32, SI
	ADDQ $256, DI
	SUBQ $8, R9
	JNZ word4

	// The group's bf16 scale in every lane (the word broadcast, shifted
	// into each lane's high half) times its dot.
	VADDPS Y3, Y2, Y2
	VPBROADCASTW (DX)(R11*2), Y1
	VPSLLD $16, Y1, Y1
	VFMADD231PS Y2, Y1, Y0
	INCQ R11
	CMPQ R11, CX
	JNE group4

	// bias_g * xsum_g, 8 groups at a time.
	MOVQ CX, R9
	SHRQ $3, R9
	JZ bias4tail

bias4:
	VPMOVZXWD (BX), Y1
	VPSLLD $16, Y1, Y1
	VFMADD231PS (R10), Y1, Y0
	ADDQ $16, BX
	ADDQ $32, R10
	DECQ R9
	JNZ bias4

bias4tail:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	// The groups short of 8, one at a time (the scalar adds clear the
	// upper lanes, so they come after the reduction).
	ANDQ $7, CX
	JZ done4

bias4one:
	MOVWLZX 0(BX), AX
	SHLL $16, AX
	VMOVD AX, X1
	VFMADD231SS (R10), X1, X0
	ADDQ $2, BX
	ADDQ $4, R10
	DECQ CX
	JNZ bias4one

done4:
	VZEROUPPER
	MOVSS X0, ret+56(FP)
	RET

// func qdot4x2Kernel(words0, words1 *uint32, x *float32, scales0, scales1, biases0, biases1 *uint16, xsum *float32, groups, wordsPerGroup int, out *[2]float32)
//
// qdot4Kernel on two rows at once, out[k] the product with row k: each
// load of x and of a mask serves both rows. Each row's terms are added in
// qdot4Kernel's order, so out holds the bits that two calls of it return.
TEXT ·qdot4x2Kernel(SB), NOSPLIT, $0-88
	MOVQ words0+0(FP), SI
	MOVQ words1+8(FP), R13
	MOVQ x+16(FP), DI
	MOVQ scales0+24(FP), DX
	MOVQ scales1+32(FP), R12
	MOVQ biases0+40(FP), BX
	MOVQ xsum+56(FP), R10
	MOVQ groups+64(FP), CX
	MOVQ wordsPerGroup+72(FP), R8
	// R13 is the second row's words less the first's, in bytes.
	SUBQ SI, R13
	MOVL $15, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ R11, R11

pair4group:
	// The codes 512 bytes ahead in both rows, asked for early: from
	// memory the product ran 10-15% slower on the hardware's prefetch
	// alone (512 and 1024 ahead did about as well, 2048 and 4096 less).
	PREFETCHT0 512(SI)
	PREFETCHT0 512(SI)(R13*1)
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	MOVQ R8, R9

pair4word:
	VMOVDQU 0(SI), Y10
	VMOVDQU 0(SI)(R13*1), Y11
	VPAND Y14, Y10, Y6
	VPAND Y14, Y11, Y7
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VMOVUPS 0(DI), Y12
	VFMADD231PS Y12, Y6, Y2
	VFMADD231PS Y12, Y7, Y4
	CODE2(nibbleMasks<>+0(SB), 32, Y3, Y5)
	CODE2(nibbleMasks<>+32(SB), 64, Y2, Y4)
	CODE2(nibbleMasks<>+64(SB), 96, Y3, Y5)
	CODE2(nibbleMasks<>+96(SB), 128, Y2, Y4)
	CODE2(nibbleMasks<>+128(SB), 160, Y3, Y5)
	CODE2(nibbleMasks<>+160(SB), 192, Y2, Y4)
	VPSRLD $28, Y10, Y6
	VPSRLD $28, Y11, Y7
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VMOVUPS 224(DI), Y12
	VFMADD231PS Y12, Y6, Y3
	VFMADD231PS Y12, Y7, Y5
	ADDQ $32, SI
	ADDQ $256, DI
	SUBQ $8, R9
	JNZ pair4word

	VADDPS Y3, Y2, Y2
	VPBROADCASTW (DX)(R11*2), Y15
	VPSLLD $16, Y15, Y15
	VFMADD231PS Y2, Y15, Y0
	VADDPS Y5, Y4, Y4
	VPBROADCASTW (R12)(R11*2), Y15
	VPSLLD $16, Y15, Y15
	VFMADD231PS Y4, Y15, Y1
	INCQ R11
	CMPQ R11, CX
	JNE pair4group

	// The bias terms, 8 groups a vector; R12 is now the second row's
	// biases.
	MOVQ biases1+48(FP), R12
	MOVQ CX, R9
	SHRQ $3, R9
	JZ pair4tail

pair4bias:
	VMOVUPS (R10), Y2
	VPMOVZXWD (BX), Y3
	VPSLLD $16, Y3, Y3
	VFMADD231PS Y2, Y3, Y0
	VPMOVZXWD (R12), Y4
	VPSLLD $16, Y4, Y4
	VFMADD231PS Y2, Y4, Y1
	ADDQ $16, BX
	ADDQ $16, R12
	ADDQ $32, R10
	DECQ R9
	JNZ pair4bias

pair4tail:
	VEXTRACTF128 $1, Y0, X2
	VADDPS X2, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	ANDQ $7, CX
	JZ pair4done

pair4one:
	VMOVSS (R10), X4
	MOVWLZX 0(BX), AX
	SHLL $16, AX
	VMOVD AX, X2
	VFMADD231SS X4, X2, X0
	MOVWLZX 0(R12), AX
	SHLL $16, AX
	VMOVD AX, X3
	VFMADD231SS X4, X3, X1
	ADDQ $2, BX
	ADDQ $2, R12
	ADDQ $4, R10
	DECQ CX
	JNZ pair4one

pair4done:
	VZEROUPPER
	MOVQ out+80(FP), AX
	MOVSS X0, 0(AX)
	MOVSS X1, 4(AX)
	RET

// CODES8 widens the 32 8-bit codes at a, b, c and d (8 each) to floats in
// Y6, Y7, Y12 and Y13 and adds them times the 32 floats at DI, 8 each,
// into acc0 to acc3.
#define CODES8(a, b, c, d, acc0, acc1, acc2, acc3) \
	VPMOVZXBD a, Y6; \
	VPMOVZXBD b, Y7; \
	VPMOVZXBD c, Y12; \
	VPMOVZXBD d, Y13; \
	VCVTDQ2PS Y6, Y6; \
	VCVTDQ2PS Y7, Y7; \
	VCVTDQ2PS Y12, Y12; \
	VCVTDQ2PS Y13, Y13; \
	VFMADD231PS 0(DI), Y6, acc0; \
	VFMADD231PS 32(DI), Y7, acc1; \
	VFMADD231PS 64(DI), Y12, acc2; \
	VFMADD231PS 96(DI), Y13, acc3

// func qdot8Kernel(words *uint32, x *float32, scales, biases *uint16, xsum *float32, groups, wordsPerGroup int) float32
//
// As qdot4Kernel for 8-bit codes, 4 a word: each accumulator widens two
// words (8 codes) at a time; wordsPerGroup is a multiple of 8.
TEXT ·qdot8Kernel(SB), NOSPLIT, $0-60
	MOVQ words+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), BX
	MOVQ xsum+32(FP), R10
	MOVQ groups+40(FP), CX
	MOVQ wordsPerGroup+48(FP), R8
	VXORPS Y14, Y14, Y14
	VXORPS Y0, Y0, Y0

group8:
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	MOVQ R8, R9

word8:
	CODES8(0(SI), 8(SI), 16(SI), 24(SI), Y2, Y3, Y4, Y5)
	ADDQ $32, SI
	ADDQ $128, DI
	SUBQ $8, R9
	JNZ word8

	VADDPS Y3, Y2, Y2
	VADDPS Y5, Y4, Y4
	VADDPS Y4, Y2, Y2
	MOVWLZX 0(DX), AX
	SHLL $16, AX
	VMOVD AX, X1
	VBROADCASTSS X1, Y1
	VFMADD231PS Y2, Y1, Y0
	// Its bias times the group's input sum, in a scalar apart.
	MOVWLZX 0(BX), AX
	SHLL $16, AX
	VMOVD AX, X1
	VMULSS (R10), X1, X1
	VADDSS X1, X14, X14
	ADDQ $2, DX
	ADDQ $2, BX
	ADDQ $4, R10
	DECQ CX
	JNZ group8

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VADDSS X14, X0, X0
	VZEROUPPER
	MOVSS X0, ret+56(FP)
	RET

// func qdot8x2Kernel(words0, words1 *uint32, x *float32, scales0, scales1, biases0, biases1 *uint16, xsum *float32, groups, wordsPerGroup int, out *[2]float32)
//
// qdot8Kernel on two rows at once, out[k] the product with row k, each
// row's terms added in qdot8Kernel's order (so out holds the bits two
// calls of it return): a row alone keeps one stream of codes in flight,
// two keep two, with the codes 512 bytes ahead asked for early.
TEXT ·qdot8x2Kernel(SB), NOSPLIT, $0-88
	MOVQ words0+0(FP), SI
	MOVQ words1+8(FP), R13
	MOVQ x+16(FP), DI
	MOVQ scales0+24(FP), DX
	MOVQ scales1+32(FP), R12
	MOVQ biases0+40(FP), BX
	MOVQ biases1+48(FP), CX
	MOVQ xsum+56(FP), R10
	MOVQ wordsPerGroup+72(FP), R8
	// R13 is the second row's words less the first's, in bytes.
	SUBQ SI, R13
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	XORQ R11, R11

pair8group:
	PREFETCHT0 512(SI)
	PREFETCHT0 512(SI)(R13*1)
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ R8, R9

pair8word:
	CODES8(0(SI), 8(SI), 16(SI), 24(SI), Y2, Y3, Y4, Y5)
	CODES8(0(SI)(R13*1), 8(SI)(R13*1), 16(SI)(R13*1), 24(SI)(R13*1), Y8, Y9, Y10, Y11)
	ADDQ $32, SI
	ADDQ $128, DI
	SUBQ $8, R9
	JNZ pair8word

	VADDPS Y3, Y2, Y2
	VADDPS Y5, Y4, Y4
	VADDPS Y4, Y2, Y2
	MOVWLZX (DX)(R11*2), AX
	SHLL $16, AX
	VMOVD AX, X6
	VBROADCASTSS X6, Y6
	VFMADD231PS Y2, Y6, Y0
	VADDPS Y9, Y8, Y8
	VADDPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8
	MOVWLZX (R12)(R11*2), AX
	SHLL $16, AX
	VMOVD AX, X6
	VBROADCASTSS X6, Y6
	VFMADD231PS Y8, Y6, Y1
	// The biases times the group's input sum, in scalars apart.
	MOVWLZX (BX)(R11*2), AX
	SHLL $16, AX
	VMOVD AX, X6
	VMULSS (R10)(R11*4), X6, X6
	VADDSS X6, X14, X14
	MOVWLZX (CX)(R11*2), AX
	SHLL $16, AX
	VMOVD AX, X6
	VMULSS (R10)(R11*4), X6, X6
	VADDSS X6, X15, X15
	INCQ R11
	CMPQ R11, groups+64(FP)
	JNE pair8group

	VEXTRACTF128 $1, Y0, X2
	VADDPS X2, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VADDSS X14, X0, X0
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VADDSS X15, X1, X1
	VZEROUPPER
	MOVQ out+80(FP), AX
	MOVSS X0, 0(AX)
	MOVSS X1, 4(AX)
	RET

// func dotKernel(a, b *float32, n int) float32
//
// a . b over n floats, n a multiple of 32 (the caller does the tail).
TEXT ·dotKernel(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

dotloop:
	VMOVUPS 0(SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ dotloop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dot4RowsKernel(rows *float32, stride int, x *float32, n int, out *float32)
//
// out[k] = rows[k*stride : k*stride+n] . x for k in 0..3, n a multiple of
// 8: one load of x feeds four rows, so a tile of dequantized weight rows
// is multiplied by many prompt tokens with x read once per four rows.
TEXT ·dot4RowsKernel(SB), NOSPLIT, $0-40
	MOVQ rows+0(FP), SI
	MOVQ stride+8(FP), R8
	SHLQ $2, R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX

rowsloop:
	VMOVUPS (DI)(AX*4), Y4
	VFMADD231PS (SI)(AX*4), Y4, Y0
	VFMADD231PS (R9)(AX*4), Y4, Y1
	VFMADD231PS (R10)(AX*4), Y4, Y2
	VFMADD231PS (R11)(AX*4), Y4, Y3
	ADDQ $8, AX
	CMPQ AX, CX
	JLT rowsloop

	// Reduce each accumulator to its lane sum: out = [s0 s1 s2 s3].
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, 0(DX)
	VZEROUPPER
	RET

// func dot4x3Kernel(rows *float32, rowStride int, x *float32, xStride, n int, out *float32)
//
// out[4j+k] = rows[k*rowStride:][:n] . x[j*xStride:][:n] for four rows k
// and three input rows j, n a multiple of 8: the prefill's register block
// (weight rows by tokens; keys by queries in attention). Each step loads
// three inputs and four rows for twelve FMAs (a row times one input would
// load two floats per FMA).
TEXT ·dot4x3Kernel(SB), NOSPLIT, $0-48
	MOVQ rows+0(FP), SI
	MOVQ rowStride+8(FP), R8
	SHLQ $2, R8
	MOVQ x+16(FP), DI
	MOVQ xStride+24(FP), BX
	SHLQ $2, BX
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	LEAQ (DI)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ AX, AX

blockloop:
	VMOVUPS (DI)(AX*4), Y12
	VMOVUPS (R12)(AX*4), Y13
	VMOVUPS (R13)(AX*4), Y14
	VMOVUPS (SI)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS (R9)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS (R10)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS (R11)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ $8, AX
	CMPQ AX, CX
	JLT blockloop

	// Each input's four accumulators reduce to [s0 s1 s2 s3], as in
	// dot4RowsKernel.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, 0(DX)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X4, 16(DX)
	VHADDPS Y9, Y8, Y8
	VHADDPS Y11, Y10, Y10
	VHADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVUPS X8, 32(DX)
	VZEROUPPER
	RET

// func axpy64Kernel(v *float32, stride int, w *float32, n int, out *float32)
//
// out[0:64] += sum over p < n of w[p] * v[p*stride : p*stride+64]: a
// weighted sum of rows, 64 columns held in eight accumulators (attention's
// probabilities times values, DeltaNet's key times its state).
TEXT ·axpy64Kernel(SB), NOSPLIT, $0-40
	MOVQ v+0(FP), SI
	MOVQ stride+8(FP), R8
	SHLQ $2, R8
	MOVQ w+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	VMOVUPS 0(DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	VMOVUPS 128(DX), Y4
	VMOVUPS 160(DX), Y5
	VMOVUPS 192(DX), Y6
	VMOVUPS 224(DX), Y7
	TESTQ CX, CX
	JZ axpydone

axpyloop:
	VBROADCASTSS (DI), Y8
	VFMADD231PS 0(SI), Y8, Y0
	VFMADD231PS 32(SI), Y8, Y1
	VFMADD231PS 64(SI), Y8, Y2
	VFMADD231PS 96(SI), Y8, Y3
	VFMADD231PS 128(SI), Y8, Y4
	VFMADD231PS 160(SI), Y8, Y5
	VFMADD231PS 192(SI), Y8, Y6
	VFMADD231PS 224(SI), Y8, Y7
	ADDQ $4, DI
	ADDQ R8, SI
	DECQ CX
	JNZ axpyloop

axpydone:
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VZEROUPPER
	RET

#include "expconsts.h"

// func expShiftKernel(s *float32, n int, shift float32) float32
//
// s[i] = exp(s[i] - shift) for i < n, n a multiple of 8; returns their
// sum: softmax's numerators and denominator in one pass.
TEXT ·expShiftKernel(SB), NOSPLIT, $0-28
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS shift+16(FP), Y15
	VBROADCASTSS expConsts<>+0(SB), Y14
	VBROADCASTSS expConsts<>+4(SB), Y13
	VBROADCASTSS expConsts<>+8(SB), Y12
	VBROADCASTSS expConsts<>+36(SB), Y11
	VBROADCASTSS expConsts<>+40(SB), Y10
	VBROADCASTSS expConsts<>+44(SB), Y9
	VXORPS Y8, Y8, Y8

exploop:
	VMOVUPS (SI), Y0
	VSUBPS Y15, Y0, Y0
	VMAXPS Y10, Y0, Y0
	VMINPS Y9, Y0, Y0
	// n = round(x*log2e) (to nearest), r = x - n*ln2
	VMULPS Y14, Y0, Y1
	VROUNDPS $0, Y1, Y1
	VFNMADD231PS Y13, Y1, Y0
	VFNMADD231PS Y12, Y1, Y0
	// p(r) = ((((p0 r + p1) r + p2) r + p3) r + p4) r + p5, then
	// exp(r) = p r^2 + r + 1
	VBROADCASTSS expConsts<>+12(SB), Y2
	VBROADCASTSS expConsts<>+16(SB), Y3
	VFMADD213PS Y3, Y0, Y2
	VBROADCASTSS expConsts<>+20(SB), Y3
	VFMADD213PS Y3, Y0, Y2
	VBROADCASTSS expConsts<>+24(SB), Y3
	VFMADD213PS Y3, Y0, Y2
	VBROADCASTSS expConsts<>+28(SB), Y3
	VFMADD213PS Y3, Y0, Y2
	VBROADCASTSS expConsts<>+32(SB), Y3
	VFMADD213PS Y3, Y0, Y2
	VMULPS Y0, Y0, Y3
	VFMADD213PS Y0, Y3, Y2
	VADDPS Y11, Y2, Y2
	// times 2^n, built in the exponent field
	VCVTPS2DQ Y1, Y1
	VPSLLD $23, Y1, Y1
	VPADDD Y2, Y1, Y2
	VMOVUPS Y2, (SI)
	VADDPS Y2, Y8, Y8
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ exploop

	VEXTRACTF128 $1, Y8, X1
	VADDPS X1, X8, X8
	VHADDPS X8, X8, X8
	VHADDPS X8, X8, X8
	VZEROUPPER
	MOVSS X8, ret+24(FP)
	RET

// func deltaRows32Kernel(s *float32, stride int, k, q *float32, n int, alpha float32, kv, o *float32)
//
// DeltaNet's state update over 32 columns: for each of n rows a,
// row = alpha*row + k[a]*kv (row s[a*stride:][:32]), then o += row*q[a];
// kv and o stay in registers over all the rows.
TEXT ·deltaRows32Kernel(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), SI
	MOVQ stride+8(FP), R8
	SHLQ $2, R8
	MOVQ k+16(FP), BX
	MOVQ q+24(FP), DX
	MOVQ n+32(FP), CX
	VBROADCASTSS alpha+40(FP), Y8
	MOVQ kv+48(FP), DI
	MOVQ o+56(FP), AX
	VMOVUPS 0(DI), Y4
	VMOVUPS 32(DI), Y5
	VMOVUPS 64(DI), Y6
	VMOVUPS 96(DI), Y7
	VMOVUPS 0(AX), Y0
	VMOVUPS 32(AX), Y1
	VMOVUPS 64(AX), Y2
	VMOVUPS 96(AX), Y3
	TESTQ CX, CX
	JZ deltadone

deltaloop:
	VBROADCASTSS (BX), Y9
	VBROADCASTSS (DX), Y10
	VMULPS 0(SI), Y8, Y11
	VMULPS 32(SI), Y8, Y12
	VMULPS 64(SI), Y8, Y13
	VMULPS 96(SI), Y8, Y14
	VFMADD231PS Y9, Y4, Y11
	VFMADD231PS Y9, Y5, Y12
	VFMADD231PS Y9, Y6, Y13
	VFMADD231PS Y9, Y7, Y14
	VMOVUPS Y11, 0(SI)
	VMOVUPS Y12, 32(SI)
	VMOVUPS Y13, 64(SI)
	VMOVUPS Y14, 96(SI)
	VFMADD231PS Y11, Y10, Y0
	VFMADD231PS Y12, Y10, Y1
	VFMADD231PS Y13, Y10, Y2
	VFMADD231PS Y14, Y10, Y3
	ADDQ $4, BX
	ADDQ $4, DX
	ADDQ R8, SI
	DECQ CX
	JNZ deltaloop

deltadone:
	VMOVUPS Y0, 0(AX)
	VMOVUPS Y1, 32(AX)
	VMOVUPS Y2, 64(AX)
	VMOVUPS Y3, 96(AX)
	VZEROUPPER
	RET

// func scaledCodes4Kernel(words *uint32, scales *uint16, dst *float32, groups, wordsPerGroup int)
//
// dst = scale*code for every 4-bit code of groups groups (the tiles of
// prompt chunks), a word (8 codes) at a time, each code shifted into
// its lane by nibbleShifts.
TEXT ·scaledCodes4Kernel(SB), NOSPLIT, $0-40
	MOVQ words+0(FP), SI
	MOVQ scales+8(FP), DX
	MOVQ dst+16(FP), DI
	MOVQ groups+24(FP), CX
	MOVQ wordsPerGroup+32(FP), R8
	VMOVDQU nibbleShifts<>(SB), Y15
	MOVL $15, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14

sgroup4:
	MOVWLZX 0(DX), AX
	SHLL $16, AX
	VMOVD AX, X1
	VBROADCASTSS X1, Y1
	MOVQ R8, R9

sword4:
	VPBROADCASTD 0(SI), Y6
	VPBROADCASTD 4(SI), Y7
	VPSRLVD Y15, Y6, Y6
	VPSRLVD Y15, Y7, Y7
	VPAND Y14, Y6, Y6
	VPAND Y14, Y7, Y7
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VMULPS Y1, Y6, Y6
	VMULPS Y1, Y7, Y7
	VMOVUPS Y6, 0(DI)
	VMOVUPS Y7, 32(DI)
	ADDQ $8, SI
	ADDQ $64, DI
	SUBQ $2, R9
	JNZ sword4

	ADDQ $2, DX
	DECQ CX
	JNZ sgroup4
	VZEROUPPER
	RET

// func scaledCodes8Kernel(words *uint32, scales *uint16, dst *float32, groups, wordsPerGroup int)
//
// As scaledCodes4Kernel for 8-bit codes, two words (8 codes) at a time.
TEXT ·scaledCodes8Kernel(SB), NOSPLIT, $0-40
	MOVQ words+0(FP), SI
	MOVQ scales+8(FP), DX
	MOVQ dst+16(FP), DI
	MOVQ groups+24(FP), CX
	MOVQ wordsPerGroup+32(FP), R8

sgroup8:
	MOVWLZX 0(DX), AX
	SHLL $16, AX
	VMOVD AX, X1
	VBROADCASTSS X1, Y1
	MOVQ R8, R9

sword8:
	VPMOVZXBD 0(SI), Y6
	VPMOVZXBD 8(SI), Y7
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VMULPS Y1, Y6, Y6
	VMULPS Y1, Y7, Y7
	VMOVUPS Y6, 0(DI)
	VMOVUPS Y7, 32(DI)
	ADDQ $16, SI
	ADDQ $64, DI
	SUBQ $4, R9
	JNZ sword8

	ADDQ $2, DX
	DECQ CX
	JNZ sgroup8
	VZEROUPPER
	RET

// func axpy32x3Kernel(v *float32, stride int, w *float32, wStride int, n int, out *float32, outStride int)
//
// out[j*outStride:][:32] += sum over p < n of w[j*wStride+p] *
// v[p*stride:][:32] for three rows j: attention's weighted sum of values
// for three queries, each value row loaded once for all three.
TEXT ·axpy32x3Kernel(SB), NOSPLIT, $0-56
	MOVQ v+0(FP), SI
	MOVQ stride+8(FP), R8
	SHLQ $2, R8
	MOVQ w+16(FP), DI
	MOVQ wStride+24(FP), R9
	SHLQ $2, R9
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	MOVQ outStride+48(FP), R10
	SHLQ $2, R10
	LEAQ (DI)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	LEAQ (DX)(R10*1), R13
	LEAQ (R13)(R10*1), BX
	VMOVUPS 0(DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	VMOVUPS 0(R13), Y4
	VMOVUPS 32(R13), Y5
	VMOVUPS 64(R13), Y6
	VMOVUPS 96(R13), Y7
	VMOVUPS 0(BX), Y8
	VMOVUPS 32(BX), Y9
	VMOVUPS 64(BX), Y10
	VMOVUPS 96(BX), Y11
	TESTQ CX, CX
	JZ axpy3done
	XORQ AX, AX

axpy3loop:
	VBROADCASTSS (DI)(AX*4), Y12
	VBROADCASTSS (R11)(AX*4), Y13
	VBROADCASTSS (R12)(AX*4), Y14
	VMOVUPS 0(SI), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS 32(SI), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS 64(SI), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS 96(SI), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ R8, SI
	INCQ AX
	CMPQ AX, CX
	JLT axpy3loop

axpy3done:
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 0(R13)
	VMOVUPS Y5, 32(R13)
	VMOVUPS Y6, 64(R13)
	VMOVUPS Y7, 96(R13)
	VMOVUPS Y8, 0(BX)
	VMOVUPS Y9, 32(BX)
	VMOVUPS Y10, 64(BX)
	VMOVUPS Y11, 96(BX)
	VZEROUPPER
	RET

// QUAD adds code k of the 8 words in Y13, in Y12 (masked in place and
// converted as in CODE1), times the 8 floats at x of each of the four
// inputs into its accumulator.
#define QUAD(x, acc0, acc1, acc2, acc3) \
	VCVTDQ2PS Y12, Y12; \
	VFMADD231PS x(DI), Y12, acc0; \
	VFMADD231PS x(DI)(R12*1), Y12, acc1; \
	VFMADD231PS x(DI)(R13*1), Y12, acc2; \
	VFMADD231PS x(DI)(BX*1), Y12, acc3

// func qdot4x4Kernel(words *uint32, x0, x1, x2, x3 *float32, scales, biases *uint16, xs0, xs1, xs2, xs3 *float32, groups, wordsPerGroup int, out *[4]float32)
//
// qdot4Kernel on four inputs at once, out[i] the product with x_i (xs_i
// its group sums): each code is masked and converted once for all four,
// where a call per input did that work (the uops that bound the kernel)
// four times. Each input's terms are added in qdot4Kernel's order, so out
// holds the bits that four calls of it return. Y0-Y3 are the inputs'
// sums, Y4-Y11 their even and odd codes' accumulators (Y4, Y5 input 0).
TEXT ·qdot4x4Kernel(SB), NOSPLIT, $0-112
	MOVQ words+0(FP), SI
	MOVQ x0+8(FP), DI
	MOVQ x1+16(FP), R12
	MOVQ x2+24(FP), R13
	MOVQ x3+32(FP), BX
	MOVQ scales+40(FP), DX
	MOVQ groups+88(FP), CX
	MOVQ wordsPerGroup+96(FP), R8
	// R12, R13 and BX are inputs 1-3 less input 0, in bytes.
	SUBQ DI, R12
	SUBQ DI, R13
	SUBQ DI, BX
	MOVL $15, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ R11, R11

quad4group:
	PREFETCHT0 512(SI)
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ R8, R9

quad4word:
	VMOVDQU 0(SI), Y13
	VPAND Y14, Y13, Y12
	QUAD(0, Y4, Y6, Y8, Y10)
	VPAND nibbleMasks<>+0(SB), Y13, Y12
	QUAD(32, Y5, Y7, Y9, Y11)
	VPAND nibbleMasks<>+32(SB), Y13, Y12
	QUAD(64, Y4, Y6, Y8, Y10)
	VPAND nibbleMasks<>+64(SB), Y13, Y12
	QUAD(96, Y5, Y7, Y9, Y11)
	VPAND nibbleMasks<>+96(SB), Y13, Y12
	QUAD(128, Y4, Y6, Y8, Y10)
	VPAND nibbleMasks<>+128(SB), Y13, Y12
	QUAD(160, Y5, Y7, Y9, Y11)
	VPAND nibbleMasks<>+160(SB), Y13, Y12
	QUAD(192, Y4, Y6, Y8, Y10)
	VPSRLD $28, Y13, Y12
	QUAD(224, Y5, Y7, Y9, Y11)
	ADDQ $32, SI
	ADDQ $256, DI
	SUBQ $8, R9
	JNZ quad4word

	VPBROADCASTW (DX)(R11*2), Y15
	VPSLLD $16, Y15, Y15
	VADDPS Y5, Y4, Y4
	VFMADD231PS Y4, Y15, Y0
	VADDPS Y7, Y6, Y6
	VFMADD231PS Y6, Y15, Y1
	VADDPS Y9, Y8, Y8
	VFMADD231PS Y8, Y15, Y2
	VADDPS Y11, Y10, Y10
	VFMADD231PS Y10, Y15, Y3
	INCQ R11
	CMPQ R11, CX
	JNE quad4group

	// The bias terms, 8 groups a vector, each input against its sums.
	MOVQ biases+48(FP), BX
	MOVQ xs0+56(FP), R10
	MOVQ xs1+64(FP), DI
	MOVQ xs2+72(FP), R12
	MOVQ xs3+80(FP), R13
	MOVQ CX, R9
	SHRQ $3, R9
	JZ quad4tail

quad4bias:
	VPMOVZXWD (BX), Y12
	VPSLLD $16, Y12, Y12
	VFMADD231PS (R10), Y12, Y0
	VFMADD231PS (DI), Y12, Y1
	VFMADD231PS (R12), Y12, Y2
	VFMADD231PS (R13), Y12, Y3
	ADDQ $16, BX
	ADDQ $32, R10
	ADDQ $32, DI
	ADDQ $32, R12
	ADDQ $32, R13
	DECQ R9
	JNZ quad4bias

quad4tail:
	VEXTRACTF128 $1, Y0, X12
	VADDPS X12, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VEXTRACTF128 $1, Y1, X12
	VADDPS X12, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VEXTRACTF128 $1, Y2, X12
	VADDPS X12, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VEXTRACTF128 $1, Y3, X12
	VADDPS X12, X3, X3
	VHADDPS X3, X3, X3
	VHADDPS X3, X3, X3
	ANDQ $7, CX
	JZ quad4done

quad4one:
	MOVWLZX 0(BX), AX
	SHLL $16, AX
	VMOVD AX, X12
	VFMADD231SS (R10), X12, X0
	VFMADD231SS (DI), X12, X1
	VFMADD231SS (R12), X12, X2
	VFMADD231SS (R13), X12, X3
	ADDQ $2, BX
	ADDQ $4, R10
	ADDQ $4, DI
	ADDQ $4, R12
	ADDQ $4, R13
	DECQ CX
	JNZ quad4one

quad4done:
	VZEROUPPER
	MOVQ out+104(FP), AX
	MOVSS X0, 0(AX)
	MOVSS X1, 4(AX)
	MOVSS X2, 8(AX)
	MOVSS X3, 12(AX)
	RET

// Lanes 0-7 of the 64 bytes at quadMasks+64*p mask code 2p of each of 8
// words in place, lanes 8-15 code 2p+1 (as nibbleMasks, code 0 by 15);
// code 7 takes the mask of its place and quadShifts' 28 in lanes 8-15.
DATA quadMasks<>+0(SB)/8, $0x0000000f0000000f
DATA quadMasks<>+8(SB)/8, $0x0000000f0000000f
DATA quadMasks<>+16(SB)/8, $0x0000000f0000000f
DATA quadMasks<>+24(SB)/8, $0x0000000f0000000f
DATA quadMasks<>+32(SB)/8, $0x000000f0000000f0
DATA quadMasks<>+40(SB)/8, $0x000000f0000000f0
DATA quadMasks<>+48(SB)/8, $0x000000f0000000f0
DATA quadMasks<>+56(SB)/8, $0x000000f0000000f0
DATA quadMasks<>+64(SB)/8, $0x00000f0000000f00
DATA quadMasks<>+72(SB)/8, $0x00000f0000000f00
DATA quadMasks<>+80(SB)/8, $0x00000f0000000f00
DATA quadMasks<>+88(SB)/8, $0x00000f0000000f00
DATA quadMasks<>+96(SB)/8, $0x0000f0000000f000
DATA quadMasks<>+104(SB)/8, $0x0000f0000000f000
DATA quadMasks<>+112(SB)/8, $0x0000f0000000f000
DATA quadMasks<>+120(SB)/8, $0x0000f0000000f000
DATA quadMasks<>+128(SB)/8, $0x000f0000000f0000
DATA quadMasks<>+136(SB)/8, $0x000f0000000f0000
DATA quadMasks<>+144(SB)/8, $0x000f0000000f0000
DATA quadMasks<>+152(SB)/8, $0x000f0000000f0000
DATA quadMasks<>+160(SB)/8, $0x00f0000000f00000
DATA quadMasks<>+168(SB)/8, $0x00f0000000f00000
DATA quadMasks<>+176(SB)/8, $0x00f0000000f00000
DATA quadMasks<>+184(SB)/8, $0x00f0000000f00000
DATA quadMasks<>+192(SB)/8, $0x0f0000000f000000
DATA quadMasks<>+200(SB)/8, $0x0f0000000f000000
DATA quadMasks<>+208(SB)/8, $0x0f0000000f000000
DATA quadMasks<>+216(SB)/8, $0x0f0000000f000000
DATA quadMasks<>+224(SB)/8, $0xf0000000f0000000
DATA quadMasks<>+232(SB)/8, $0xf0000000f0000000
DATA quadMasks<>+240(SB)/8, $0xf0000000f0000000
DATA quadMasks<>+248(SB)/8, $0xf0000000f0000000
GLOBL quadMasks<>(SB), RODATA|NOPTR, $256

DATA quadShifts<>+0(SB)/8, $0
DATA quadShifts<>+8(SB)/8, $0
DATA quadShifts<>+16(SB)/8, $0
DATA quadShifts<>+24(SB)/8, $0
DATA quadShifts<>+32(SB)/8, $0x0000001c0000001c
DATA quadShifts<>+40(SB)/8, $0x0000001c0000001c
DATA quadShifts<>+48(SB)/8, $0x0000001c0000001c
DATA quadShifts<>+56(SB)/8, $0x0000001c0000001c
GLOBL quadShifts<>(SB), RODATA|NOPTR, $64

// CODES2 masks a code pair of the words of rows A (Z21) and B (Z22) in
// place by mask into Z23 and Z24.
#define CODES2(mask) \
	VPANDD mask, Z21, Z23; \
	VPANDD mask, Z22, Z24

// WIDE2 adds the code pairs in Z23 and Z24, converted, times the 16 floats
// at x0-x3(DI) of the four inputs into the rows' accumulators: Z4-Z7 row
// A's, Z8-Z11 row B's.
#define WIDE2(x0, x1, x2, x3) \
	VCVTDQ2PS Z23, Z23; \
	VCVTDQ2PS Z24, Z24; \
	VMOVUPS x0(DI), Z25; \
	VFMADD231PS Z25, Z23, Z4; \
	VFMADD231PS Z25, Z24, Z8; \
	VMOVUPS x1(DI), Z25; \
	VFMADD231PS Z25, Z23, Z5; \
	VFMADD231PS Z25, Z24, Z9; \
	VMOVUPS x2(DI), Z25; \
	VFMADD231PS Z25, Z23, Z6; \
	VFMADD231PS Z25, Z24, Z10; \
	VMOVUPS x3(DI), Z25; \
	VFMADD231PS Z25, Z23, Z7; \
	VFMADD231PS Z25, Z24, Z11

// FOLD adds the odd codes' half of acc (lanes 8-15) to its even codes'
// half, as qdot4Kernel adds Y3 to Y2, and that times the group's scale in
// scale into sum.
#define FOLD(acc, half, scale, sum) \
	VEXTRACTF64X4 $1, acc, Y28; \
	VADDPS Y28, half, half; \
	VFMADD231PS half, scale, sum

// REDUCE sums the 8 lanes of Y(sum) into its lowest, as qdot4Kernel does.
#define REDUCE(sum, xsum) \
	VEXTRACTF128 $1, sum, X4; \
	VADDPS X4, xsum, xsum; \
	VHADDPS xsum, xsum, xsum; \
	VHADDPS xsum, xsum, xsum

// TAILFMA adds input i's group sum (at off(R10)) times the biases of rows
// A (X4) and B (X5) into their sums.
#define TAILFMA(off, a, b) \
	VMOVSS off(R10), X6; \
	VFMADD231SS X6, X4, a; \
	VFMADD231SS X6, X5, b

// BIASFMA is TAILFMA for 8 groups at once (Y4, Y5 the rows' biases).
#define BIASFMA(off, a, b) \
	VMOVUPS off(R10), Y6; \
	VFMADD231PS Y6, Y4, a; \
	VFMADD231PS Y6, Y5, b

// func qdot4x4PairsKernel(words *uint32, scales, biases *uint16, x, xsum, out *float32, pairs, groups, wordsPerGroup, rowWords, rowGroups int)
//
// qdot4x4Kernel in 512-bit vectors on pairs of 4-bit rows: rows A and B
// of a pair are rowWords words (rowGroups scales and biases) apart, the
// next pair's A past B (words, scales and biases from the first pair's
// A; rowWords 0 takes one row twice), each row groups groups long. x holds
// the four inputs as packWide lays them out: for each 8 words of a row,
// the inputs' 64 floats (qdot4Lanes' order) one after another; xsum their
// group sums, for each 8 groups the inputs' 8 in turn, then for each
// group left the inputs' one. out[8k+i] is input i times pair k's row A,
// out[8k+4+i] times its B. A vector holds two codes of 8 words, lanes 0-7
// the even one and 8-15 the odd one, each lane adding its codes in
// qdot4Kernel's order: every input keeps the bits of the row kernel, with
// half the FMAs of the 256-bit kernel, each load of x serving two rows.
// Y0-Y3 are row A's sums, Y12-Y15 row B's.
TEXT ·qdot4x4PairsKernel(SB), NOSPLIT, $0-88
	MOVQ words+0(FP), SI
	MOVQ scales+8(FP), DX
	MOVQ biases+16(FP), BX
	MOVQ out+40(FP), R11
	MOVQ pairs+48(FP), R8
	MOVQ rowWords+72(FP), R12
	SHLQ $2, R12
	MOVQ rowGroups+80(FP), R13
	SHLQ $1, R13
	VMOVDQU32 quadMasks<>+0(SB), Z16
	VMOVDQU32 quadMasks<>+64(SB), Z17
	VMOVDQU32 quadMasks<>+128(SB), Z18
	VMOVDQU32 quadMasks<>+192(SB), Z19
	VMOVDQU32 quadShifts<>(SB), Z20

wpair:
	MOVQ x+24(FP), DI
	MOVQ groups+56(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15

wgroup:
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	MOVQ wordsPerGroup+64(FP), R9

wword:
	VBROADCASTI64X4 0(SI), Z21
	VBROADCASTI64X4 0(SI)(R12*1), Z22
	CODES2(Z16)
	WIDE2(0, 256, 512, 768)
	CODES2(Z17)
	WIDE2(64, 320, 576, 832)
	CODES2(Z18)
	WIDE2(128, 384, 640, 896)
	// Code 7 of each word: the mask keeps it in place, the shift moves it
	// down past the sign bit (lanes 0-7, code 6, shift by 0).
	CODES2(Z19)
	VPSRLVD Z20, Z23, Z23
	VPSRLVD Z20, Z24, Z24
	WIDE2(192, 448, 704, 960)
	ADDQ $32, SI
	ADDQ $1024, DI
	SUBQ $8, R9
	JNZ wword

	MOVWLZX (DX), AX
	SHLL $16, AX
	VPBROADCASTD AX, Z26
	MOVWLZX (DX)(R13*1), AX
	SHLL $16, AX
	VPBROADCASTD AX, Z27
	FOLD(Z4, Y4, Y26, Y0)
	FOLD(Z5, Y5, Y26, Y1)
	FOLD(Z6, Y6, Y26, Y2)
	FOLD(Z7, Y7, Y26, Y3)
	FOLD(Z8, Y8, Y27, Y12)
	FOLD(Z9, Y9, Y27, Y13)
	FOLD(Z10, Y10, Y27, Y14)
	FOLD(Z11, Y11, Y27, Y15)
	ADDQ $2, DX
	DECQ CX
	JNZ wgroup

	// The bias terms, 8 groups a vector, each input against its sums.
	MOVQ xsum+32(FP), R10
	MOVQ groups+56(FP), CX
	MOVQ CX, R9
	SHRQ $3, R9
	JZ wreduce

wbias:
	VPMOVZXWD (BX), Y4
	VPSLLD $16, Y4, Y4
	VPMOVZXWD (BX)(R13*1), Y5
	VPSLLD $16, Y5, Y5
	BIASFMA(0, Y0, Y12)
	BIASFMA(32, Y1, Y13)
	BIASFMA(64, Y2, Y14)
	BIASFMA(96, Y3, Y15)
	ADDQ $16, BX
	ADDQ $128, R10
	DECQ R9
	JNZ wbias

wreduce:
	REDUCE(Y0, X0)
	REDUCE(Y1, X1)
	REDUCE(Y2, X2)
	REDUCE(Y3, X3)
	REDUCE(Y12, X12)
	REDUCE(Y13, X13)
	REDUCE(Y14, X14)
	REDUCE(Y15, X15)
	ANDQ $7, CX
	JZ wstore

wone:
	MOVWLZX (BX), AX
	SHLL $16, AX
	VMOVD AX, X4
	MOVWLZX (BX)(R13*1), AX
	SHLL $16, AX
	VMOVD AX, X5
	TAILFMA(0, X0, X12)
	TAILFMA(4, X1, X13)
	TAILFMA(8, X2, X14)
	TAILFMA(12, X3, X15)
	ADDQ $2, BX
	ADDQ $16, R10
	DECQ CX
	JNZ wone

wstore:
	MOVSS X0, 0(R11)
	MOVSS X1, 4(R11)
	MOVSS X2, 8(R11)
	MOVSS X3, 12(R11)
	MOVSS X12, 16(R11)
	MOVSS X13, 20(R11)
	MOVSS X14, 24(R11)
	MOVSS X15, 28(R11)
	ADDQ $32, R11
	// Past row B: its words, scales and biases.
	ADDQ R12, SI
	ADDQ R13, DX
	ADDQ R13, BX
	DECQ R8
	JNZ wpair

	VZEROUPPER
	RET
