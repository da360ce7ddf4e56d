package shaders

import "testing"

// TestAttnSplit checks AttnDecode's parts against what the callers rely
// on: one split across a block (a decode plan replays its dispatch over a
// block), parts that tile a block, about AttnSplitParts parts while there
// are few blocks, and AttnScratchBytes holding every count's partials up
// to n and never shrinking (a sequence sizes it once for its capacity).
func TestAttnSplit(t *testing.T) {
	a := AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256}
	const maxBlocks = 3 * AttnSplitParts // past the split, where parts are blocks
	prev := 0
	for n := 1; n <= maxBlocks*AttnBlock; n++ {
		s, b := attnSplit(n), attnBlocks(n)
		if s != attnSplit((b-1)*AttnBlock+1) {
			t.Fatalf("n=%d: split %d, %d at the block's first position", n, s, attnSplit((b-1)*AttnBlock+1))
		}
		if s < 1 || s > AttnMaxSplit || AttnBlock%s != 0 {
			t.Fatalf("n=%d: split %d does not tile a block of %d", n, s, AttnBlock)
		}
		if parts := b * s; parts > max(b, AttnSplitParts) || (s < AttnMaxSplit && 2*parts <= AttnSplitParts) {
			t.Fatalf("n=%d: %d blocks in %d parts", n, b, parts)
		}
		got := AttnScratchBytes(a, n)
		if need := a.Heads * b * s * (a.HeadDim + 2) * 4; got < need || got < prev {
			t.Fatalf("n=%d: AttnScratchBytes %d, partials %d, %d at n-1", n, got, need, prev)
		}
		prev = got
	}
	if s := attnSplit(1); s != AttnMaxSplit {
		t.Errorf("one position: split %d, want %d", s, AttnMaxSplit)
	}
	if s := attnSplit(maxBlocks * AttnBlock); s != 1 {
		t.Errorf("%d blocks: split %d, want 1", maxBlocks, s)
	}
}
