package selftest

import (
	"math"
	"sort"

	"petal/shaders"
)

// The references follow engine/cpu's math in float64 (fp32 where the
// kernels' inputs are stored rounded: bf16 scales, fp16 caches).

// u is fp32's unit roundoff, the base of the quantized products' bounds.
const u = 1.0 / (1 << 24)

// HalfBits rounds x to the nearest IEEE fp16, ties to even, as Metal's
// float-to-half conversion does.
func HalfBits(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	switch {
	case exp == 0xff: // infinity or NaN
		if b&0x7fffff != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 < -14: // below half's normal range: a multiple of 2^-24
		return sign | uint16(math.RoundToEven(math.Abs(float64(x))*(1<<24)))
	case exp-127 > 15:
		return sign | 0x7c00
	}
	// The 24-bit significand shifted to 11 bits, rounded; a carry into bit
	// 11 moves the exponent up, as the encoding is monotonic.
	m := b&0x7fffff | 0x800000
	q, rem := m>>13, m&0x1fff
	if rem > 0x1000 || rem == 0x1000 && q&1 == 1 {
		q++
	}
	h := uint32(exp-127+14)<<10 + q
	if h >= 0x7c00 {
		return sign | 0x7c00
	}
	return sign | uint16(h)
}

// HalfValue widens fp16 bits to float32 (exactly).
func HalfValue(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * float32(frac*math.Exp2(-24))
	case 0x1f:
		if frac != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32((1+frac/1024)*math.Exp2(float64(exp-15)))
}

// RoundHalves is x with every value rounded to fp16, as the KV caches hold
// it.
func RoundHalves(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = HalfValue(HalfBits(v))
	}
	return out
}

// BF16 rounds f to bfloat16, nearest with ties to even (as MLX stores it).
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// FromBF16 widens bfloat16 bits to float32.
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Quantized is the host copy of an MLX affine-quantized matrix (a stack
// of experts of Rows x Cols): uint32 codes packed along Cols, lowest bits
// first; bf16 scales and biases per group of 64 inputs of a row.
type Quantized struct {
	Rows, Cols, Bits int
	Codes            []uint32
	Scales, Biases   []uint16
}

// At is element (r, c) of expert ex dequantized as engine/cpu does (bf16
// scale * code + bf16 bias in fp32), and the magnitude of its terms.
func (q *Quantized) At(ex, r, c int) (w, mag float64) {
	row := ex*q.Rows + r
	per := 32 / q.Bits
	code := q.Codes[row*q.Cols/per+c/per] >> (q.Bits * (c % per)) & (1<<q.Bits - 1)
	g := row*q.Cols/shaders.QMVGroupSize + c/shaders.QMVGroupSize
	s, b := FromBF16(q.Scales[g]), FromBF16(q.Biases[g])
	return float64(s*float32(code) + b), math.Abs(float64(s)*float64(code)) + math.Abs(float64(b))
}

// Mul is row r of expert ex times x, and the sum of the terms' magnitudes.
func (q *Quantized) Mul(ex, r int, x []float32) (y, mag float64) {
	for c := range q.Cols {
		w, m := q.At(ex, r, c)
		y += w * float64(x[c])
		mag += m * math.Abs(float64(x[c]))
	}
	return y, mag
}

// qmatrix is a random quantized matrix on the device with its host copy.
type qmatrix struct {
	m shaders.QMatrix
	Quantized
}

func (e *env) qmatrix(experts, rows, cols, bits int) *qmatrix {
	q := &qmatrix{Quantized: Quantized{Rows: rows, Cols: cols, Bits: bits, Codes: make([]uint32, experts*rows*cols*bits/32)}}
	for i := range q.Codes {
		q.Codes[i] = e.rng.Uint32()
	}
	groups := experts * rows * cols / shaders.QMVGroupSize
	q.Scales, q.Biases = make([]uint16, groups), make([]uint16, groups)
	for i := range q.Scales {
		q.Scales[i] = BF16(float32(e.rng.NormFloat64() * 0.02))
		q.Biases[i] = BF16(float32(e.rng.NormFloat64() * 0.1))
	}
	q.m = shaders.QMatrix{Codes: e.u32(q.Codes), Scales: e.u16(q.Scales), Biases: e.u16(q.Biases),
		Rows: rows, Cols: cols, Bits: bits, GroupSize: shaders.QMVGroupSize}
	return q
}

// qmvTol bounds a quantized product's fp32 error over k columns: sequential
// chunks of up to 16 products per lane, then a simd_sum tree, each addition
// costing u of the running magnitude; 64 covers the fixed depth. A tiled
// GEMM adds its k products in sequence, hence the k term.
func qmvTol(k int, mag float64) float64 { return float64(64+k) * u * mag }

// RMSNorm is x / sqrt(mean(x^2) + eps) * w.
func RMSNorm(x, w []float32, eps float32) []float64 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+float64(eps))
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) * inv * float64(w[i])
	}
	return out
}

// Rope rotates the first dims of x by position pos (pairs j, j+dims/2),
// with the angle formed in fp32 as engine/cpu does.
func Rope(x []float64, dims int, theta float64, pos int) {
	half := dims / 2
	for j := range half {
		inv := float32(math.Pow(theta, -2*float64(j)/float64(dims)))
		ang := float64(float32(float64(pos) * float64(inv)))
		cos, sin := math.Cos(ang), math.Sin(ang)
		a, b := x[j], x[j+half]
		x[j] = a*cos - b*sin
		x[j+half] = b*cos + a*sin
	}
}

// Sigmoid is 1/(1+e^-x).
func Sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// Silu is x * sigmoid(x).
func Silu(x float64) float64 { return x * Sigmoid(x) }

// Attend is softmax(q.K^T / sqrt(HeadDim)).V over positions 0..n-1 of
// query head h's KV head, gated by sigmoid(gate); q and gate are
// [Heads][HeadDim], the caches [positions][KVHeads][HeadDim].
func Attend(q, gate, kc, vc []float32, a shaders.AttnShape, h, n int) []float64 {
	d := a.HeadDim
	kh := h / (a.Heads / a.KVHeads)
	scale := float64(float32(1 / math.Sqrt(float64(d))))
	scores := make([]float64, n)
	best := math.Inf(-1)
	for p := range n {
		var s float64
		for i := range d {
			s += float64(q[h*d+i]) * float64(kc[(p*a.KVHeads+kh)*d+i])
		}
		scores[p] = s * scale
		best = max(best, scores[p])
	}
	var sum float64
	for p := range scores {
		scores[p] = math.Exp(scores[p] - best)
		sum += scores[p]
	}
	o := make([]float64, d)
	for p := range n {
		for i := range d {
			o[i] += scores[p] / sum * float64(vc[(p*a.KVHeads+kh)*d+i])
		}
	}
	for i := range o {
		o[i] *= Sigmoid(float64(gate[h*d+i]))
	}
	return o
}

// Conv is channel ch's causal conv before SiLU for input cur: the current
// input's tap (last of w's kern per channel), then the history hist (kern-1
// per channel, oldest first), which then shifts cur in.
func Conv(hist, w []float32, ch, kern int, cur float32) float64 {
	hc := hist[ch*(kern-1) : (ch+1)*(kern-1)]
	acc := float64(w[ch*kern+kern-1]) * float64(cur)
	for j := range kern - 1 {
		acc += float64(w[ch*kern+j]) * float64(hc[j])
	}
	copy(hc, hc[1:])
	hc[kern-2] = cur
	return acc
}

// Delta is the Gated DeltaNet recurrence of one layer in float64.
type Delta struct {
	D                  shaders.DeltaShape
	NegA, DtBias, Norm []float32
	// State is [ValueHeads][KeyDim][ValueDim].
	State []float64
}

// Step advances the state by one token and returns its gated output
// [ValueHeads][ValueDim]: q, k l2-normalised (q also by 1/sqrt(KeyDim)),
// beta = sigmoid(b), alpha = exp(negA * softplus(a + dtBias)); S = alpha S;
// S += k (x) beta (v - S^T k); o = RMSNorm(S^T q) * norm * silu(z).
func (r *Delta) Step(qkv, z, b, a []float32) []float64 {
	d := r.D
	l2 := func(x []float32, scale float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = float64(v) / math.Sqrt(ss+1e-6) * scale
		}
		return out
	}
	o := make([]float64, d.ValueHeads*d.ValueDim)
	for h := range d.ValueHeads {
		kh := h / (d.ValueHeads / d.KeyHeads)
		q := l2(qkv[kh*d.KeyDim:(kh+1)*d.KeyDim], 1/math.Sqrt(float64(d.KeyDim)))
		k := l2(qkv[(d.KeyHeads+kh)*d.KeyDim:(d.KeyHeads+kh+1)*d.KeyDim], 1)
		v := qkv[2*d.KeyHeads*d.KeyDim+h*d.ValueDim:]
		beta := Sigmoid(float64(b[h]))
		x := float64(a[h]) + float64(r.DtBias[h])
		sp := x
		if x <= 20 {
			sp = math.Log1p(math.Exp(x))
		}
		alpha := math.Exp(float64(r.NegA[h]) * sp)
		S := r.State[h*d.KeyDim*d.ValueDim : (h+1)*d.KeyDim*d.ValueDim]
		oh := o[h*d.ValueDim : (h+1)*d.ValueDim]
		for j := range d.ValueDim {
			var kv float64
			for i := range d.KeyDim {
				S[i*d.ValueDim+j] *= alpha
				kv += S[i*d.ValueDim+j] * k[i]
			}
			delta := beta * (float64(v[j]) - kv)
			for i := range d.KeyDim {
				S[i*d.ValueDim+j] += k[i] * delta
				oh[j] += S[i*d.ValueDim+j] * q[i]
			}
		}
		var ss float64
		for _, x := range oh {
			ss += x * x
		}
		inv := 1 / math.Sqrt(ss/float64(d.ValueDim)+float64(d.Eps))
		for j := range oh {
			oh[j] *= inv * float64(r.Norm[j]) * Silu(float64(z[h*d.ValueDim+j]))
		}
	}
	return o
}

// Router is engine/cpu's routing: the top k logits by a stable sort, their
// softmax over all experts, renormalised over the top k when normalize.
func Router(lg []float32, k int, normalize bool) ([]uint32, []float64) {
	idx := make([]int, len(lg))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return lg[idx[a]] > lg[idx[b]] })
	top := idx[:k]
	maxL := lg[top[0]]
	var all, sel float64
	for _, v := range lg {
		all += math.Exp(float64(v - maxL))
	}
	for _, e := range top {
		sel += math.Exp(float64(lg[e] - maxL))
	}
	ids, ws := make([]uint32, k), make([]float64, k)
	for j, e := range top {
		ids[j] = uint32(e)
		ws[j] = math.Exp(float64(lg[e]-maxL)) / all
		if normalize {
			ws[j] = math.Exp(float64(lg[e]-maxL)) / sel
		}
	}
	return ids, ws
}
