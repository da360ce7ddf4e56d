// The constants of the kernels' exp, Cephes' expf, which kernels_amd64.s
// and kernels_arm64.s both include: exp(x) = 2^n * exp(r),
// n = round(x*log2(e)), r = x - n*ln2 (ln2 in two parts, so r is exact),
// exp(r) by a degree-7 polynomial; within 2 ulp of exp for x in [-87, 88].
DATA expConsts<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expConsts<>+4(SB)/4, $0x3f318000  // ln2 high: 0.693359375
DATA expConsts<>+8(SB)/4, $0xb95e8083  // ln2 low: -2.12194440e-4
DATA expConsts<>+12(SB)/4, $0x39506967 // 1.9875691500e-4
DATA expConsts<>+16(SB)/4, $0x3ab743ce // 1.3981999507e-3
DATA expConsts<>+20(SB)/4, $0x3c088908 // 8.3334519073e-3
DATA expConsts<>+24(SB)/4, $0x3d2aa9c1 // 4.1665795894e-2
DATA expConsts<>+28(SB)/4, $0x3e2aaaaa // 1.6666665459e-1
DATA expConsts<>+32(SB)/4, $0x3f000000 // 0.5
DATA expConsts<>+36(SB)/4, $0x3f800000 // 1
DATA expConsts<>+40(SB)/4, $0xc2ae0000 // -87: below it 2^n would leave the normal range
DATA expConsts<>+44(SB)/4, $0x42b00000 // 88
GLOBL expConsts<>(SB), RODATA|NOPTR, $48
