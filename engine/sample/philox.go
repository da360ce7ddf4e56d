package sample

import "math/bits"

// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC11): a counter-based generator, so draw n is a pure function of the
// seed and n and the GPU's sampler (shaders/sample.metal) computes the very
// same words without carrying generator state between steps.
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9 // golden ratio
	philoxW1 = 0xBB67AE85 // sqrt(3) - 1
)

// Philox4x32 is the Philox4x32-10 block function: ten rounds over ctr,
// bumping the key before every round after the first.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	for r := range 10 {
		if r > 0 {
			key[0] += philoxW0
			key[1] += philoxW1
		}
		hi0, lo0 := bits.Mul32(philoxM0, ctr[0])
		hi1, lo1 := bits.Mul32(philoxM1, ctr[2])
		ctr = [4]uint32{hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0}
	}
	return ctr
}

// Draw is the 64-bit random word of draw number counter of a generation
// seeded with seed: the first two output words of Philox4x32 with counter
// (counter, 0, 0, 0) and key (low, high 32 bits of seed), the first word
// high.
func Draw(seed uint64, counter uint32) uint64 {
	out := Philox4x32([4]uint32{counter, 0, 0, 0}, [2]uint32{uint32(seed), uint32(seed >> 32)})
	return uint64(out[0])<<32 | uint64(out[1])
}
