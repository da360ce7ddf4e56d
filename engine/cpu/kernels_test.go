package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"petal/engine/checkpoint/checkpointtest"
)

// randomQuant is a rows x cols matrix quantized at bits with the given
// group size, from normal weights.
func randomQuant(r *rand.Rand, rows, cols, bits, group int) *matrix {
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	codes, sc, bi := checkpointtest.Quantize(w, cols, bits, group)
	return &matrix{rows: rows, cols: cols, bits: bits, group: group, words: codes, scales: sc, biases: bi}
}

func randomFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// exactRow is row r of m times x in float64 from the dequantized weights,
// with the sum of |terms| that bounds float32 rounding.
func exactRow(m *matrix, r int, x []float32) (sum, mag float64) {
	w := make([]float32, m.cols)
	m.dequantRow(r, w)
	for c, v := range w {
		sum += float64(v) * float64(x[c])
		mag += math.Abs(float64(v) * float64(x[c]))
	}
	return sum, mag
}

func near(got float32, want, mag float64) bool {
	return math.Abs(float64(got)-want) <= 1e-5*(mag+1)
}

// TestQdotRowVec checks the decode kernels against the Go loops' products
// on 4- and 8-bit rows of every group size MLX writes and group counts
// that are not a multiple of the kernels' unrolling, and that they decline
// the groups they do not take (the 4-bit ones on amd64 take 64 codes a
// load, so not groups of 32).
func TestQdotRowVec(t *testing.T) {
	if vectorKernels && runtime.GOARCH == "amd64" && servesGroups(4, 4) {
		t.Error("the amd64 4-bit kernels take 8 words a load, not groups of 4 words")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, groups := range []int{1, 2, 3, 7, 11, 32} {
				cols := group * groups
				m := randomQuant(r, 3, cols, bits, group)
				x := randomFloats(r, cols)
				perWord := 32 / bits
				wpr, wpg := cols/perWord, group/perWord
				for row := range m.rows {
					words := m.words[row*wpr : (row+1)*wpr]
					sc := m.scales[row*groups : (row+1)*groups]
					bi := m.biases[row*groups : (row+1)*groups]
					xsum := randomFloats(r, groups)
					xk := x
					if bits == 4 {
						xk = qdot4Lanes(new([]float32), x)
					}
					got, ok := qdotRowVec(bits, words, xk, sc, bi, xsum, wpg)
					if serves := servesGroups(bits, wpg); ok != serves {
						t.Fatalf("bits %d group %d: kernel served %v, want %v", bits, group, ok, serves)
					}
					if !ok {
						continue
					}
					var want, mag float64
					for g := range groups {
						var d float32
						if bits == 4 {
							d = dot4(words[g*wpg:(g+1)*wpg], x[g*group:(g+1)*group])
						} else {
							d = dot8(words[g*wpg:(g+1)*wpg], x[g*group:(g+1)*group])
						}
						term := float64(bf16(sc[g])) * float64(d)
						bias := float64(bf16(bi[g])) * float64(xsum[g])
						want += term + bias
						mag += math.Abs(term) + math.Abs(bias)
					}
					if !near(got, want, mag) {
						t.Errorf("bits %d group %d groups %d row %d: got %v, want %v", bits, group, groups, row, got, want)
					}
				}
			}
		}
	}
}

// TestQdotPairVec checks the two-row kernels against the row kernels on
// each of their rows, bit for bit (each row's terms are added in the same
// order), for 4- and 8-bit codes on every group size and on group counts
// that leave a tail after the bias pass's 8 groups a vector.
func TestQdotPairVec(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, groups := range []int{1, 2, 3, 7, 8, 11, 32} {
				cols := group * groups
				m := randomQuant(r, 2, cols, bits, group)
				x := randomFloats(r, cols)
				if bits == 4 {
					x = qdot4Lanes(new([]float32), x)
				}
				xsum := randomFloats(r, groups)
				wpr, wpg := cols*bits/32, group*bits/32
				// The kernel takes its rows apart: row 1 first.
				words := [2][]uint32{m.words[wpr:], m.words[:wpr]}
				sc := [2][]uint16{m.scales[groups:], m.scales[:groups]}
				bi := [2][]uint16{m.biases[groups:], m.biases[:groups]}
				var got [2]float32
				serves := servesGroups(bits, wpg)
				if ok := qdotPairVec(bits, words, x, sc, bi, xsum, wpg, &got); ok != serves {
					t.Fatalf("bits %d group %d: kernel served %v, want %v", bits, group, ok, serves)
				} else if !ok {
					continue
				}
				for k := range 2 {
					want, _ := qdotRowVec(bits, words[k], x, sc[k], bi[k], xsum, wpg)
					if got[k] != want {
						t.Errorf("bits %d group %d groups %d row %d: got %v, the row kernel %v", bits, group, groups, k, got[k], want)
					}
				}
			}
		}
	}
}

// TestQdotPairVecRefuses: every slice the kernel reads is checked against
// the shape before it runs, for each of the two rows, so a short one makes
// the wrapper decline (and the caller take the Go loop) rather than the
// kernel read past it.
func TestQdotPairVecRefuses(t *testing.T) {
	if !vectorKernels {
		t.Skip("no vector kernels in this build")
	}
	r := rand.New(rand.NewPCG(13, 14))
	const group, groups = 64, 4
	cols := group * groups
	for _, bits := range []int{4, 8} {
		m := randomQuant(r, 2, cols, bits, group)
		wpr := cols * bits / 32
		full := func() ([2][]uint32, []float32, [2][]uint16, [2][]uint16, []float32, int) {
			return [2][]uint32{m.words[:wpr], m.words[wpr:]}, randomFloats(r, cols),
				[2][]uint16{m.scales[:groups], m.scales[groups:]}, [2][]uint16{m.biases[:groups], m.biases[groups:]},
				randomFloats(r, groups), group * bits / 32
		}
		var out [2]float32
		if w, x, sc, bi, xs, wpg := full(); !qdotPairVec(bits, w, x, sc, bi, xs, wpg, &out) {
			t.Fatalf("bits %d: the full shape is refused", bits)
		}
		for name, cut := range map[string]func(w *[2][]uint32, x *[]float32, sc, bi *[2][]uint16, xs *[]float32, wpg *int){
			"row 0 a word short":  func(w *[2][]uint32, _ *[]float32, _, _ *[2][]uint16, _ *[]float32, _ *int) { w[0] = w[0][:wpr-1] },
			"row 1 a word short":  func(w *[2][]uint32, _ *[]float32, _, _ *[2][]uint16, _ *[]float32, _ *int) { w[1] = w[1][:wpr-1] },
			"row 1 a scale short": func(_ *[2][]uint32, _ *[]float32, sc, _ *[2][]uint16, _ *[]float32, _ *int) { sc[1] = sc[1][:groups-1] },
			"row 1 a bias short":  func(_ *[2][]uint32, _ *[]float32, _, bi *[2][]uint16, _ *[]float32, _ *int) { bi[1] = bi[1][:groups-1] },
			"row 0 a bias short":  func(_ *[2][]uint32, _ *[]float32, _, bi *[2][]uint16, _ *[]float32, _ *int) { bi[0] = bi[0][:groups-1] },
			"x short":             func(_ *[2][]uint32, x *[]float32, _, _ *[2][]uint16, _ *[]float32, _ *int) { *x = (*x)[:cols-1] },
			"xsum short":          func(_ *[2][]uint32, _ *[]float32, _, _ *[2][]uint16, xs *[]float32, _ *int) { *xs = (*xs)[:groups-1] },
			"2 words a group":     func(_ *[2][]uint32, _ *[]float32, _, _ *[2][]uint16, _ *[]float32, wpg *int) { *wpg = 2 },
			"0 words a group": func(w *[2][]uint32, _ *[]float32, _, _ *[2][]uint16, _ *[]float32, wpg *int) {
				*wpg, *w = 0, [2][]uint32{{}, {}}
			},
			"no groups": func(w *[2][]uint32, _ *[]float32, sc, bi *[2][]uint16, _ *[]float32, _ *int) {
				*w, *sc, *bi = [2][]uint32{}, [2][]uint16{}, [2][]uint16{}
			},
		} {
			w, x, sc, bi, xs, wpg := full()
			cut(&w, &x, &sc, &bi, &xs, &wpg)
			if qdotPairVec(bits, w, x, sc, bi, xs, wpg, &out) {
				t.Errorf("bits %d, %s: served", bits, name)
			}
		}
	}
}

// TestDot checks dot, vector prefix and Go tail, on every length up to 130.
func TestDot(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n <= 130; n++ {
		a, b := randomFloats(r, n), randomFloats(r, n+3)
		var want, mag float64
		for i := range n {
			want += float64(a[i]) * float64(b[i])
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		if got := dot(a, b); !near(got, want, mag) {
			t.Errorf("n=%d: got %v, want %v", n, got, want)
		}
	}
}

// TestMulQuant checks both products a matrix does, the row kernels (one
// input row) and the tiles (several), against float64 on shapes whose
// row counts leave tails of 1-3 rows after the tiles of four.
func TestMulQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	sc := newScratch()
	for _, c := range []struct{ rows, cols, bits, group, tokens int }{
		{5, 64, 4, 64, 1}, {7, 192, 4, 64, 5}, {33, 256, 8, 64, 4}, {18, 128, 4, 32, 9}, {64, 2048, 4, 64, 7}, {6, 384, 8, 128, 2},
		{150, 384, 4, 64, 8}, {27, 1024, 8, 32, 6},
	} {
		t.Run(fmt.Sprintf("%dx%d/%dbit/g%d/t%d", c.rows, c.cols, c.bits, c.group, c.tokens), func(t *testing.T) {
			m := randomQuant(r, c.rows, c.cols, c.bits, c.group)
			x := randomFloats(r, c.tokens*c.cols)
			out := make([]float32, c.tokens*c.rows)
			m.mul(sc, 0, x, c.tokens, out)
			for i := range c.tokens {
				for row := range c.rows {
					want, mag := exactRow(m, row, x[i*c.cols:(i+1)*c.cols])
					if got := out[i*c.rows+row]; !near(got, want, mag) {
						t.Errorf("token %d row %d: got %v, want %v", i, row, got, want)
					}
				}
			}
		})
	}
}

// TestExpShift checks softmax's exponentials, vector prefix and Go tail,
// against float64 exp on every length up to 40 and arguments down to the
// kernel's clamp (scores far below the maximum).
func TestExpShift(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for n := 0; n <= 40; n++ {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(r.Float64()*90 - 85)
		}
		in := append([]float32(nil), s...)
		const shift = 3.5
		got := expShift(s, shift)
		var want float64
		for i, v := range in {
			e := math.Exp(float64(v - shift))
			want += e
			// Below -87 the kernel gives exp(-87): 2e-38 is nothing
			// beside the maximum's term of 1.
			if math.Abs(float64(s[i])-e) > 4e-7*e+2e-38 {
				t.Errorf("n=%d: exp(%v) = %v, want %v", n, v-shift, s[i], e)
			}
		}
		if math.Abs(float64(got)-want) > 1e-6*want {
			t.Errorf("n=%d: sum %v, want %v", n, got, want)
		}
	}
}

// TestAxpyRows checks the weighted sum of strided rows on widths with and
// without a 64-column block and a tail, and on no rows.
func TestAxpyRows(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ n, width, stride int }{{0, 64, 64}, {1, 64, 64}, {7, 128, 256}, {5, 96, 100}, {3, 32, 40}, {9, 200, 200}} {
		v := randomFloats(r, max(0, c.n-1)*c.stride+c.width)
		w := randomFloats(r, c.n)
		out := randomFloats(r, c.width)
		want := make([]float64, c.width)
		mag := make([]float64, c.width)
		for j := range out {
			want[j] = float64(out[j])
			mag[j] = math.Abs(want[j])
			for p := range c.n {
				term := float64(w[p]) * float64(v[p*c.stride+j])
				want[j] += term
				mag[j] += math.Abs(term)
			}
		}
		axpyRows(v, c.stride, w, out)
		for j := range out {
			if !near(out[j], want[j], mag[j]) {
				t.Errorf("%+v column %d: got %v, want %v", c, j, out[j], want[j])
			}
		}
	}
}

// TestKernelBlocks checks the register blocks (four rows by one input,
// four rows by three) against float64 on every length the kernels take up
// to 136, rows and inputs strided past their length and apart, and that
// they refuse lengths that are not a multiple of 8.
func TestKernelBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for n := 1; n <= 136; n++ {
		stride, xStride := n+5, n+11
		rows, x := randomFloats(r, 4*stride), randomFloats(r, 3*xStride)
		var four [4]float32
		var twelve [12]float32
		served1 := dot4RowsVec(rows, stride, x, n, &four)
		served3 := dot4x3Vec(rows, stride, x, xStride, n, &twelve)
		if want := vectorKernels && n%8 == 0; served1 != want || served3 != want {
			t.Fatalf("n=%d: served %v and %v, want %v", n, served1, served3, want)
		}
		if !served1 {
			continue
		}
		for j := range 3 {
			for k := range 4 {
				var want, mag float64
				for c := range n {
					p := float64(rows[k*stride+c]) * float64(x[j*xStride+c])
					want += p
					mag += math.Abs(p)
				}
				if got := twelve[4*j+k]; !near(got, want, mag) {
					t.Errorf("n=%d input %d row %d: 4x3 block %v, want %v", n, j, k, got, want)
				}
				if got := four[k]; j == 0 && !near(got, want, mag) {
					t.Errorf("n=%d row %d: 4-row block %v, want %v", n, k, got, want)
				}
			}
		}
	}
}

// TestDeltaRows checks DeltaNet's state update and read against float64
// on state widths with and without 32-column blocks and a tail, and on no
// rows.
func TestDeltaRows(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, c := range []struct{ dk, dv int }{{0, 64}, {1, 32}, {64, 64}, {128, 128}, {5, 100}, {3, 20}, {7, 96}} {
		S := randomFloats(r, c.dk*c.dv)
		k, q := randomFloats(r, c.dk), randomFloats(r, c.dk)
		kv, o := randomFloats(r, c.dv), randomFloats(r, c.dv)
		const alpha = 0.9
		wantS := make([]float64, len(S))
		wantO := make([]float64, c.dv)
		magO := make([]float64, c.dv)
		for j := range o {
			wantO[j] = float64(o[j])
			magO[j] = math.Abs(wantO[j])
		}
		for a := range c.dk {
			for j := range c.dv {
				s := alpha*float64(S[a*c.dv+j]) + float64(k[a])*float64(kv[j])
				wantS[a*c.dv+j] = s
				wantO[j] += s * float64(q[a])
				magO[j] += math.Abs(s * float64(q[a]))
			}
		}
		deltaRows(S, k, q, alpha, kv, o)
		for i, s := range S {
			if a, j := i/c.dv, i%c.dv; !near(s, wantS[i], math.Abs(alpha*float64(s))+math.Abs(float64(k[a]*kv[j]))) {
				t.Errorf("%+v state %d: got %v, want %v", c, i, s, wantS[i])
			}
		}
		for j := range o {
			if !near(o[j], wantO[j], magO[j]) {
				t.Errorf("%+v output %d: got %v, want %v", c, j, o[j], wantO[j])
			}
		}
	}
}

// TestScaledCodes checks the widening of quantized rows into the tiles,
// vector kernels and Go loop alike, against the dequantized row less its
// biases, on every MLX group size at 4 and 8 bits.
func TestScaledCodes(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, groups := range []int{1, 3, 8} {
				m := randomQuant(r, 2, group*groups, bits, group)
				got := make([]float32, m.cols)
				want := make([]float32, m.cols)
				for row := range m.rows {
					m.scaledCodes(row, got)
					m.dequantRow(row, want)
					for c := range want {
						w := want[c] - bf16(m.biases[row*groups+c/group])
						if math.Abs(float64(got[c]-w)) > 1e-5*(math.Abs(float64(w))+math.Abs(float64(want[c]))) {
							t.Fatalf("bits %d group %d groups %d row %d column %d: got %v, want %v", bits, group, groups, row, c, got[c], w)
						}
					}
				}
			}
		}
	}
}

// TestAxpyRows3 checks the weighted sums of strided rows for three weight
// rows and outputs at once on widths with and without 32-column blocks and
// a tail, and on no rows.
func TestAxpyRows3(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, c := range []struct{ n, width, stride int }{{0, 32, 32}, {1, 32, 40}, {64, 128, 256}, {7, 100, 100}, {5, 20, 24}, {64, 64, 64}} {
		wStride, outStride := c.n+3, c.width+5
		v := randomFloats(r, max(0, c.n-1)*c.stride+c.width)
		w := randomFloats(r, 2*wStride+c.n)
		out := randomFloats(r, 2*outStride+c.width)
		want := make([]float64, len(out))
		mag := make([]float64, len(out))
		for i, o := range out {
			want[i] = float64(o)
			mag[i] = math.Abs(want[i])
		}
		for j := range 3 {
			for col := range c.width {
				for p := range c.n {
					term := float64(w[j*wStride+p]) * float64(v[p*c.stride+col])
					want[j*outStride+col] += term
					mag[j*outStride+col] += math.Abs(term)
				}
			}
		}
		axpyRows3(v, c.stride, w, wStride, c.n, out, outStride, c.width)
		for i := range out {
			if !near(out[i], want[i], mag[i]) {
				t.Errorf("%+v element %d: got %v, want %v", c, i, out[i], want[i])
			}
		}
	}
}

// TestQdotQuadVec checks the four-input kernel against the row kernel on
// each input, bit for bit, on every group size and on group counts that
// leave a tail after the bias pass's 8 groups a vector.
func TestQdotQuadVec(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, group := range []int{32, 64, 128} {
		for _, groups := range []int{1, 2, 3, 7, 8, 11, 32} {
			cols := group * groups
			m := randomQuant(r, 1, cols, 4, group)
			var x, xsum [4][]float32
			for i := range 4 {
				x[i] = qdot4Lanes(new([]float32), randomFloats(r, cols))
				xsum[i] = randomFloats(r, groups)
			}
			wpg := group / 8
			var got [4]float32
			served := qdotQuadVec(4, m.words, x, m.scales, m.biases, xsum, wpg, &got)
			if want := servesGroups(4, wpg) && runtime.GOARCH == "amd64"; served != want {
				t.Fatalf("group %d: kernel served %v, want %v", group, served, want)
			}
			if !served {
				continue
			}
			for i := range 4 {
				want, _ := qdotRowVec(4, m.words, x[i], m.scales, m.biases, xsum[i], wpg)
				if got[i] != want {
					t.Errorf("group %d groups %d input %d: got %v, the row kernel %v", group, groups, i, got[i], want)
				}
			}
		}
	}
}

// TestQdotPairsWideVec checks the wide kernel against the row kernel on
// each row and input, bit for bit: odd and even row counts, inputs packed
// in any order and repeated (a padded block), every group size and group
// counts that leave a tail after the bias pass's 8 groups a vector.
func TestQdotPairsWideVec(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	const inputs = 6
	for _, group := range []int{32, 64, 128} {
		for _, groups := range []int{1, 2, 3, 7, 8, 11, 17} {
			for _, rows := range []int{1, 2, 5} {
				cols := group * groups
				m := randomQuant(r, rows, cols, 4, group)
				xk := qdot4Lanes(new([]float32), randomFloats(r, inputs*cols))
				xsum := randomFloats(r, inputs*groups)
				wpg := group / 8
				for _, in := range [][4]int{{0, 1, 2, 3}, {5, 2, 4, 0}, {3, 4, 4, 4}} {
					x, xs := make([]float32, 4*cols), make([]float32, 4*groups)
					packWide(x, xs, xk, xsum, in, cols, groups)
					out := make([]float32, 4*(rows+1))
					served := qdotPairsWideVec(m.words, m.scales, m.biases, rows, x, xs, wpg, out)
					if want := wideKernels && servesGroups(4, wpg); served != want {
						t.Fatalf("group %d: kernel served %v, want %v", group, served, want)
					}
					if !served {
						continue
					}
					for i, k := range in {
						for row := range rows {
							want, _ := qdotRowVec(4, m.words[row*cols/8:(row+1)*cols/8], xk[k*cols:(k+1)*cols],
								m.scales[row*groups:(row+1)*groups], m.biases[row*groups:(row+1)*groups], xsum[k*groups:(k+1)*groups], wpg)
							if got := out[4*row+i]; got != want {
								t.Errorf("group %d groups %d rows %d inputs %v: input %d row %d got %v, the row kernel %v", group, groups, rows, in, k, row, got, want)
							}
						}
					}
				}
			}
		}
	}
}
