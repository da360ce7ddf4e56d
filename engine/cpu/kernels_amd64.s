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

// func qdot4AVX2(words *uint32, x *float32, scales *uint16, groups, wordsPerGroup int) float32
//
// Sum over groups g of scale_g * (codes of group g . x of group g), codes
// 4-bit, 8 a word. wordsPerGroup is a multiple of 4: four accumulators of
// 8 lanes each take a word at a time, so FMA latency is hidden.
TEXT ·qdot4AVX2(SB), NOSPLIT, $0-44
	MOVQ words+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ scales+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ wordsPerGroup+32(FP), R8
	VMOVDQU nibbleShifts<>(SB), Y15
	MOVL $15, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS Y0, Y0, Y0

group4:
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	MOVQ R8, R9

word4:
	VPBROADCASTD 0(SI), Y6
	VPBROADCASTD 4(SI), Y7
	VPBROADCASTD 8(SI), Y8
	VPBROADCASTD 12(SI), Y9
	VPSRLVD Y15, Y6, Y6
	VPSRLVD Y15, Y7, Y7
	VPSRLVD Y15, Y8, Y8
	VPSRLVD Y15, Y9, Y9
	VPAND Y14, Y6, Y6
	VPAND Y14, Y7, Y7
	VPAND Y14, Y8, Y8
	VPAND Y14, Y9, Y9
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	VFMADD231PS 0(DI), Y6, Y2
	VFMADD231PS 32(DI), Y7, Y3
	VFMADD231PS 64(DI), Y8, Y4
	VFMADD231PS 96(DI), Y9, Y5
	ADDQ $16, SI
	ADDQ $128, DI
	SUBQ $4, R9
	JNZ word4

	VADDPS Y3, Y2, Y2
	VADDPS Y5, Y4, Y4
	VADDPS Y4, Y2, Y2
	// The group's bf16 scale, widened, times its dot.
	MOVWLZX 0(DX), AX
	SHLL $16, AX
	VMOVD AX, X1
	VBROADCASTSS X1, Y1
	VFMADD231PS Y2, Y1, Y0
	ADDQ $2, DX
	DECQ CX
	JNZ group4

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func qdot8AVX2(words *uint32, x *float32, scales *uint16, groups, wordsPerGroup int) float32
//
// As qdot4AVX2 for 8-bit codes, 4 a word: each accumulator widens two
// words (8 codes) at a time; wordsPerGroup is a multiple of 8.
TEXT ·qdot8AVX2(SB), NOSPLIT, $0-44
	MOVQ words+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ scales+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ wordsPerGroup+32(FP), R8
	VXORPS Y0, Y0, Y0

group8:
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	MOVQ R8, R9

word8:
	VPMOVZXBD 0(SI), Y6
	VPMOVZXBD 8(SI), Y7
	VPMOVZXBD 16(SI), Y8
	VPMOVZXBD 24(SI), Y9
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	VFMADD231PS 0(DI), Y6, Y2
	VFMADD231PS 32(DI), Y7, Y3
	VFMADD231PS 64(DI), Y8, Y4
	VFMADD231PS 96(DI), Y9, Y5
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
	ADDQ $2, DX
	DECQ CX
	JNZ group8

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func dotAVX2(a, b *float32, n int) float32
//
// a . b over n floats, n a multiple of 32 (the caller does the tail).
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
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

// func dot4RowsAVX2(rows *float32, stride int, x *float32, n int, out *float32)
//
// out[k] = rows[k*stride : k*stride+n] . x for k in 0..3, n a multiple of
// 8: one load of x feeds four rows, so a tile of dequantized weight rows
// is multiplied by many prompt tokens with x read once per four rows.
TEXT ·dot4RowsAVX2(SB), NOSPLIT, $0-40
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
