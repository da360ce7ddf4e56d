package mlxquant

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// code reads value k's code.
func (q *Quantized) code(k int) uint32 {
	per := 32 / q.Bits
	return q.Codes[k/per] >> (q.Bits * (k % per)) & (1<<q.Bits - 1)
}

// TestQuantizeHandChecked checks groups worked out by hand from MLX's CPU
// kernel (no MLX here to ask): the larger-magnitude end is the bias and
// exact, 0 lands on a code, scale and bias are stored as bfloat16 after
// the codes used their float32 values, halves round to even.
func TestQuantizeHandChecked(t *testing.T) {
	group := func(set map[int]float32) []float32 {
		w := make([]float32, GroupSize)
		for i, v := range set {
			w[i] = v
		}
		return w
	}
	cases := []struct {
		name         string
		w            []float32
		bits         int
		scale, bias  uint16
		codes        map[int]uint32
		zeroCode     uint32 // the code of the zeros elsewhere
		zeroCodeFrom int    // an index holding 0
	}{
		// min side: scale 1.5/15 = 0.1, edge -1, q0 = rint(-1/0.1) = -10,
		// scale -1/-10 = 0.1 (bf16 0x3dcd), bias -1 (0xbf80); 0.5 ->
		// rint(1.5/0.1) = 15, 0 -> 10.
		{"min side", group(map[int]float32{0: -1, 1: 0.5}), 4, 0x3dcd, 0xbf80, map[int]uint32{0: 0, 1: 15}, 10, 2},
		// max side: edge 1, scale -0.1 (0xbdcd), bias 1 (0x3f80); -0.5 ->
		// 15, 0 -> 10.
		{"max side", group(map[int]float32{0: 1, 1: -0.5}), 4, 0xbdcd, 0x3f80, map[int]uint32{0: 0, 1: 15}, 10, 2},
		// a tie: 0..15 gives scale -1, bias 15; 12.5 -> rint(2.5) = 2 (away
		// from zero would give 3).
		{"tie to even", group(map[int]float32{0: 15, 1: 12.5, 2: 11.5}), 4, 0xbf80, 0x4170, map[int]uint32{0: 0, 1: 2, 2: 4}, 15, 3},
		// all zero: scale -1e-7 (the floor, negated on the max side), q0 = 0
		// so bias 0; every code 0.
		{"constant zero", group(nil), 4, BF16(-1e-7), 0, map[int]uint32{0: 0}, 0, 1},
		// constant 0.5: q0 = rint(0.5/-1e-7) = -5e6, scale 0.5/-5e6, bias 0.5.
		{"constant", group(map[int]float32{}), 8, BF16(0.5 / -5e6), 0x3f00, map[int]uint32{}, 0, 0},
		// 8 bits: 255 bins, 0 and 2.55: scale -0.01, bias 2.55; 0 -> 255.
		{"8 bits", group(map[int]float32{0: 2.55}), 8, BF16(2.55 / -255), BF16(2.55), map[int]uint32{0: 0}, 255, 1},
	}
	for i := range cases[4].w {
		cases[4].w[i] = 0.5
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := Quantize(c.w, GroupSize, c.bits)
			if err != nil {
				t.Fatal(err)
			}
			if q.Scales[0] != c.scale || q.Biases[0] != c.bias {
				t.Errorf("scale %#04x bias %#04x, want %#04x %#04x", q.Scales[0], q.Biases[0], c.scale, c.bias)
			}
			for k, want := range c.codes {
				if got := q.code(k); got != want {
					t.Errorf("code %d = %d, want %d", k, got, want)
				}
			}
			if got := q.code(c.zeroCodeFrom); got != c.zeroCode {
				t.Errorf("code of w[%d] = %d, want %d", c.zeroCodeFrom, got, c.zeroCode)
			}
		})
	}
}

// TestQuantizeRoundTrip bounds the dequantized error of random rows: half
// a step, plus how far the group's far end lies past the last code (the
// scale is made edge/q0 so 0 is exact, which may shrink it: MLX clips
// there), plus what rounding scale and bias to bfloat16 (8 significant
// bits) moves a code's value.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, bits := range []int{4, 8} {
		const rows, cols = 5, 3 * GroupSize
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * 0.05)
		}
		w[3] = 0.4 // an outlier widens one group
		q, err := Quantize(w, cols, bits)
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Codes) != rows*cols*bits/32 || len(q.Scales) != rows*cols/GroupSize {
			t.Fatalf("%d codes, %d scales", len(q.Codes), len(q.Scales))
		}
		nBins := float64(int(1)<<bits - 1)
		got := q.Dequantize()
		for k, v := range w {
			g := k / GroupSize
			s, b := math.Abs(float64(FromBF16(q.Scales[g]))), math.Abs(float64(FromBF16(q.Biases[g])))
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, x := range w[g*GroupSize : (g+1)*GroupSize] {
				lo, hi = min(lo, float64(x)), max(hi, float64(x))
			}
			clip := max(0, hi-lo-nBins*s)
			bound := s/2 + clip + (nBins*s+b)*math.Exp2(-8) + 1e-7
			if d := math.Abs(float64(got[k] - v)); d > bound {
				t.Fatalf("%d bits: value %d: %g dequantized to %g (off %g, bound %g)", bits, k, v, got[k], d, bound)
			}
		}
		// Zero stays exact wherever it falls inside a group's range: the
		// bias is the group's end, a whole number of scales from 0.
		zero := make([]float32, cols)
		zero[0], zero[1] = -0.3, 0.2
		qz, _ := Quantize(zero, cols, bits)
		if d := qz.Dequantize()[2]; math.Abs(float64(d)) > math.Abs(float64(FromBF16(qz.Biases[0])))*math.Exp2(-8) {
			t.Errorf("%d bits: 0 dequantized to %g", bits, d)
		}
	}
}

func TestQuantizeRefusesShapes(t *testing.T) {
	for _, c := range []struct{ n, cols, bits int }{{64, 64, 3}, {96, 48, 4}, {100, 64, 4}, {0, 0, 4}} {
		if _, err := Quantize(make([]float32, c.n), c.cols, c.bits); !errors.Is(err, ErrShape) {
			t.Errorf("%d values, %d columns, %d bits: %v", c.n, c.cols, c.bits, err)
		}
	}
}

func TestHalfWidening(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x0001, float32(math.Exp2(-24))}, {0x7bff, 65504}, {0x8000, float32(math.Copysign(0, -1))}} {
		if got := FromF16(c.h); got != c.want || math.Signbit(float64(got)) != math.Signbit(float64(c.want)) {
			t.Errorf("FromF16(%#04x) = %g, want %g", c.h, got, c.want)
		}
	}
	if FromBF16(BF16(1.00390625)) != 1 || FromBF16(BF16(1.01171875)) != 1.015625 { // ties to even
		t.Error("BF16 does not round ties to even")
	}
}
