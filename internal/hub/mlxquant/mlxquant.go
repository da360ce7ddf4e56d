// Package mlxquant quantizes weights exactly as MLX's mx.quantize does in
// its "affine" mode, so that tensors Petal converts itself (the MTP head
// fetched from the original checkpoint) sit beside the tensors of an
// mlx-community checkpoint bit for bit as MLX would have written them.
//
// # The rule
//
// MLX's CPU kernel (mlx/backend/cpu/quantized.cpp, quantize) works per group
// of GroupSize consecutive values of a row, in float32:
//
//	scale = max((max-min)/(2^bits-1), 1e-7)
//	if |min| > |max|: edge = min, else edge = max and scale = -scale
//	q0 = rint(edge/scale)
//	if q0 != 0: scale = edge/q0, bias = edge; else bias = 0
//	q = clamp(rint((w-bias)/scale), 0, 2^bits-1)
//
// so the group's larger-magnitude end is exact and 0 lands on a code. The
// codes are packed little end first, 32/bits to a uint32; scale and bias
// are stored rounded to the weights' dtype (bfloat16 here) only after the
// codes were computed with the float32 values. rint rounds halves to even.
//
// MLX's Metal kernel (affine_quantize in quantized.h), which a conversion
// on a Mac's GPU runs, differs in three corners: it rounds halves away
// from zero, its group maximum starts at 0 (a group of only negative
// values is scaled as if it held a 0), and it does not clamp codes at 0.
// Weight groups of 64 signed values never meet the second, and the first
// only at a value exactly halfway between two codes; this package follows
// the CPU kernel, the reference the Metal one is tested against.
package mlxquant

import (
	"errors"
	"fmt"
	"math"
)

// GroupSize is the group MLX's conversion uses for the Qwen3.6 checkpoints.
const GroupSize = 64

// eps is MLX's floor on a group's scale, so a constant group divides by
// something.
const eps = 1e-7

// ErrShape reports a matrix that cannot be quantized as asked.
var ErrShape = errors.New("mlxquant: bad shape")

// Quantized is a row-major matrix in MLX's affine form.
type Quantized struct {
	Rows, Cols, Bits int
	// Codes holds Rows*Cols*Bits/32 words; Scales and Biases, as bfloat16
	// bits, Rows*Cols/GroupSize each.
	Codes          []uint32
	Scales, Biases []uint16
}

// Quantize quantizes rows of cols values (w holds rows*cols) with bits of
// 4 or 8 and groups of GroupSize.
func Quantize(w []float32, cols, bits int) (*Quantized, error) {
	if bits != 4 && bits != 8 {
		return nil, fmt.Errorf("%w: %d bits (4 or 8)", ErrShape, bits)
	}
	if cols <= 0 || cols%GroupSize != 0 || len(w)%cols != 0 {
		return nil, fmt.Errorf("%w: %d values in rows of %d (a multiple of %d)", ErrShape, len(w), cols, GroupSize)
	}
	rows := len(w) / cols
	perWord := 32 / bits
	nBins := float32(int(1)<<bits - 1)
	groups := len(w) / GroupSize
	q := &Quantized{Rows: rows, Cols: cols, Bits: bits,
		Codes: make([]uint32, len(w)/perWord), Scales: make([]uint16, groups), Biases: make([]uint16, groups)}
	for g := range groups {
		vals := w[g*GroupSize : (g+1)*GroupSize]
		scale, bias := groupParams(vals, nBins)
		for i, v := range vals {
			c := rint((v - bias) / scale)
			c = min(max(c, 0), nBins)
			k := g*GroupSize + i
			q.Codes[k/perWord] |= uint32(c) << (bits * (k % perWord))
		}
		q.Scales[g], q.Biases[g] = BF16(scale), BF16(bias)
	}
	return q, nil
}

// groupParams is the float32 scale and bias of one group.
func groupParams(vals []float32, nBins float32) (scale, bias float32) {
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	scale = max((hi-lo)/nBins, eps)
	edge := hi
	if abs32(lo) > abs32(hi) {
		edge = lo
	} else {
		scale = -scale
	}
	if q0 := rint(edge / scale); q0 != 0 {
		return edge / q0, edge
	}
	return scale, 0
}

// Dequantize is what a kernel computes from q: code*scale+bias per value,
// with the stored (bfloat16) scale and bias.
func (q *Quantized) Dequantize() []float32 {
	perWord := 32 / q.Bits
	mask := uint32(1)<<q.Bits - 1
	out := make([]float32, q.Rows*q.Cols)
	for k := range out {
		g := k / GroupSize
		c := q.Codes[k/perWord] >> (q.Bits * (k % perWord)) & mask
		out[k] = float32(c)*FromBF16(q.Scales[g]) + FromBF16(q.Biases[g])
	}
	return out
}

func rint(x float32) float32 { return float32(math.RoundToEven(float64(x))) }

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// BF16 rounds f to the nearest bfloat16, ties to even, as a cast in MLX
// (and C++'s bfloat16) does; a NaN stays a quiet NaN.
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// FromBF16 widens bfloat16 bits to float32, exactly.
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FromF16 widens IEEE half-precision bits to float32, exactly.
func FromF16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
	case frac == 0:
		return math.Float32frombits(sign)
	}
	// A subnormal half is frac * 2^-24, a normal float32.
	f := float32(frac) * float32(1.0/(1<<24))
	if sign != 0 {
		f = -f
	}
	return f
}
