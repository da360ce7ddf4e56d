package gpumodel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/gpu/gputest"
)

// stepRow is one row of a scripted step: sequence seq takes tokens
// ref.Tokens[from:to], with logits of every position (all), the last, or
// none.
type stepRow struct {
	seq, from, to int
	out           logitsMode
}

// stepScript is a run of batched steps over four sequences that first
// hold prefills of 0, 30, 61 and 100 of the fixture's tokens: decode rows,
// prompt pieces and draft-like runs of 2 tokens side by side, listed out
// of the order Step lays them out in, every sequence at its own position.
var stepScript = struct {
	prefill []int
	steps   [][]stepRow
}{
	prefill: []int{0, 30, 61, 100},
	steps: [][]stepRow{
		{{2, 61, 63, allLogits}, {1, 30, 31, lastLogits}, {0, 0, 9, allLogits}, {3, 100, 101, lastLogits}},
		{{0, 9, 10, lastLogits}, {1, 31, 52, lastLogits}, {2, 63, 64, noLogits}, {3, 101, 106, allLogits}},
		{{3, 106, 107, allLogits}, {2, 64, 65, lastLogits}, {1, 52, 53, lastLogits}, {0, 10, 11, lastLogits}},
		{{1, 53, 56, noLogits}, {0, 11, 12, allLogits}},
	},
}

// twinSequences is two sequences of m for each prefill length n, both
// holding tokens[:n]: batched for the steps under test, solo for the
// Forward calls they are checked against. They close when t ends.
func twinSequences(t *testing.T, m *Model, tokens, prefill []int) (batched, solo []engine.Sequence) {
	t.Helper()
	for _, n := range prefill {
		for _, list := range []*[]engine.Sequence{&batched, &solo} {
			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if n > 0 {
				if err := s.Forward(tokens[:n], nil); err != nil {
					t.Fatal(err)
				}
			}
			*list = append(*list, s)
		}
	}
	return batched, solo
}

// TestStepMatchesForward runs stepScript on every fixture through Step
// and, row by row, through Forward of solo sequences that hold the same
// tokens: each row's logits against transformers as TestFixtures holds
// Forward's (top-1 where decisive, maxRefDiff), and against the solo
// Forward within maxLogitDiff (the GEMMs and the decode kernels reduce in
// other orders, as TestPrefillMatchesDecode allows). Again with passes of
// 16 tokens and a command-buffer bound that takes every piece alone, so
// rows are carried over passes and the attention blocks of runs fall into
// command buffers of their own.
func TestStepMatchesForward(t *testing.T) {
	dev := openDevice(t)
	for _, dir := range fixtureDirs(t) {
		for _, cut := range []bool{false, true} {
			name := filepath.Base(dir)
			if cut {
				name += "/cut"
			}
			t.Run(name, func(t *testing.T) {
				ref, want := loadReference(t, dir)
				m := openFixture(t, dev, filepath.Base(dir))
				if cut {
					m.prefillChunk, m.maxMillis = 16, 0
				}
				v := m.cfg.Vocab
				batched, solo := twinSequences(t, m, ref.Tokens, stepScript.prefill)
				worstRef, worstSolo := 0.0, 0.0
				for k, st := range stepScript.steps {
					rows := make([]engine.Row, len(st))
					for i, r := range st {
						rows[i] = engine.Row{Seq: batched[r.seq], Tokens: ref.Tokens[r.from:r.to]}
						switch r.out {
						case allLogits:
							rows[i].Out = make([]float32, (r.to-r.from)*v)
						case lastLogits:
							rows[i].Out = make([]float32, v)
						}
					}
					if err := m.Step(rows); err != nil {
						t.Fatalf("step %d: %v", k, err)
					}
					for i, r := range st {
						s := solo[r.seq]
						out := make([]float32, len(rows[i].Out))
						if err := s.Forward(rows[i].Tokens, out); err != nil {
							t.Fatal(err)
						}
						if got := batched[r.seq].Len(); got != r.to || s.Len() != r.to {
							t.Fatalf("step %d row %d: the sequence holds %d tokens, want %d", k, i, got, r.to)
						}
						if len(out) == 0 {
							continue
						}
						from := r.from
						if r.out == lastLogits {
							from = r.to - 1
						}
						worstRef = max(worstRef, checkLogits(t, rows[i].Out, want[from*v:r.to*v], v))
						for j := range out {
							worstSolo = max(worstSolo, math.Abs(float64(out[j]-rows[i].Out[j])))
						}
					}
				}
				t.Logf("max |step - reference| = %.3g, max |step - solo Forward| = %.3g", worstRef, worstSolo)
				if worstSolo > maxLogitDiff {
					t.Errorf("max |step - solo Forward| = %g, tolerance %g", worstSolo, maxLogitDiff)
				}
			})
		}
	}
}

// TestStepOneRowIsForward: a step of one row is that sequence's Forward,
// bit for bit.
func TestStepOneRowIsForward(t *testing.T) {
	dev := openDevice(t)
	ref, _ := loadReference(t, filepath.Join(fixturesDir, "tiny-a"))
	m := openFixture(t, dev, "tiny-a")
	v := m.cfg.Vocab
	for _, n := range []int{1, 7} {
		a, _ := m.NewSequence()
		b, _ := m.NewSequence()
		ga, gb := make([]float32, n*v), make([]float32, n*v)
		if err := m.Step([]engine.Row{{Seq: a, Tokens: ref.Tokens[:n], Out: ga}}); err != nil {
			t.Fatal(err)
		}
		if err := b.Forward(ref.Tokens[:n], gb); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ga, gb) || a.Len() != b.Len() {
			t.Errorf("%d tokens: a step of one row differs from Forward", n)
		}
		a.Close()
		b.Close()
	}
}

// TestStepGreedy decodes tiny-a's three greedy prompts together, the
// argmax of each row's logits fed back as its next row, and a fourth
// sequence with the first prompt joins three steps in, its prompt a row
// beside the others' decode steps: each sequence's tokens equal the
// reference's greedy continuation of its prompt, which TestFixtures holds
// each sequence alone to (tiny-a's greedy runs are decisive: top-2
// margins above 0.039, router gaps above 0.0008).
func TestStepGreedy(t *testing.T) {
	dev := openDevice(t)
	ref, _ := loadReference(t, filepath.Join(fixturesDir, "tiny-a"))
	m := openFixture(t, dev, "tiny-a")
	v := m.cfg.Vocab
	const joinAt = 3
	type run struct {
		seq    engine.Sequence
		prompt []int
		want   []int
		got    []int
		start  int // the step it joins at
	}
	var runs []*run
	for i, g := range append(ref.Greedy, ref.Greedy[0]) {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		r := &run{seq: s, prompt: g.Prompt, want: g.Tokens}
		if i == len(ref.Greedy) {
			r.start = joinAt
		}
		runs = append(runs, r)
	}
	for k := 0; ; k++ {
		var rows []engine.Row
		var in []*run
		for _, r := range runs {
			switch {
			case k < r.start || len(r.got) == len(r.want):
				continue
			case len(r.got) == 0:
				rows = append(rows, engine.Row{Seq: r.seq, Tokens: r.prompt})
			default:
				rows = append(rows, engine.Row{Seq: r.seq, Tokens: r.got[len(r.got)-1:]})
			}
			rows[len(rows)-1].Out = make([]float32, v)
			in = append(in, r)
		}
		if len(rows) == 0 {
			break
		}
		if err := m.Step(rows); err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		for i, r := range in {
			r.got = append(r.got, engine.Argmax(rows[i].Out))
		}
	}
	for i, r := range runs {
		if !slices.Equal(r.got, r.want) {
			t.Errorf("sequence %d, prompt of %d tokens:\n got %v\nwant %v", i, len(r.prompt), r.got, r.want)
		}
	}
}

// TestStepDecodeRowsAreForward: decode rows alone (one token each,
// sequences at 0, 5, 30 and 61 tokens, some rows without logits) run as
// Step runs them, one pass of the multi-row matrix-vector products, stay
// within maxLogitDiff of each sequence's own Forward for three steps,
// again with a command-buffer bound that takes every piece alone; as one
// GEMM pass (the small-tile products) too. Run as side-by-side decode
// steps their logits equal Forward's bit for bit, again with every row's
// step in a command buffer of its own.
func TestStepDecodeRowsAreForward(t *testing.T) {
	dev := openDevice(t)
	ref, _ := loadReference(t, filepath.Join(fixturesDir, "tiny-a"))
	for _, c := range []struct {
		name string
		cut  bool
		via  stepVia
	}{
		{"rows", false, viaAuto}, {"rows/cut", true, viaAuto}, {"gemm", false, viaGEMM},
		{"side-by-side", false, viaSideBySide}, {"side-by-side/cut", true, viaSideBySide},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := openFixture(t, dev, "tiny-a")
			if c.cut {
				m.maxMillis = 0
			}
			v := m.cfg.Vocab
			prefill := []int{0, 5, 30, 61}
			batched, solo := twinSequences(t, m, ref.Tokens, prefill)
			worst := 0.0
			for k := range 3 {
				rows := make([]engine.Row, len(prefill))
				for i, n := range prefill {
					rows[i] = engine.Row{Seq: batched[i], Tokens: ref.Tokens[n+k : n+k+1]}
					if (i+k)%3 != 0 {
						rows[i].Out = make([]float32, v)
					}
				}
				if err := m.step(rows, c.via); err != nil {
					t.Fatalf("step %d: %v", k, err)
				}
				for i, n := range prefill {
					out := make([]float32, len(rows[i].Out))
					if err := solo[i].Forward(rows[i].Tokens, out); err != nil {
						t.Fatal(err)
					}
					if got := batched[i].Len(); got != n+k+1 {
						t.Fatalf("step %d row %d: the sequence holds %d tokens, want %d", k, i, got, n+k+1)
					}
					if c.via == viaSideBySide && !slices.Equal(out, rows[i].Out) {
						t.Errorf("step %d row %d: logits differ from Forward's", k, i)
					}
					for j := range out {
						worst = max(worst, math.Abs(float64(out[j]-rows[i].Out[j])))
					}
				}
			}
			t.Logf("max |step - solo Forward| = %.3g", worst)
			if worst > maxLogitDiff {
				t.Errorf("max |step - solo Forward| = %g, tolerance %g", worst, maxLogitDiff)
			}
		})
	}
}

// otherSeq is a sequence of another backend.
type otherSeq struct{ engine.Sequence }

// TestStepRefusesBadRows: rows engine.CheckRows refuses, a sequence of
// another model or backend and a closed one are errors before any work,
// every sequence left as it was.
func TestStepRefusesBadRows(t *testing.T) {
	cfg := checkpoint.Qwen36()
	m, other := openShapeOnly(t, cfg), openShapeOnly(t, cfg)
	seq := func(m *Model) engine.Sequence {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b, foreign := seq(m), seq(m), seq(other)
	closed := seq(m)
	closed.Close()
	v := cfg.Vocab
	for _, c := range []struct {
		name string
		rows []engine.Row
		want error
	}{
		{"none", nil, engine.ErrStepRows},
		{"no tokens", []engine.Row{{Seq: a}, {Seq: b, Tokens: []int{1}}}, engine.ErrStepRows},
		{"no sequence", []engine.Row{{Seq: a, Tokens: []int{1}}, {Tokens: []int{1}}}, engine.ErrStepRows},
		{"a sequence twice", []engine.Row{{Seq: a, Tokens: []int{1}}, {Seq: a, Tokens: []int{2}}}, engine.ErrStepRows},
		{"a token outside the vocabulary", []engine.Row{{Seq: a, Tokens: []int{1}}, {Seq: b, Tokens: []int{v}}}, nil},
		{"logits of the wrong size", []engine.Row{{Seq: a, Tokens: []int{1, 2}, Out: make([]float32, v+1)}, {Seq: b, Tokens: []int{1}}}, nil},
		{"another model's sequence", []engine.Row{{Seq: a, Tokens: []int{1}}, {Seq: foreign, Tokens: []int{1}}}, engine.ErrStepRows},
		{"another backend's sequence", []engine.Row{{Seq: otherSeq{}, Tokens: []int{1}}, {Seq: b, Tokens: []int{1}}}, engine.ErrStepRows},
		{"a closed sequence", []engine.Row{{Seq: a, Tokens: []int{1}}, {Seq: closed, Tokens: []int{1}}}, engine.ErrClosed},
		{"a closed sequence alone", []engine.Row{{Seq: closed, Tokens: []int{1}}}, engine.ErrClosed},
	} {
		err := m.Step(c.rows)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if a.Len() != 0 || b.Len() != 0 || foreign.Len() != 0 {
		t.Errorf("refused steps moved the sequences to %d, %d and %d tokens", a.Len(), b.Len(), foreign.Len())
	}
}

// benchPrompt is the context each benchmarked sequence decodes after.
const benchPrompt = 256

// BenchmarkStepDecode35B is the aggregate decode rate of Step with 1, 2,
// 4 and 8 decode rows, each sequence after a prompt of benchPrompt
// tokens, every row's logits copied to the host (logits=host) or none
// asked for (logits=none: the device's share, as a sampler on the device
// would leave it), on the checkpoint in $PETAL_BENCH_MODEL
// (tools/synth35b's 35B; skipped without one) on the device gputest opens
// ($PETAL_GPU=cuda on the H200). One row is Forward's decode step; more
// run as Step runs them (via=step: up to 8, one pass of the multi-row
// products), as one GEMM pass (via=gemm) and as side-by-side decode steps
// (via=side).
func BenchmarkStepDecode35B(b *testing.B) {
	dir := os.Getenv("PETAL_BENCH_MODEL")
	if dir == "" {
		b.Skip("$PETAL_BENCH_MODEL names no checkpoint")
	}
	// A device of its own: $PETAL_CUDA_PROFILE=1 prints at its Close.
	m, err := Open(dir, gputest.OpenOwn(b, true))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	v := m.cfg.Vocab
	for _, rows := range []int{1, 2, 4, 8} {
		for _, how := range []struct {
			host bool
			via  stepVia
		}{{true, viaAuto}, {false, viaAuto}, {true, viaGEMM}, {true, viaSideBySide}} {
			if rows == 1 && how.via != viaAuto {
				continue // one row is Forward either way
			}
			host, via := how.host, how.via
			name := fmt.Sprintf("rows=%d/logits=none", rows)
			if host {
				name = fmt.Sprintf("rows=%d/logits=host", rows)
			}
			switch via {
			case viaGEMM:
				name += "/via=gemm"
			case viaSideBySide:
				name += "/via=side"
			default:
				name += "/via=step" // so a pattern can pick Step's way alone
			}
			b.Run(name, func(b *testing.B) {
				step := make([]engine.Row, rows)
				for i := range step {
					s, err := m.NewSequence()
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					prompt := make([]int, benchPrompt)
					for j := range prompt {
						prompt[j] = (i*benchPrompt + j) % v
					}
					if err := s.Forward(prompt, nil); err != nil {
						b.Fatal(err)
					}
					step[i] = engine.Row{Seq: s, Tokens: []int{i + 1}}
					if host {
						step[i].Out = make([]float32, v)
					}
				}
				// The batch activations and the caches' growth past
				// the prompt, off the clock.
				if err := m.step(step, via); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if err := m.step(step, via); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
