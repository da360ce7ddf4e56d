package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
)

func openTiny(t testing.TB, o checkpointtest.Options) *Model {
	t.Helper()
	dir := t.TempDir()
	if err := checkpointtest.Write(dir, o); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func randomTokens(n, vocab int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(vocab)
	}
	return ids
}

func forward(t testing.TB, m *Model, chunks ...[]int) []float32 {
	t.Helper()
	seq, _ := m.NewSequence()
	defer seq.Close()
	var all []float32
	for _, c := range chunks {
		out := make([]float32, len(c)*m.cfg.Vocab)
		if err := seq.Forward(c, out); err != nil {
			t.Fatal(err)
		}
		all = append(all, out...)
	}
	return all
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// Splitting a prompt anywhere, or decoding it token by token, must give
// the logits of one pass over the whole prompt: the caches carry exactly
// the state the full pass would have.
func TestSplitsEqualOnePass(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	ids := randomTokens(40, m.cfg.Vocab, 7)
	whole := forward(t, m, ids)
	for _, n := range []int{1, 17, 39} {
		if d := maxDiff(whole, forward(t, m, ids[:n], ids[n:])); d > 1e-4 {
			t.Errorf("prefill %d then %d differs from one pass by %g", n, len(ids)-n, d)
		}
	}
	var steps [][]int
	for _, id := range ids {
		steps = append(steps, []int{id})
	}
	if d := maxDiff(whole, forward(t, m, steps...)); d > 1e-4 {
		t.Errorf("token-by-token decode differs from one pass by %g", d)
	}
}

// A pass longer than maxChunk is processed in chunks; it must agree with
// one-token steps.
func TestLongPrefillChunks(t *testing.T) {
	o := checkpointtest.Tiny()
	o.Layers = []string{"full_attention", "linear_attention"}
	m := openTiny(t, o)
	ids := randomTokens(maxChunk+30, m.cfg.Vocab, 3)
	whole := forward(t, m, ids)
	if d := maxDiff(whole, forward(t, m, ids[:maxChunk-5], ids[maxChunk-5:])); d > 1e-4 {
		t.Errorf("chunked prefill differs by %g", d)
	}
}

func TestForwardRejectsBadInput(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	seq, _ := m.NewSequence()
	v := m.cfg.Vocab
	if err := seq.Forward([]int{1, v}, nil); err == nil {
		t.Error("accepted a token outside the vocabulary")
	}
	if err := seq.Forward([]int{-1}, nil); err == nil {
		t.Error("accepted a negative token")
	}
	if err := seq.Forward([]int{1, 2}, make([]float32, 3)); err == nil {
		t.Error("accepted a logits buffer of the wrong size")
	}
	if seq.Len() != 0 {
		t.Errorf("failed calls advanced the sequence to %d", seq.Len())
	}
	last := make([]float32, v)
	if err := seq.Forward([]int{1, 2, 3}, last); err != nil {
		t.Fatal(err)
	}
	whole := forward(t, m, []int{1, 2, 3})
	// One row takes the single-token product path; rounding may differ.
	if d := maxDiff(last, whole[2*v:]); d > 1e-5 {
		t.Errorf("last-position logits differ from the full pass by %g", d)
	}
	seq.Close()
	if err := seq.Forward([]int{1}, nil); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Forward on a closed sequence: %v, want engine.ErrClosed", err)
	}
	if _, err := seq.Fork(); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Fork of a closed sequence: %v, want engine.ErrClosed", err)
	}
}

// The quantized product must equal a product with the explicitly
// dequantized matrix (built here, in the test only).
func TestQuantizedProduct(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, bits := range []int{4, 8} {
		rows, cols, tok := 37, 192, 3
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		codes, sc, bi := checkpointtest.Quantize(w, cols, bits, 64)
		m := &matrix{rows: rows, cols: cols, bits: bits, group: 64, words: codes, scales: sc, biases: bi}
		x := make([]float32, tok*cols)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for _, n := range []int{1, tok} {
			got := make([]float32, n*rows)
			m.mul(newScratch(), 0, x[:n*cols], n, got)
			deq := make([]float32, cols)
			for row := 0; row < rows; row++ {
				m.row(row, deq)
				for c := range deq {
					// Half a step, plus what bf16 rounding of scale and
					// bias costs at the ends of the range (clamped codes).
					g := row*cols/64 + c/64
					if math.Abs(float64(deq[c]-w[row*cols+c])) > float64(bf16(sc[g]))*1.5+math.Abs(float64(bf16(bi[g])))/128 {
						t.Fatalf("bits %d: dequantized w[%d][%d] = %g, original %g", bits, row, c, deq[c], w[row*cols+c])
					}
				}
				for i := 0; i < n; i++ {
					var want float64
					for c := range deq {
						want += float64(deq[c]) * float64(x[i*cols+c])
					}
					if d := math.Abs(float64(got[i*rows+row]) - want); d > 1e-3*(1+math.Abs(want)) {
						t.Errorf("bits %d t %d: row %d = %g, want %g", bits, n, row, got[i*rows+row], want)
					}
				}
			}
		}
	}
}

func TestAttentionOnlyAndDeltaOnlyLayouts(t *testing.T) {
	for _, layers := range [][]string{{"full_attention"}, {"linear_attention", "linear_attention"}} {
		o := checkpointtest.Tiny()
		o.Layers = layers
		m := openTiny(t, o)
		ids := randomTokens(9, m.cfg.Vocab, 11)
		whole := forward(t, m, ids)
		if d := maxDiff(whole, forward(t, m, ids[:4], ids[4:])); d > 1e-4 {
			t.Errorf("%v: split differs by %g", layers, d)
		}
		for _, v := range whole {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%v: non-finite logit", layers)
			}
		}
	}
}

// A fork continues exactly as the original would, and leaves it untouched.
func TestFork(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	ids := randomTokens(20, m.cfg.Vocab, 9)
	whole := forward(t, m, ids)
	v := m.cfg.Vocab
	seq, _ := m.NewSequence()
	defer seq.Close()
	if err := seq.Forward(ids[:12], nil); err != nil {
		t.Fatal(err)
	}
	before := seq.Bytes()
	fork, err := seq.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Close()
	if fork.Len() != 12 || fork.Bytes() != before {
		t.Fatalf("fork len %d bytes %d, want 12 and %d", fork.Len(), fork.Bytes(), before)
	}
	// Advance the fork on other tokens first; the original must not see it.
	if err := fork.Forward([]int{1, 2, 3}, nil); err != nil {
		t.Fatal(err)
	}
	rest := make([]float32, (len(ids)-12)*v)
	if err := seq.Forward(ids[12:], rest); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(rest, whole[12*v:]); d > 1e-4 {
		t.Errorf("original after fork differs by %g", d)
	}
	fork2, _ := seq.Fork()
	defer fork2.Close()
	out := make([]float32, v)
	seq.Forward([]int{5}, out)
	out2 := make([]float32, v)
	fork2.Forward([]int{5}, out2)
	if d := maxDiff(out, out2); d != 0 {
		t.Errorf("fork and original diverge by %g on the same token", d)
	}
}

// roundHalf must agree with IEEE binary16 at the edges: exact halves stay,
// ties go to even, the subnormal range and overflow behave.
func TestRoundHalf(t *testing.T) {
	cases := []struct{ in, want float32 }{
		{1, 1},
		{1 + 1.0/2048, 1},                       // tie between 1 and 1+2^-10: even is 1
		{1 + 3.0/2048, 1 + 2.0/1024},            // tie: even is 1+2^-9
		{1 + 1.0/4096 + 1.0/2048, 1 + 1.0/1024}, // above the tie
		{65504, 65504},
		{65519, 65504},
		{65520, float32(math.Inf(1))},
		{-70000, float32(math.Inf(-1))},
		{float32(math.Ldexp(1, -24)), float32(math.Ldexp(1, -24))}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0},                           // tie with zero: even is 0
		{float32(math.Ldexp(3, -26)), float32(math.Ldexp(1, -24))},
		{-0.333333, -0.33325195},
	}
	for _, c := range cases {
		if got := roundHalf(c.in); got != c.want {
			t.Errorf("roundHalf(%g) = %g, want %g", c.in, got, c.want)
		}
	}
	if v := roundHalf(float32(math.NaN())); !math.IsNaN(float64(v)) {
		t.Errorf("NaN became %g", v)
	}
}
