package tower

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/reftest"
	"petal/engine/vision/preprocess"
)

// fixture is tools/visref's vision-a: a tiny checkpoint with a tower and
// what transformers computed on it.
var fixture = filepath.Join("..", "..", "testdata", "fixtures", "vision-a")

// featureTolerance is the bound on |feature - transformers'|.
const featureTolerance = 2e-3

// Images are the fixture's images' pixel values and merged features.
func Images(t *testing.T, tw *Tower) (px []preprocess.Pixels, feats [][]float32) {
	t.Helper()
	c := tw.Config()
	ref, err := reftest.LoadVision(fixture, c.PatchDim(), c.OutHidden)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range ref.Images {
		feats = append(feats, im.Features)
	}
	return ref.Pixels(c.Merge), feats
}

// maxDiff is the largest |a[i] - b[i]|.
func maxDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(float64(a[i]-b[i])))
	}
	return worst
}

func open(t *testing.T) *Tower {
	t.Helper()
	m, err := checkpoint.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tw, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	return tw
}

// TestFeaturesMatchTransformers encodes the fixture's three images (three
// sizes and aspect ratios) and compares with get_image_features.
func TestFeaturesMatchTransformers(t *testing.T) {
	tw := open(t)
	px, want := Images(t, tw)
	for i := range px {
		got, err := tw.Encode(px[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want[i]) {
			t.Fatalf("image %d: %d features, want %d", i, len(got), len(want[i]))
		}
		worst := maxDiff(got, want[i])
		t.Logf("image %d, grid %+v: max |feature - transformers| = %.3g", i, px[i].Grid, worst)
		if worst > featureTolerance {
			t.Errorf("image %d: features differ by %g", i, worst)
		}
	}
}

// TestEncodeRefusesBadImages: grids that are not whole merge blocks, past
// MaxPatches, or whose pixel values are the wrong length.
func TestEncodeRefusesBadImages(t *testing.T) {
	tw := open(t)
	d := tw.Config().PatchDim()
	for _, px := range []preprocess.Pixels{
		{Grid: preprocess.Grid{T: 1, H: 3, W: 4}, Values: make([]float32, 12*d)},
		{Grid: preprocess.Grid{T: 1, H: 4, W: 4}, Values: make([]float32, 15*d)},
		{Grid: preprocess.Grid{T: 1, H: 512, W: 256}},
		{Grid: preprocess.Grid{T: 0, H: 4, W: 4}},
	} {
		if _, err := tw.Encode(px); !errors.Is(err, ErrBadImage) {
			t.Errorf("grid %+v, %d values: %v", px.Grid, len(px.Values), err)
		}
	}
}

// TestAttentionBlocks checks the blocked attention (queries in blocks of
// attnQueries, two frames apart) against softmax(q kᵀ/√d) v written out
// directly, on random rows: 2 frames of 18x16 patches, 2 heads of 16.
func TestAttentionBlocks(t *testing.T) {
	tw := &Tower{cfg: checkpoint.VisionConfig{Hidden: 32, Heads: 2, Merge: 2}, k: goKernels{}}
	g := preprocess.Grid{T: 2, H: 18, W: 16}
	n, h, d, frame := g.Patches(), 32, 16, 18*16
	r := rand.New(rand.NewPCG(3, 4))
	qkv := make([]float32, n*3*h)
	for i := range qkv {
		qkv[i] = float32(r.NormFloat64())
	}
	cos, sin := make([]float32, frame*d/2), make([]float32, frame*d/2)
	for i := range cos {
		cos[i] = 1 // no rotation: the comparison is about the blocks
	}
	want := make([]float32, n*h)
	for p := range n {
		f0 := p / frame * frame
		for hd := range 2 {
			s := make([]float64, frame)
			var sum float64
			for k := range frame {
				for i := range d {
					s[k] += float64(qkv[p*3*h+hd*d+i]) * float64(qkv[(f0+k)*3*h+h+hd*d+i])
				}
				s[k] = math.Exp(s[k] / 4)
				sum += s[k]
			}
			for k := range frame {
				for i := range d {
					want[p*h+hd*d+i] += float32(s[k] / sum * float64(qkv[(f0+k)*3*h+2*h+hd*d+i]))
				}
			}
		}
	}
	got := make([]float32, n*h)
	tw.attention(qkv, got, g, cos, sin)
	worst := maxDiff(got, want)
	if worst > 1e-4 {
		t.Errorf("blocked attention differs from the direct one by %g", worst)
	}
}
