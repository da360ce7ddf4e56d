package cpu

import (
	"math"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/reftest"
)

// fixturesDir holds the reference checkpoints and outputs written by
// tools/refgen/gen_fixtures.py with transformers.
const fixturesDir = "../testdata/fixtures"

// logitTolerance is the largest |logit - reference| accepted at any
// position: fp32 accumulation in a different order than the reference
// (which also uses the chunked DeltaNet form) differs by ~1e-5 here.
const logitTolerance = 1e-3

// TestFixtures compares the backend with transformers on every fixture:
// teacher-forced logits at every position, and greedy continuations.
func TestFixtures(t *testing.T) {
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		t.Run(ref.Name(), func(t *testing.T) {
			want := ref.Logits
			m, err := Open(ref.Dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			v := m.cfg.Vocab
			if v != ref.Vocab {
				t.Fatalf("vocab %d, reference %d", v, ref.Vocab)
			}
			got := forward(t, m, ref.Tokens)
			worst, at := 0.0, 0
			for i := range got {
				if d := math.Abs(float64(got[i] - want[i])); d > worst {
					worst, at = d, i
				}
			}
			t.Logf("max |logit - reference| = %.3g (position %d of %d)", worst, at/v, len(ref.Tokens))
			if worst > logitTolerance {
				t.Errorf("logit at position %d, id %d: %g, reference %g", at/v, at%v, got[at], want[at])
			}
			// Prefill of N then decode of the rest one token at a time,
			// and prefill of N then M, equal the teacher-forced pass.
			n := len(ref.Tokens) * 2 / 3
			steps := [][]int{ref.Tokens[:n]}
			for _, id := range ref.Tokens[n:] {
				steps = append(steps, []int{id})
			}
			if d := maxDiff(got, forward(t, m, steps...)); d > logitTolerance {
				t.Errorf("prefill %d then decode differs from one pass by %g", n, d)
			}
			if d := maxDiff(got, forward(t, m, ref.Tokens[:n], ref.Tokens[n:])); d > logitTolerance {
				t.Errorf("prefill %d then %d differs from one pass by %g", n, len(ref.Tokens)-n, d)
			}
			for _, g := range ref.Greedy {
				seq, _ := m.NewSequence()
				out, err := engine.Greedy(t.Context(), seq, v, g.Prompt, len(g.Tokens), nil)
				seq.Close()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, g.Tokens) {
					t.Errorf("greedy from %d-token prompt:\n got %v\nwant %v", len(g.Prompt), out, g.Tokens)
				}
			}
		})
	}
}
