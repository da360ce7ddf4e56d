package checkpoint

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestVisionTower opens the vision fixture (tools/visref): the tower is
// bound from mlx-vlm's layout, its config parsed with the prompt's token
// ids and the text model's mRoPE sections.
func TestVisionTower(t *testing.T) {
	m, err := Open(filepath.Join("..", "testdata", "fixtures", "vision-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config
	if !c.HasVision() || m.Vision == nil || m.VisionErr != nil {
		t.Fatalf("no vision: %v", m.VisionErr)
	}
	v := c.Vision
	if v.Depth != 3 || v.Hidden != 64 || v.Heads != 2 || v.Side() != 12 || v.OutHidden != c.Hidden || v.ImageToken != 506 || v.VisionStart != 508 {
		t.Errorf("vision config %+v", *v)
	}
	if c.MRopeSection != [3]int{3, 3, 2} || !c.MRopeInterleaved {
		t.Errorf("mrope %v interleaved %v", c.MRopeSection, c.MRopeInterleaved)
	}
	w := m.Vision
	if !w.ChannelsLast || len(w.Blocks) != 3 || w.Blocks[2].FC2.Rows != 64 || w.MergerFC2.Rows != 128 || w.MergerFC1.Cols != 256 {
		t.Errorf("vision weights: channels last %v, %d blocks", w.ChannelsLast, len(w.Blocks))
	}
}

// TestTextOnlyWithStrayTower opens the text fixtures, whose files carry a
// single tower tensor (tiny-a, flat-8layer) or none (real-heads): each is
// text-only, and says why when it carries a piece of a tower.
func TestTextOnlyWithStrayTower(t *testing.T) {
	for _, name := range []string{"tiny-a", "flat-8layer", "real-heads"} {
		m, err := Open(filepath.Join("..", "testdata", "fixtures", name))
		if err != nil {
			t.Fatal(err)
		}
		if m.Config.HasVision() || m.Vision != nil {
			t.Errorf("%s: has vision", name)
		}
		if stray := name != "real-heads"; stray != (m.VisionErr != nil) {
			t.Errorf("%s: VisionErr %v", name, m.VisionErr)
		}
		if m.VisionErr != nil && !strings.Contains(m.VisionErr.Error(), "vision") && !strings.Contains(m.VisionErr.Error(), "missing") {
			t.Errorf("%s: reason %v", name, m.VisionErr)
		}
		m.Close()
	}
}
