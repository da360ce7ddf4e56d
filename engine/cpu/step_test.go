package cpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/reftest"
)

// stepModels are the models the batched step is checked on: the tiny
// checkpoint (also with its KV cache in half precision), every fixture,
// and the demo model.
func stepModels(t *testing.T) map[string]*Model {
	t.Helper()
	ms := map[string]*Model{"tiny": openTiny(t, checkpointtest.Tiny())}
	dir := t.TempDir()
	if err := checkpointtest.Write(dir, checkpointtest.Tiny()); err != nil {
		t.Fatal(err)
	}
	half, err := OpenWith(dir, Options{HalfKV: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { half.Close() })
	ms["tiny/halfkv"] = half
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		m, err := Open(ref.Dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		ms["fixture="+ref.Name()] = m
	}
	demo, err := Open(demoDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { demo.Close() })
	ms["demo"] = demo
	return ms
}

// prefilled is a new sequence of m after n random tokens.
func prefilled(t *testing.T, m *Model, n int, seed uint64) *Sequence {
	t.Helper()
	seq, _ := m.NewSequence()
	t.Cleanup(func() { seq.Close() })
	if err := seq.Forward(randomTokens(n, m.cfg.Vocab, seed), nil); err != nil {
		t.Fatal(err)
	}
	return seq.(*Sequence)
}

// fork is a copy of s, closed when the test ends.
func fork(t *testing.T, s *Sequence) *Sequence {
	t.Helper()
	f, err := s.Fork()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.(*Sequence)
}

// saved is s's state as SaveState writes it: every cache, bit for bit.
func saved(t *testing.T, s *Sequence) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.SaveState(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// stepRow is a row of a test step: tokens for one of the base sequences
// and which logits it asks for.
type stepRow struct {
	base   int
	tokens int
	out    string // "all", "last" or "none"
}

// TestStepMatchesForward: in a Step mixing decode rows, prompt pieces and
// draft rows of sequences at different positions (one with a cache past
// maxChunk, one fresh), every row's logits and its sequence's caches
// afterwards are bit for bit those of Forward of the same tokens alone.
func TestStepMatchesForward(t *testing.T) {
	for name, m := range stepModels(t) {
		t.Run(name, func(t *testing.T) {
			v := m.cfg.Vocab
			bases := []*Sequence{prefilled(t, m, maxChunk+44, 1), nil, prefilled(t, m, 20, 2), prefilled(t, m, 5, 3), prefilled(t, m, 41, 4)}
			fresh, _ := m.NewSequence()
			t.Cleanup(func() { fresh.Close() })
			bases[1] = fresh.(*Sequence)
			for i, rows := range [][]stepRow{
				{{0, 1, "last"}, {1, 7, "all"}, {2, 3, "last"}, {3, 5, "none"}, {4, 2, "all"}},
				{{2, 1, "last"}, {0, 1, "last"}, {3, 1, "last"}, {4, 1, "last"}},
				{{1, maxChunk + 30, "all"}, {0, 1, "last"}, {2, 4, "last"}},
				{{3, 9, "last"}, {1, 3, "all"}},
				{{4, 6, "all"}},
			} {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(i), 9))
					step := make([]engine.Row, len(rows))
					alone := make([]engine.Row, len(rows))
					for j, sr := range rows {
						tokens := randomTokens(sr.tokens, v, r.Uint64())
						var n int
						switch sr.out {
						case "all":
							n = sr.tokens * v
						case "last":
							n = v
						}
						step[j] = engine.Row{Seq: fork(t, bases[sr.base]), Tokens: tokens, Out: make([]float32, n)}
						alone[j] = engine.Row{Seq: fork(t, bases[sr.base]), Tokens: tokens, Out: make([]float32, n)}
					}
					if err := m.Step(step); err != nil {
						t.Fatal(err)
					}
					for j, a := range alone {
						if err := a.Seq.Forward(a.Tokens, a.Out); err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(step[j].Out, a.Out) {
							t.Errorf("row %d (%d tokens, %s): logits differ from Forward alone by up to %g", j, len(a.Tokens), rows[j].out, maxDiff(step[j].Out, a.Out))
						}
						if step[j].Seq.Len() != a.Seq.Len() {
							t.Errorf("row %d: length %d, alone %d", j, step[j].Seq.Len(), a.Seq.Len())
						}
						if !bytes.Equal(saved(t, step[j].Seq.(*Sequence)), saved(t, a.Seq.(*Sequence))) {
							t.Errorf("row %d: caches differ from Forward alone", j)
						}
					}
				})
			}
		})
	}
}

// TestStepGreedyMatchesAlone: four sequences prompted in one Step and
// then decoded greedily together, one Step a token, give each the tokens
// (and logits) it gives decoded alone.
func TestStepGreedyMatchesAlone(t *testing.T) {
	const steps = 12
	for name, m := range stepModels(t) {
		t.Run(name, func(t *testing.T) {
			v := m.cfg.Vocab
			prompts := [][]int{randomTokens(1, v, 5), randomTokens(9, v, 6), randomTokens(17, v, 7), randomTokens(3, v, 8)}
			alone := make([][]int, len(prompts))
			aloneLogits := make([][]float32, len(prompts))
			for i, p := range prompts {
				seq, _ := m.NewSequence()
				out := make([]float32, v)
				for tokens := p; len(alone[i]) < steps; tokens = alone[i][len(alone[i])-1:] {
					if err := seq.Forward(tokens, out); err != nil {
						t.Fatal(err)
					}
					alone[i] = append(alone[i], engine.Argmax(out))
					aloneLogits[i] = append(aloneLogits[i], out...)
				}
				seq.Close()
			}
			rows := make([]engine.Row, len(prompts))
			for i, p := range prompts {
				seq, _ := m.NewSequence()
				defer seq.Close()
				rows[i] = engine.Row{Seq: seq, Tokens: p, Out: make([]float32, v)}
			}
			together := make([][]int, len(prompts))
			for s := range steps {
				if err := m.Step(rows); err != nil {
					t.Fatal(err)
				}
				for i := range rows {
					next := engine.Argmax(rows[i].Out)
					if want := aloneLogits[i][s*v : (s+1)*v]; !slices.Equal(rows[i].Out, want) {
						t.Errorf("sequence %d, token %d: logits differ from alone by up to %g", i, s, maxDiff(rows[i].Out, want))
					}
					together[i] = append(together[i], next)
					rows[i].Tokens = []int{next}
				}
			}
			for i := range prompts {
				if !slices.Equal(together[i], alone[i]) {
					t.Errorf("sequence %d decoded together %v, alone %v", i, together[i], alone[i])
				}
			}
		})
	}
}

// otherSeq is an engine.Sequence of another backend.
type otherSeq struct{ engine.Sequence }

// TestStepRefusesBadRows: every row is checked before any runs, and a bad
// one is an error naming it, never a panic; no sequence moves.
func TestStepRefusesBadRows(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	other := openTiny(t, checkpointtest.Tiny())
	v := m.cfg.Vocab
	good := prefilled(t, m, 3, 1)
	closed, _ := m.NewSequence()
	closed.Close()
	foreign, _ := other.NewSequence()
	defer foreign.Close()
	near := prefilled(t, m, 10, 2)
	m.cfg.MaxPositions = 12
	defer func() { m.cfg.MaxPositions = 0 }()
	row := engine.Row{Seq: good, Tokens: []int{1}, Out: make([]float32, v)}
	for name, c := range map[string]struct {
		rows []engine.Row
		is   error
	}{
		"none":               {nil, engine.ErrStepRows},
		"no tokens":          {[]engine.Row{row, {Seq: near}}, engine.ErrStepRows},
		"repeated sequence":  {[]engine.Row{row, row}, engine.ErrStepRows},
		"token out of vocab": {[]engine.Row{row, {Seq: near, Tokens: []int{v}}}, engine.ErrBadToken},
		"negative token":     {[]engine.Row{row, {Seq: near, Tokens: []int{-1}}}, engine.ErrBadToken},
		"bad logits buffer":  {[]engine.Row{row, {Seq: near, Tokens: []int{1, 2}, Out: make([]float32, v+1)}}, nil},
		"closed sequence":    {[]engine.Row{row, {Seq: closed, Tokens: []int{1}}}, engine.ErrClosed},
		"another model's":    {[]engine.Row{row, {Seq: foreign, Tokens: []int{1}}}, engine.ErrStepRows},
		"another backend's":  {[]engine.Row{row, {Seq: otherSeq{}, Tokens: []int{1}}}, engine.ErrStepRows},
		"nil cpu sequence":   {[]engine.Row{row, {Seq: (*Sequence)(nil), Tokens: []int{1}}}, engine.ErrStepRows},
		"past the positions": {[]engine.Row{row, {Seq: near, Tokens: []int{1, 2, 3}}}, nil},
	} {
		err := m.Step(c.rows)
		switch {
		case err == nil:
			t.Errorf("%s: no error", name)
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%s: %v, want %v", name, err, c.is)
		}
	}
	if good.Len() != 3 || near.Len() != 10 || foreign.Len() != 0 {
		t.Errorf("refused steps moved sequences to %d, %d and %d tokens", good.Len(), near.Len(), foreign.Len())
	}
	// At the limit exactly, the step runs.
	if err := m.Step([]engine.Row{row, {Seq: near, Tokens: []int{1, 2}}}); err != nil {
		t.Errorf("a step to the position limit: %v", err)
	}
}

// TestMulRowsIndependentOfBatch: a product gives each input row the bits
// it gets alone, by the tiles or the row kernels as its flag says,
// whatever rows run beside it, on the shapes of every path (4- and 8-bit
// kernels, a group the kernels do not take, row counts that leave a
// block of the tiles short, dense weights).
func TestMulRowsIndependentOfBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	sc := newScratch()
	for _, c := range []struct{ rows, cols, bits, group int }{
		{70, 256, 4, 64}, {33, 128, 8, 64}, {9, 128, 4, 32}, {130, 384, 4, 128}, {6, 64, 8, 32}, {21, 96, 0, 0},
	} {
		t.Run(fmt.Sprintf("%dx%d/%dbit/g%d", c.rows, c.cols, c.bits, c.group), func(t *testing.T) {
			var m *matrix
			if c.bits == 0 {
				m = &matrix{rows: c.rows, cols: c.cols, denseF32: randomFloats(r, c.rows*c.cols)}
			} else {
				m = randomQuant(r, c.rows, c.cols, c.bits, c.group)
			}
			const t0 = 11
			x := randomFloats(r, t0*c.cols)
			alone := func(i int, tiled bool) []float32 {
				out := make([]float32, c.rows)
				nt := 0
				if tiled {
					nt = 1
				}
				m.mulRows(sc, 0, x[i*c.cols:(i+1)*c.cols], 1, nt, [][]float32{out})
				return out
			}
			for _, nt := range []int{0, 1, 2, 4, 7, t0} {
				for _, tn := range []int{nt, nt + 1, t0} {
					if tn == 0 || tn > t0 {
						continue
					}
					outs := make([][]float32, tn)
					for i := range outs {
						outs[i] = make([]float32, c.rows)
					}
					m.mulRows(sc, 0, x[:tn*c.cols], tn, nt, outs)
					for i := range tn {
						if want := alone(i, i < nt); !slices.Equal(outs[i], want) {
							t.Errorf("%d rows, %d tiled: row %d differs from alone by up to %g", tn, nt, i, maxDiff(outs[i], want))
						}
					}
				}
			}
		})
	}
}

// TestStepAllocs: a batched decode step of four sequences works in the
// kept scratch, as a Forward does.
func TestStepAllocs(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	v := m.cfg.Vocab
	rows := make([]engine.Row, 4)
	for i := range rows {
		rows[i] = engine.Row{Seq: prefilled(t, m, 10+i, uint64(i)), Tokens: []int{i + 1}, Out: make([]float32, v)}
	}
	allocs := testing.AllocsPerRun(50, func() {
		if err := m.Step(rows); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a batched decode step allocates %v times", allocs)
	}
}

// TestProductsPastTheBound: a group whose prepared inputs pass
// maxGroupFloats runs what it holds and goes on, never holding much more;
// every product still gives the sums it gives alone.
func TestProductsPastTheBound(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const rows, cols, tokens = 12, 4096, 100
	sc := newScratch()
	var ms []*matrix
	var xs, alone, got [][]float32
	floats := 0
	for i := 0; floats <= 2*maxGroupFloats; i++ {
		m := randomQuant(r, rows, cols, 4, 64)
		x := randomFloats(r, tokens*cols)
		want := make([]float32, tokens*rows)
		m.mulTiled(sc, 0, x, tokens, tokens-i%3, want)
		ms, xs, alone = append(ms, m), append(xs, x), append(alone, want)
		got = append(got, make([]float32, tokens*rows))
		floats += tokens * tileStride(cols, cols/64)
	}
	g := sc.products()
	for i, m := range ms {
		g.add(m, 0, xs[i], tokens, tokens-i%3, g.rows(got[i], tokens, rows))
	}
	g.compute()
	if c := cap(g.arena); c > 2*maxGroupFloats {
		t.Errorf("the group held %d floats of inputs at once for %d in all", c, floats)
	}
	for i := range ms {
		if !slices.Equal(got[i], alone[i]) {
			t.Errorf("product %d of %d differs from alone by up to %g", i, len(ms), maxDiff(got[i], alone[i]))
		}
	}
}

// TestProductsShareInputs: products of one group on the same inputs share
// their prepared inputs, and only those: each equals its product alone,
// whether beside it runs a product on the same inputs, on other inputs of
// the same shape, on part of them or with other tiled rows.
func TestProductsShareInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const rows, cols, tokens = 20, 384, 5
	sc := newScratch()
	x, y := randomFloats(r, tokens*cols), randomFloats(r, tokens*cols)
	type op struct {
		x     []float32
		t, nt int
		bits  int
	}
	ops := []op{{x, tokens, 0, 4}, {x, tokens, 0, 4}, {y, tokens, 0, 4}, {y, tokens, 0, 4}, {y, 3, 0, 4}, {y, 3, 3, 4}, {y, 3, 3, 8}, {x, tokens, 0, 8}}
	ms := make([]*matrix, len(ops))
	got := make([][]float32, len(ops))
	g := sc.products()
	for i, o := range ops {
		ms[i] = randomQuant(r, rows, cols, o.bits, 64)
		got[i] = make([]float32, o.t*rows)
		g.add(ms[i], 0, o.x[:o.t*cols], o.t, o.nt, g.rows(got[i], o.t, rows))
	}
	g.compute()
	for i, o := range ops {
		want := make([]float32, o.t*rows)
		ms[i].mulTiled(sc, 0, o.x[:o.t*cols], o.t, o.nt, want)
		if !slices.Equal(got[i], want) {
			t.Errorf("product %d (%+v) differs from alone by up to %g", i, o, maxDiff(got[i], want))
		}
	}
}
