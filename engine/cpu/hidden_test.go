package cpu

import (
	"math"
	"testing"

	"petal/engine/reftest"
)

// TestHiddenIsWhatTheHeadReads: the LM head over Hidden's states gives
// Forward's logits at every position, across chunk boundaries, so the
// states are the final ones, after the final norm.
func TestHiddenIsWhatTheHeadReads(t *testing.T) {
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	ref := refs[0]
	m, err := Open(ref.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.cfg
	tokens := make([]int, maxChunk+5)
	for i := range tokens {
		tokens[i] = ref.Tokens[i%len(ref.Tokens)]
	}
	seq, _ := m.NewSequence()
	logits := make([]float32, len(tokens)*c.Vocab)
	if err := seq.Forward(tokens, logits); err != nil {
		t.Fatal(err)
	}
	hs, _ := m.NewHiddenSequence()
	hidden := make([]float32, len(tokens)*c.Hidden)
	if err := hs.Hidden(tokens, hidden); err != nil {
		t.Fatal(err)
	}
	if hs.Len() != len(tokens) {
		t.Errorf("Len %d after Hidden of %d tokens", hs.Len(), len(tokens))
	}
	sc := m.acquire()
	head := make([]float32, len(tokens)*c.Vocab)
	m.lmHead.mul(sc, 0, hidden, len(tokens), head)
	m.release(sc)
	worst := 0.0
	for i := range head {
		worst = max(worst, math.Abs(float64(head[i]-logits[i])))
	}
	if worst > logitTolerance {
		t.Errorf("head over the hidden states differs from Forward's logits by %g", worst)
	}
	if err := hs.Hidden(tokens[:2], hidden); err == nil {
		t.Error("a buffer of the wrong size was taken")
	}
}
