package cpu

import (
	"slices"
	"sync"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
)

// A decode step works in the Model's kept scratch and the persistent
// workers: it allocates nothing but, now and then, a longer KV cache or
// scores buffer, which AllocsPerRun's average over many steps rounds away.
func TestDecodeStepAllocs(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	seq, _ := m.NewSequence()
	defer seq.Close()
	out := make([]float32, m.cfg.Vocab)
	if err := seq.Forward(randomTokens(20, m.cfg.Vocab, 2), out); err != nil {
		t.Fatal(err)
	}
	tok := []int{3}
	allocs := testing.AllocsPerRun(100, func() {
		if err := seq.Forward(tok, out); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a decode step allocates %v times", allocs)
	}
}

// Sequences share their Model's scratch, one at a time, and its workers,
// at once: two sequences and a fork, stepped in turn or concurrently, give
// exactly the logits each gives alone.
func TestSequencesShareScratch(t *testing.T) {
	m := openTiny(t, checkpointtest.Tiny())
	v := m.cfg.Vocab
	promptA, promptB := randomTokens(9, v, 1), randomTokens(13, v, 2)
	steps := randomTokens(12, v, 3)
	alone := func(prompt []int) []float32 {
		chunks := [][]int{prompt}
		for _, id := range steps {
			chunks = append(chunks, []int{id})
		}
		return forward(t, m, chunks...)[len(prompt)*v:]
	}
	wantA, wantB := alone(promptA), alone(promptB)
	// The fork is taken after A's prompt and fed the same steps.
	wantF := wantA

	start := func() []engine.Sequence {
		a, _ := m.NewSequence()
		b, _ := m.NewSequence()
		if err := a.Forward(promptA, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Forward(promptB, nil); err != nil {
			t.Fatal(err)
		}
		f, err := a.Fork()
		if err != nil {
			t.Fatal(err)
		}
		return []engine.Sequence{a, b, f}
	}
	step := func(s engine.Sequence, i int, got []float32) {
		if err := s.Forward(steps[i:i+1], got[i*v:(i+1)*v]); err != nil {
			t.Error(err)
		}
	}
	check := func(how string, got [][]float32) {
		for i, want := range [][]float32{wantA, wantB, wantF} {
			if !slices.Equal(got[i], want) {
				t.Errorf("%s: sequence %d differs from running alone by %g", how, i, maxDiff(got[i], want))
			}
		}
	}

	seqs := start()
	got := [][]float32{make([]float32, len(wantA)), make([]float32, len(wantB)), make([]float32, len(wantF))}
	for i := range steps {
		for j, s := range seqs {
			step(s, i, got[j])
		}
	}
	check("in turn", got)

	seqs = start()
	got = [][]float32{make([]float32, len(wantA)), make([]float32, len(wantB)), make([]float32, len(wantF))}
	var wg sync.WaitGroup
	for j, s := range seqs {
		wg.Go(func() {
			for i := range steps {
				step(s, i, got[j])
			}
		})
	}
	wg.Wait()
	check("concurrently", got)
}
