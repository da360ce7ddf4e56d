package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"petal/engine/sample/chisq"
)

func seed(x uint64) *uint64 { return &x }

// reference computes the sampling distribution the slow, obvious way,
// following Hugging Face's warpers step by step on the whole row: scale,
// top-k (mask all but the k best), top-p (sort, keep tokens whose mass
// above is below p), min-p, softmax. Ties break towards the lower id.
func reference(logits []float32, p Params, n int) []float64 {
	type tok struct {
		id int
		s  float64
	}
	toks := make([]tok, n)
	for i := range n {
		toks[i] = tok{i, float64(logits[i]) / p.Temperature}
	}
	slices.SortStableFunc(toks, func(a, b tok) int {
		switch {
		case a.s > b.s:
			return -1
		case a.s < b.s:
			return 1
		}
		return 0
	})
	if p.TopK > 0 && p.TopK < n {
		toks = toks[:p.TopK]
	}
	softmax := func(ts []tok) []float64 {
		out := make([]float64, len(ts))
		var z float64
		for i, t := range ts {
			out[i] = math.Exp(t.s - ts[0].s)
			z += out[i]
		}
		for i := range out {
			out[i] /= z
		}
		return out
	}
	if p.TopP < 1 {
		probs := softmax(toks)
		keep, above := 0, 0.0
		for keep < len(toks) && (keep == 0 || above < p.TopP) {
			above += probs[keep]
			keep++
		}
		toks = toks[:keep]
	}
	if p.MinP > 0 {
		probs := softmax(toks)
		keep := 0
		for keep < len(toks) && probs[keep] >= p.MinP*probs[0] {
			keep++
		}
		toks = toks[:keep]
	}
	out := make([]float64, n)
	for i, pr := range softmax(toks) {
		out[toks[i].id] = pr
	}
	return out
}

// TestDistributions draws many tokens with a fixed seed and checks the
// counts against the reference distribution with a chi-square test at
// significance 0.001, and that no token outside its support ever appears.
func TestDistributions(t *testing.T) {
	// Ids 10 and 11 lie beyond the tokenizer and carry the largest logits:
	// masking must keep them out.
	logits := []float32{2.0, 1.5, 1.2, 1.0, 0.7, 0.5, 0.1, -0.3, -1, -2, 9, 9}
	const tokenizerSize = 10
	cases := []struct {
		name string
		p    Params
	}{
		{"temperature=1", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
		{"temperature=0.5", Params{Temperature: 0.5, TopP: 1, RepetitionPenalty: 1}},
		{"temperature=2", Params{Temperature: 2, TopP: 1, RepetitionPenalty: 1}},
		{"top_k=4", Params{Temperature: 1, TopK: 4, TopP: 1, RepetitionPenalty: 1}},
		{"top_p=0.8", Params{Temperature: 1, TopP: 0.8, RepetitionPenalty: 1}},
		{"min_p=0.2", Params{Temperature: 1, TopP: 1, MinP: 0.2, RepetitionPenalty: 1}},
		{"top_k=6/top_p=0.9/min_p=0.1/T=0.7", Params{Temperature: 0.7, TopK: 6, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1}},
		{"card_thinking", Params{Temperature: 1, TopK: 20, TopP: 0.95, RepetitionPenalty: 1}},
	}
	const draws = 40000
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.p.Seed = seed(uint64(100 + ci))
			s, err := New(c.p, Vocab{Size: len(logits), TokenizerSize: tokenizerSize}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := reference(logits, c.p, tokenizerSize)
			probs, err := s.Probabilities(slices.Clone(logits))
			if err != nil {
				t.Fatal(err)
			}
			for id, pr := range probs {
				if id < len(want) && math.Abs(pr-want[id]) > 1e-12 || id >= len(want) && pr != 0 {
					t.Fatalf("Probabilities %v, want %v", probs, want)
				}
			}
			counts := make([]int, len(logits))
			row := make([]float32, len(logits))
			for range draws {
				copy(row, logits)
				id, err := s.Next(row)
				if err != nil {
					t.Fatal(err)
				}
				counts[id]++
			}
			for id, n := range counts {
				if n > 0 && (id >= tokenizerSize || want[id] == 0) {
					t.Fatalf("id %d drawn %d times, outside the support %v", id, n, want)
				}
			}
			chi, df := chisq.Test(counts, want, draws)
			if limit := chisq.Limit(df); chi > limit {
				t.Fatalf("chi-square %.2f > %.2f (df %d): counts %v, want %v", chi, limit, df, counts, want)
			}
			// The test has power: the same counts fail against the
			// distribution of a temperature 20% off.
			off := c.p
			off.Temperature *= 1.2
			if chiOff, dfOff := chisq.Test(counts, reference(logits, off, tokenizerSize), draws); chiOff <= chisq.Limit(dfOff) {
				t.Fatalf("counts also pass for temperature %v (chi-square %.2f): the test cannot tell", off.Temperature, chiOff)
			}
			t.Logf("chi-square %.2f (df %d, limit %.2f)", chi, df, chisq.Limit(df))
		})
	}
}

// TestLargeVocabMatchesReference compares the fast selection (heap, growing
// nucleus) with the reference on full-width random rows, exactly: same
// support, same probabilities.
func TestLargeVocabMatchesReference(t *testing.T) {
	const size, tokenizerSize = 248320, 248077
	r := rand.New(rand.NewPCG(7, 7))
	row := make([]float32, size)
	cases := []Params{
		{Temperature: 1, TopK: 20, TopP: 0.95},
		{Temperature: 0.6, TopK: 20, TopP: 0.95, MinP: 0.05},
		{Temperature: 1, TopP: 0.9},           // nucleus without top-k
		{Temperature: 3, TopP: 0.5},           // flat: the nucleus needs many rounds
		{Temperature: 1, TopP: 1, MinP: 0.01}, // min-p alone
		{Temperature: 0.8, TopK: 1000, MinP: 0.001, TopP: 1},
	}
	for i, p := range cases {
		p.RepetitionPenalty = 1
		for j := range row {
			row[j] = float32(r.NormFloat64() * 2)
		}
		row[r.IntN(tokenizerSize)] += 6 // a peak, as real logits have
		s, err := New(p, Vocab{Size: size, TokenizerSize: tokenizerSize}, nil)
		if err != nil {
			t.Fatal(err)
		}
		best, err := argmax(row[:tokenizerSize])
		if err != nil {
			t.Fatal(err)
		}
		cs, w := s.distribution(row[:tokenizerSize], best)
		got := make([]float64, tokenizerSize)
		var z float64
		for _, x := range w {
			z += x
		}
		for k, x := range w {
			id := k
			if cs != nil {
				id = int(cs[k].id)
			}
			got[id] = x / z
		}
		want := reference(row, p, tokenizerSize)
		support := 0
		for id := range want {
			if (want[id] == 0) != (got[id] == 0) || math.Abs(want[id]-got[id]) > 1e-12 {
				t.Fatalf("case %d %+v: id %d has probability %g, want %g", i, p, id, got[id], want[id])
			}
			if want[id] > 0 {
				support++
			}
		}
		t.Logf("case %d: support %d", i, support)
	}
}

func TestGreedyAndEdgeValues(t *testing.T) {
	logits := []float32{0.5, 3, -1, 3, 2.9, 100}
	v := Vocab{Size: 6, TokenizerSize: 5}
	greedy := []Params{
		{Temperature: 0, TopP: 1, RepetitionPenalty: 1},
		{Temperature: 1.5, TopK: 1, TopP: 1, RepetitionPenalty: 1},
		{Temperature: 1, TopP: 1e-6, RepetitionPenalty: 1},
		{Temperature: 5e-324, TopP: 0.9, RepetitionPenalty: 1}, // 1/T overflows
	}
	for _, p := range greedy {
		p.Seed = seed(1)
		s, err := New(p, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			// Ids 1 and 3 tie: the lower wins; id 5 is masked.
			if id, err := s.Next(slices.Clone(logits)); err != nil || id != 1 {
				t.Fatalf("%+v: got %d (%v), want 1", p, id, err)
			}
		}
	}
	// top_p 1 and top_k larger than the vocabulary filter nothing.
	p := Params{Temperature: 1, TopK: 1000, TopP: 1, RepetitionPenalty: 1, Seed: seed(3)}
	s, err := New(p, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 2000 {
		id, err := s.Next(slices.Clone(logits))
		if err != nil {
			t.Fatal(err)
		}
		seen[id] = true
	}
	if len(seen) != 5 || seen[5] {
		t.Fatalf("drew %v, want exactly ids 0..4", seen)
	}
}

func TestPenalties(t *testing.T) {
	base := []float32{2, -2, 1, 4, -1, 0.5}
	prompt := []int{0, 1, 1}
	generated := []int{2, 2, 2, 3}
	cases := []struct {
		name string
		p    Params
		want []float32
	}{
		// presence: -p once for each generated id; prompt ids untouched.
		{"presence", Params{PresencePenalty: 1.5}, []float32{2, -2, 1 - 1.5, 4 - 1.5, -1, 0.5}},
		// frequency: -f per occurrence.
		{"frequency", Params{FrequencyPenalty: 0.5}, []float32{2, -2, 1 - 1.5, 4 - 0.5, -1, 0.5}},
		// repetition over prompt and generated: positive / r, negative * r.
		{"repetition", Params{RepetitionPenalty: 2}, []float32{1, -4, 0.5, 2, -1, 0.5}},
		// all three: repetition first, then presence and frequency.
		{"all", Params{RepetitionPenalty: 2, PresencePenalty: 1, FrequencyPenalty: 0.25}, []float32{1, -4, 0.5 - 1 - 0.75, 2 - 1 - 0.25, -1, 0.5}},
		// negative presence encourages repeats.
		{"negative", Params{PresencePenalty: -1}, []float32{2, -2, 2, 5, -1, 0.5}},
	}
	for _, c := range cases {
		c.p.Temperature, c.p.TopP = 0, 1
		if c.p.RepetitionPenalty == 0 {
			c.p.RepetitionPenalty = 1
		}
		s, err := New(c.p, Vocab{Size: len(base)}, prompt)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range generated {
			s.Accept(id)
		}
		row := slices.Clone(base)
		s.penalize(row)
		for i := range row {
			if math.Abs(float64(row[i]-c.want[i])) > 1e-6 {
				t.Fatalf("%s: logits %v, want %v", c.name, row, c.want)
			}
		}
	}
	// Behaviour: greedy decoding over a row that always favours id 0
	// repeats it, unless a presence penalty larger than the margin is on.
	row := []float32{1, 0.5, 0}
	for _, pres := range []float64{0, 0.8} {
		s, err := New(Params{TopP: 1, RepetitionPenalty: 1, PresencePenalty: pres}, Vocab{Size: 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := s.Next(slices.Clone(row))
		b, _ := s.Next(slices.Clone(row))
		if repeated := a == b; repeated != (pres == 0) {
			t.Fatalf("presence %v: drew %d then %d", pres, a, b)
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	rows := make([][]float32, 50)
	for i := range rows {
		rows[i] = make([]float32, 1000)
		for j := range rows[i] {
			rows[i][j] = float32(r.NormFloat64())
		}
	}
	run := func(p Params) ([]int, uint64) {
		s, err := New(p, Vocab{Size: 1000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, row := range rows {
			id, err := s.Next(slices.Clone(row))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out, s.Seed()
	}
	p := Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1, PresencePenalty: 0.5, Seed: seed(42)}
	a, _ := run(p)
	b, _ := run(p)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens:\n%v\n%v", a, b)
	}
	p.Seed = seed(43)
	if c, _ := run(p); slices.Equal(a, c) {
		t.Fatal("different seeds gave the same 50 tokens")
	}
	p.Seed = nil
	d, used := run(p)
	p.Seed = &used
	if e, _ := run(p); !slices.Equal(d, e) {
		t.Fatal("replaying the reported random seed gave other tokens")
	}
}

// TestDocumentedDraw replays the documented procedure by hand: the word
// Draw(seed, n) for the token recorded n-th (greedy steps and accepted
// tokens count too), its top 53 bits as u in [0, 1), the token where u falls
// in the cumulative distribution over the kept ids in id order.
func TestDocumentedDraw(t *testing.T) {
	wide := make([]float32, 64) // top-k 3 of 64: the kept tokens are sorted by id
	r := rand.New(rand.NewPCG(1, 1))
	for i := range wide {
		wide[i] = float32(r.NormFloat64())
	}
	for _, c := range []struct {
		logits []float32
		p      Params
	}{
		{[]float32{0.3, 1.2, -0.5, 2.0, 0.9, 1.1}, Params{Temperature: 0.9, TopP: 1, RepetitionPenalty: 1}},
		{[]float32{0.3, 1.2, -0.5, 2.0, 0.9, 1.1}, Params{Temperature: 0.9, TopK: 4, TopP: 0.9, RepetitionPenalty: 1}},
		{wide, Params{Temperature: 0.9, TopK: 3, TopP: 1, RepetitionPenalty: 1}},
	} {
		logits, p := c.logits, c.p
		p.Seed = seed(77)
		s, err := New(p, Vocab{Size: len(logits)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		probs := reference(logits, p, len(logits))
		for i := range 500 {
			if i%7 == 3 {
				s.Accept(1) // a forced token takes draw i
				continue
			}
			u := float64(Draw(77, uint32(i))>>11) * 0x1p-53
			want := -1
			for id, pr := range probs {
				if pr == 0 {
					continue
				}
				want = id
				if u < pr {
					break
				}
				u -= pr
			}
			got, err := s.Next(slices.Clone(logits))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%+v draw %d: got %d, want %d", p, i, got, want)
			}
		}
	}
}

// TestPhiloxKnownAnswers checks Philox4x32 against the Random123
// distribution's known-answer vectors (kat_vectors, "philox4x32 10" lines:
// counter, key, output).
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{}, [2]uint32{}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, [2]uint32{^uint32(0), ^uint32(0)}, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0}, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := Philox4x32(c.ctr, c.key); got != c.want {
			t.Errorf("Philox4x32(%08x, %08x) = %08x, want %08x", c.ctr, c.key, got, c.want)
		}
	}
	// Draw's layout: counter word 0, seed low word first, output words 0 and 1.
	out := Philox4x32([4]uint32{5, 0, 0, 0}, [2]uint32{0x299f31d0, 0xa4093822})
	if got := Draw(0xa4093822_299f31d0, 5); got != uint64(out[0])<<32|uint64(out[1]) {
		t.Fatalf("Draw = %016x, want %08x%08x", got, out[0], out[1])
	}
}

func TestErrors(t *testing.T) {
	p := Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	if _, err := New(p, Vocab{Size: 0}, nil); err == nil {
		t.Error("vocab size 0 accepted")
	}
	if _, err := New(p, Vocab{Size: 4, TokenizerSize: 5}, nil); err == nil {
		t.Error("tokenizer larger than the vocabulary accepted")
	}
	if _, err := New(p, Vocab{Size: 4, EOS: []int{4}}, nil); err == nil {
		t.Error("eos outside the vocabulary accepted")
	}
	rp := p
	rp.RepetitionPenalty = 1.1
	if _, err := New(rp, Vocab{Size: 4}, []int{1, 9}); err == nil {
		t.Error("prompt id outside the vocabulary accepted")
	}
	s, err := New(p, Vocab{Size: 4, TokenizerSize: 3, EOS: []int{2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.IsEOS(2) || s.IsEOS(1) {
		t.Error("IsEOS wrong")
	}
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		row  []float32
		want string
	}{
		{[]float32{1, 2, 3}, "3 logits"},
		{[]float32{1, float32(math.NaN()), 3, 4}, "NaN"},
		{[]float32{1, inf, 3, 4}, "+Inf"},
		{[]float32{-inf, -inf, -inf, 5}, "-Inf"}, // id 3 is masked
	} {
		if _, err := s.Next(c.row); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error about %s", c.row, err, c.want)
		}
	}
}

// TestLogprobs checks NextLogprobs against the log-softmax computed here
// over the producible ids of the penalised row: the picked id's, and the
// top ones best first with ties to the lower id.
func TestLogprobs(t *testing.T) {
	logits := []float32{1, 3, -2, 3, 0.5, 2.5, 9}
	const tokenizerSize = 6 // id 6 is masked: it takes no probability
	p := Params{Temperature: 0.8, TopP: 1, PresencePenalty: 1, RepetitionPenalty: 1, Seed: seed(5)}
	s, err := New(p, Vocab{Size: len(logits), TokenizerSize: tokenizerSize}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Accept(5) // id 5 is penalised: 2.5 - 1
	row := slices.Clone(logits)
	row[5] -= 1
	var z float64
	for _, l := range row[:tokenizerSize] {
		z += math.Exp(float64(l))
	}
	lp := func(id int) float64 { return float64(row[id]) - math.Log(z) }
	id, got, err := s.NextLogprobs(slices.Clone(logits), 4)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Logprob-lp(id)) > 1e-12 {
		t.Fatalf("id %d logprob %v, want %v", id, got.Logprob, lp(id))
	}
	wantTop := []int{1, 3, 5, 0} // 3, 3 (tie: lower id first), 1.5, 1
	if len(got.Top) != len(wantTop) {
		t.Fatalf("top %v, want ids %v", got.Top, wantTop)
	}
	for i, e := range got.Top {
		if e.ID != wantTop[i] || math.Abs(e.Logprob-lp(e.ID)) > 1e-12 {
			t.Fatalf("top %v, want ids %v with logprobs %v...", got.Top, wantTop, lp(wantTop[0]))
		}
	}
	// Masked ids (a grammar's -Inf) are no alternatives: fewer come, and
	// none of them -Inf, which JSON cannot even say.
	masked := slices.Clone(logits)
	for _, id := range []int{0, 1, 2, 3} {
		masked[id] = float32(math.Inf(-1))
	}
	if _, got, err = s.NextLogprobs(masked, 4); err != nil || len(got.Top) != 2 || got.Top[0].ID != 5 || got.Top[1].ID != 4 {
		t.Fatalf("top of a masked row: %+v, %v; want ids 5 and 4", got.Top, err)
	}
	if _, _, err := s.NextLogprobs(slices.Clone(logits), MaxTopLogprobs+1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("top_logprobs %d: %v", MaxTopLogprobs+1, err)
	}
}
