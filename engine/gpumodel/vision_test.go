package gpumodel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"petal/engine"
	"petal/engine/vision/preprocess"
)

// visionFixture is tools/visref's vision-a: a tiny checkpoint with a
// vision tower (3 blocks, hidden 64, 2 heads of 32), three images and four
// prompts holding them, with what transformers computed in fp32.
var visionFixture = filepath.Join(fixturesDir, "vision-a")

// maxFeatureDiff bounds |feature - transformers'| on the device: issue
// 34's bound, the CPU tower's (engine/vision/tower). Both compute in fp32
// and differ only in summation order (16-wide tiles, an online softmax),
// which moves a feature of magnitude ~1 by a few ulp per reduction; the
// CPU tower lands within 3.2e-6.
const maxFeatureDiff = 2e-3

type visionRef struct {
	Images []struct {
		Grid    [3]int `json:"grid"`
		Patches int    `json:"patches"`
		Tokens  int    `json:"tokens"`
	} `json:"images"`
	Prompts []struct {
		Prompt    []int    `json:"prompt"`
		Images    []int    `json:"images"`
		Tokens    []int    `json:"tokens"`
		Positions [3][]int `json:"positions"`
		RopeDelta int      `json:"rope_delta"`
	} `json:"prompts"`
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// visionSetup opens vision-a on the device and reads its images' pixel
// values and transformers' features.
func visionSetup(t *testing.T) (*Model, *visionRef, []preprocess.Pixels, [][]float32) {
	t.Helper()
	dev := openDevice(t)
	data, err := os.ReadFile(filepath.Join(visionFixture, "vision.json"))
	if err != nil {
		t.Fatal(err)
	}
	ref := &visionRef{}
	if err := json.Unmarshal(data, ref); err != nil {
		t.Fatal(err)
	}
	m := openFixture(t, dev, "vision-a")
	pixels := readF32(t, filepath.Join(visionFixture, "pixels.f32"))
	feats := readF32(t, filepath.Join(visionFixture, "features.f32"))
	v := m.cfg.Vision
	var px []preprocess.Pixels
	var fs [][]float32
	for _, im := range ref.Images {
		n, k := im.Patches*v.PatchDim(), im.Tokens*m.cfg.Hidden
		px = append(px, preprocess.Pixels{Grid: preprocess.Grid{T: im.Grid[0], H: im.Grid[1], W: im.Grid[2]}, Merge: v.Merge, PatchDim: v.PatchDim(), Values: pixels[:n]})
		fs = append(fs, feats[:k])
		pixels, feats = pixels[n:], feats[k:]
	}
	if len(pixels) != 0 || len(feats) != 0 || len(px) != 3 {
		t.Fatalf("fixture files hold %d pixel values and %d features past %d images", len(pixels), len(feats), len(px))
	}
	return m, ref, px, fs
}

// TestEncodeImageMatchesTransformers runs the tower on the device over
// vision-a's three images (grids 4x6, 10x4, 6x12 patches: frames that are
// not whole runs of 32 keys nor whole 16-wide tiles) and compares the
// merged features with get_image_features'.
func TestEncodeImageMatchesTransformers(t *testing.T) {
	m, _, px, want := visionSetup(t)
	if !m.Vision() {
		t.Fatal("vision-a's model says it is text-only")
	}
	for i := range px {
		got, err := m.EncodeImage(px[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want[i]) {
			t.Fatalf("image %d: %d features, want %d", i, len(got), len(want[i]))
		}
		worst := 0.0
		for j := range got {
			worst = max(worst, math.Abs(float64(got[j]-want[i][j])))
		}
		t.Logf("image %d, grid %v: max |feature - transformers| = %.3g", i, px[i].Grid, worst)
		if !(worst <= maxFeatureDiff) {
			t.Errorf("image %d: max |feature - transformers| = %g, tolerance %g", i, worst, maxFeatureDiff)
		}
	}
}

// TestEncodeImageRefuses: grids the tower cannot read are refused with
// engine.ErrBadImages before anything runs.
func TestEncodeImageRefuses(t *testing.T) {
	m, _, px, _ := visionSetup(t)
	odd := px[0]
	odd.Grid.W = 5
	short := px[0]
	short.Values = short.Values[:len(short.Values)-1]
	huge := px[0]
	huge.Grid = preprocess.Grid{T: 1, H: 512, W: 512}
	for name, p := range map[string]preprocess.Pixels{"odd grid": odd, "short values": short, "too many patches": huge} {
		if _, err := m.EncodeImage(p); !errors.Is(err, engine.ErrBadImages) {
			t.Errorf("%s: %v, want engine.ErrBadImages", name, err)
		}
	}
}
