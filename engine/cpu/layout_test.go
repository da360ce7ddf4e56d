package cpu

import (
	"fmt"
	"slices"
	"testing"

	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/reftest"
)

// TestFixturesInMLXLayout runs every fixture, rewritten as MLX writes it
// (checkpointtest.RewriteMLX: header unpadded, tensors back to back in
// another order than the index's, an odd-sized tensor in the first shard)
// with its first shard's data at each offset mod 16. Tensors misaligned
// for their elements are read through copies, aligned ones in place; the
// logits are bit-identical to the padded original's, so they match
// transformers' reference exactly as tightly as the original does. Under
// -race, checkptr would catch any misaligned typed read.
func TestFixturesInMLXLayout(t *testing.T) {
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		t.Run(ref.Name(), func(t *testing.T) {
			m, err := Open(ref.Dir)
			if err != nil {
				t.Fatal(err)
			}
			padded := forward(t, m, ref.Tokens)
			m.Close()
			origDiff := maxDiff(padded, ref.Logits)
			for r := range 16 {
				t.Run(fmt.Sprintf("offset=%d", r), func(t *testing.T) {
					dir := t.TempDir()
					if err := checkpointtest.RewriteMLX(ref.Dir, dir, r); err != nil {
						t.Fatal(err)
					}
					m, err := Open(dir)
					if err != nil {
						t.Fatalf("refused a valid checkpoint: %v", err)
					}
					defer m.Close()
					got := forward(t, m, ref.Tokens)
					if !slices.Equal(got, padded) {
						t.Errorf("logits differ from the padded original's by up to %g", maxDiff(got, padded))
					}
					if d := maxDiff(got, ref.Logits); d != origDiff || d > logitTolerance {
						t.Errorf("max |logit - reference| = %g, the padded original's %g (tolerance %g)", d, origDiff, logitTolerance)
					}
				})
			}
			t.Logf("max |logit - reference| = %.3g over %d positions, in MLX's layout at every offset and padded alike", origDiff, len(ref.Tokens))
		})
	}
}
