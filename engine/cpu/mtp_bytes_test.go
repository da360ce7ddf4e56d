package cpu

import "testing"

// TestBytesCountDrafting: after a verify step of two tokens, a drafting
// sequence's Bytes exceeds a plain one's fed the same tokens by at least
// one copy of every DeltaNet layer's conv window and recurrent state (kept
// for Rewind) and the head's keys and values for the positions it has
// seen; a sequence with the head loaded that never drafts counts as a
// plain one.
func TestBytesCountDrafting(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	c := m.cfg
	v := c.Vocab
	prompt := make([]int, 9)
	for i := range prompt {
		prompt[i] = tokens[i] % v
	}
	verify := []int{tokens[9] % v, tokens[10] % v}
	a, _ := m.NewSequence()
	b, _ := m.NewSequence()
	sa, sb := a.(*Sequence), b.(*Sequence)
	sa.SetDrafting(true)
	if err := sa.Forward(prompt, nil); err != nil {
		t.Fatal(err)
	}
	if err := sa.Draft(verify[0], make([]float32, v)); err != nil {
		t.Fatal(err)
	}
	sa.KeepForRewind()
	if err := sa.Forward(verify, make([]float32, len(verify)*v)); err != nil {
		t.Fatal(err)
	}
	if err := sb.Forward(append(append([]int{}, prompt...), verify...), nil); err != nil {
		t.Fatal(err)
	}
	var kept int64
	for _, l := range sb.layers {
		kept += 4 * int64(len(l.conv)+len(l.state))
	}
	head := 4 * 2 * int64(c.KVHeads*c.HeadDim*sa.draft.cache.Len())
	if kept == 0 || head == 0 {
		t.Fatalf("nothing to count: %d bytes of DeltaNet state, %d of head cache", kept, head)
	}
	if d := sa.Bytes() - sb.Bytes(); d < kept+head {
		t.Errorf("drafting adds %d bytes, want at least %d (%d of kept states, %d of the head's cache)", d, kept+head, kept, head)
	}
	if sa.Bytes() <= 0 || sb.Bytes() <= 0 {
		t.Fatalf("sizes %d and %d", sa.Bytes(), sb.Bytes())
	}
	if sb.draftBytes() != 0 {
		t.Errorf("a sequence that never drafted counts %d bytes of drafting", sb.draftBytes())
	}
}
