package gpumodel

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
)

// checkLogits compares logits of positions with the reference as
// TestFixtures does and returns the largest difference.
func checkLogits(t *testing.T, got, want []float32, vocab int) float64 {
	t.Helper()
	worst := 0.0
	for pos := range len(got) / vocab {
		g, w := got[pos*vocab:(pos+1)*vocab], want[pos*vocab:(pos+1)*vocab]
		for i := range g {
			worst = max(worst, math.Abs(float64(g[i]-w[i])))
		}
		if top, margin := topTwo(w); margin > decisiveMargin {
			if gt, _ := topTwo(g); gt != top {
				t.Errorf("position %d: top-1 %d, reference %d (margin %.3f)", pos, gt, top, margin)
			}
		}
	}
	if worst > maxRefDiff {
		t.Errorf("max |logit - reference| = %g, tolerance %g", worst, maxRefDiff)
	}
	return worst
}

// TestPrefillChunks runs every fixture's prompt through the chunked prefill
// with chunks of 72 tokens, so chunks end inside the GEMMs' 32-token tiles
// and hold a whole 64-token DeltaNet block and the start of another, in two
// Forward calls, the second starting at position 50 in the middle of a
// chunk with the cache and DeltaNet state of the first: every position's
// logits against transformers.
func TestPrefillChunks(t *testing.T) {
	dev := openDevice(t)
	dirs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "reference.json"))
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ref, want := loadReference(t, dir)
			m := openFixture(t, dev, filepath.Base(dir))
			m.prefillChunk = 72
			v := m.cfg.Vocab
			seq, _ := m.NewSequence()
			defer seq.Close()
			const split = 50
			got := make([]float32, len(ref.Tokens)*v)
			if err := seq.Forward(ref.Tokens[:split], got[:split*v]); err != nil {
				t.Fatal(err)
			}
			if err := seq.Forward(ref.Tokens[split:], got[split*v:]); err != nil {
				t.Fatal(err)
			}
			if seq.Len() != len(ref.Tokens) {
				t.Errorf("sequence holds %d tokens, want %d", seq.Len(), len(ref.Tokens))
			}
			t.Logf("max |logit - reference| = %.3g", checkLogits(t, got, want, v))

			// Only the last position's logits, and a greedy run whose
			// prompt spans several chunks.
			last, _ := m.NewSequence()
			defer last.Close()
			lg := make([]float32, v)
			if err := last.Forward(ref.Tokens, lg); err != nil {
				t.Fatal(err)
			}
			checkLogits(t, lg, want[(len(ref.Tokens)-1)*v:], v)
			for _, g := range ref.Greedy {
				if len(g.Prompt) <= m.prefillChunk {
					continue // TestFixtures covers one-chunk prompts
				}
				s, _ := m.NewSequence()
				out, err := engine.Greedy(t.Context(), s, m.cfg.Vocab, g.Prompt, len(g.Tokens), nil)
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, g.Tokens) {
					t.Errorf("greedy from %d tokens:\n got %v\nwant %v", len(g.Prompt), out, g.Tokens)
				}
			}
		})
	}
}

// TestPrefillMatchesDecode feeds the same tokens once through the decode
// kernels (one Forward per token, below prefillMinTokens) and once through
// the prefill, and holds both to the reference and to each other.
func TestPrefillMatchesDecode(t *testing.T) {
	dev := openDevice(t)
	dir := filepath.Join(fixturesDir, "tiny-a")
	ref, want := loadReference(t, dir)
	m := openFixture(t, dev, "tiny-a")
	m.prefillChunk = 80 // a whole DeltaNet block, then part of one
	v := m.cfg.Vocab
	const n = 100
	dec, _ := m.NewSequence()
	defer dec.Close()
	step := make([]float32, n*v)
	for i := range n {
		if err := dec.Forward(ref.Tokens[i:i+1], step[i*v:(i+1)*v]); err != nil {
			t.Fatal(err)
		}
	}
	pre, _ := m.NewSequence()
	defer pre.Close()
	chunked := make([]float32, n*v)
	if err := pre.Forward(ref.Tokens[:n], chunked); err != nil {
		t.Fatal(err)
	}
	checkLogits(t, step, want[:n*v], v)
	checkLogits(t, chunked, want[:n*v], v)
	worst := 0.0
	for i := range step {
		worst = max(worst, math.Abs(float64(step[i]-chunked[i])))
	}
	t.Logf("max |prefill - decode| = %.3g", worst)
	if worst > maxLogitDiff {
		t.Errorf("prefill and decode differ by %g", worst)
	}
	// Both continue alike from their caches.
	a, err := engine.Greedy(t.Context(), dec, m.cfg.Vocab, ref.Tokens[n:n+1], 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := engine.Greedy(t.Context(), pre, m.cfg.Vocab, ref.Tokens[n:n+1], 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Errorf("after the decode path %v, after the prefill %v", a, b)
	}
}

// The 35B shape's prefill chunk, counted without weights: dispatches and
// levels independent of the chunk's length but for the per-token ops, and
// weights read once per chunk.
func TestDryRunPrefill35B(t *testing.T) {
	cfg := checkpoint.Qwen36()
	a, err := DryRunPrefill(cfg, 0, 512)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DryRunPrefill(cfg, 4096, 64)
	if err != nil {
		t.Fatal(err)
	}
	step, err := DryRun(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("35B prefill chunk of 512: %d dispatches, %d levels, %d weight bytes, %d cache bytes", a.Dispatches, a.Levels, a.WeightBytes, a.CacheBytes)
	t.Logf("35B prefill chunk of 64 at 4096: %d dispatches, %d levels, %d weight bytes, %d cache bytes", b.Dispatches, b.Levels, b.WeightBytes, b.CacheBytes)
	// Every op covers the whole chunk: the dispatches and levels do not
	// depend on its length.
	if a.Dispatches != b.Dispatches || a.Levels != b.Levels {
		t.Errorf("chunks of 512 and 64: %d and %d dispatches, %d and %d levels", a.Dispatches, b.Dispatches, a.Levels, b.Levels)
	}
	// All 256 experts can be routed to by 512 tokens; the dense part is
	// what a decode step reads without its 8 experts.
	if a.WeightBytes < 18e9 || a.WeightBytes > 19.5e9 || a.WeightBytes < 10*step.WeightBytes {
		t.Errorf("chunk weight bytes %d", a.WeightBytes)
	}
	if _, err := DryRunPrefill(cfg, 0, 1); err == nil {
		t.Error("a one-token chunk was accepted")
	}
}
