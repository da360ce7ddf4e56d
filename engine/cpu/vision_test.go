package cpu

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/vision/preprocess"
	"petal/engine/vision/tower"
)

// visionFixture is tools/visref's vision-a: a tiny checkpoint with a
// vision tower, three images and four prompts holding them, with what
// transformers computed.
var visionFixture = filepath.Join(fixturesDir, "vision-a")

type visionRef struct {
	Images []struct {
		Grid    [3]int `json:"grid"`
		Patches int    `json:"patches"`
	} `json:"images"`
	Prompts []struct {
		Prompt    []int    `json:"prompt"`
		Images    []int    `json:"images"`
		Tokens    []int    `json:"tokens"`
		Positions [3][]int `json:"positions"`
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

// visionSetup opens the fixture's model and encodes its images with the
// tower, from the pixel values transformers took.
func visionSetup(t *testing.T) (*Model, *visionRef, [][]float32) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(visionFixture, "vision.json"))
	if err != nil {
		t.Fatal(err)
	}
	ref := &visionRef{}
	if err := json.Unmarshal(data, ref); err != nil {
		t.Fatal(err)
	}
	m, err := Open(visionFixture)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tw, err := tower.New(m.ckpt)
	if err != nil {
		t.Fatal(err)
	}
	pixels := readF32(t, filepath.Join(visionFixture, "pixels.f32"))
	c := tw.Config()
	var feats [][]float32
	for _, im := range ref.Images {
		n := im.Patches * c.PatchDim()
		f, err := tw.Encode(preprocess.Pixels{Grid: preprocess.Grid{T: im.Grid[0], H: im.Grid[1], W: im.Grid[2]}, Merge: c.Merge, PatchDim: c.PatchDim(), Values: pixels[:n]})
		if err != nil {
			t.Fatal(err)
		}
		feats = append(feats, f)
		pixels = pixels[n:]
	}
	return m, ref, feats
}

// promptImages places the prompt's images at its runs of image tokens.
func promptImages(c *checkpoint.Config, ref *visionRef, prompt, which []int, feats [][]float32) []engine.Image {
	var out []engine.Image
	k := 0
	for i := 0; i < len(prompt); i++ {
		if prompt[i] != c.Vision.ImageToken || (i > 0 && prompt[i-1] == c.Vision.ImageToken) {
			continue
		}
		g := ref.Images[which[k]].Grid
		m := c.Vision.Merge
		out = append(out, engine.Image{At: i, Grid: [3]int{g[0], g[1] / m, g[2] / m}, Features: feats[which[k]], Hash: [32]byte{byte(which[k])}})
		k++
	}
	return out
}

// TestImagePromptsMatchTransformers prefills each of the fixture's
// prompts with its images (the tower's features at the image tokens,
// mRoPE positions) and decodes greedily: the 3D positions are
// get_rope_index's, the logits at the prompt's end within the text
// fixtures' tolerance of transformers', and the answer its tokens.
func TestImagePromptsMatchTransformers(t *testing.T) {
	m, ref, feats := visionSetup(t)
	c := m.cfg
	v := c.Vocab
	want := readF32(t, filepath.Join(visionFixture, "prompt_logits.f32"))
	for pi, p := range ref.Prompts {
		images := promptImages(c, ref, p.Prompt, p.Images, feats)
		if len(images) != len(p.Images) {
			t.Fatalf("prompt %d: %d image runs for %d images", pi, len(images), len(p.Images))
		}
		seq, _ := m.NewSequence()
		s := seq.(*Sequence)
		img, _ := s.imagePositions(p.Prompt, images)
		for i, pos := range img.pos {
			if pos != [3]int{p.Positions[0][i], p.Positions[1][i], p.Positions[2][i]} {
				t.Fatalf("prompt %d, token %d: position %v, reference %d %d %d", pi, i, pos, p.Positions[0][i], p.Positions[1][i], p.Positions[2][i])
			}
		}
		out := make([]float32, v)
		if err := s.ForwardImages(p.Prompt, images, out); err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for j, x := range out {
			worst = max(worst, math.Abs(float64(x-want[pi*v+j])))
		}
		t.Logf("prompt %d (%d tokens, images %v): max |logit - transformers| at its end %.3g", pi, len(p.Prompt), p.Images, worst)
		if worst > logitTolerance {
			t.Errorf("prompt %d: last logits differ by %g", pi, worst)
		}
		var got []int
		for range p.Tokens {
			next := engine.Argmax(out)
			got = append(got, next)
			if err := s.Forward([]int{next}, out); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, p.Tokens) {
			t.Errorf("prompt %d: answer %v, transformers %v", pi, got, p.Tokens)
		}
		s.Close()
	}
}

// TestImagePromptPieces: a prompt with images read in pieces (the text
// before, then the rest; and through Fork) reaches the logits of one
// call, and the positions after it carry over to decode.
func TestImagePromptPieces(t *testing.T) {
	m, ref, feats := visionSetup(t)
	c := m.cfg
	v := c.Vocab
	p := ref.Prompts[len(ref.Prompts)-1]
	images := promptImages(c, ref, p.Prompt, p.Images, feats)
	whole := make([]float32, v)
	seq, _ := m.NewSequence()
	if err := seq.(*Sequence).ForwardImages(p.Prompt, images, whole); err != nil {
		t.Fatal(err)
	}
	cut := images[0].At
	seq2, _ := m.NewSequence()
	if err := seq2.Forward(p.Prompt[:cut], nil); err != nil {
		t.Fatal(err)
	}
	fork, _ := seq2.Fork()
	rest := slices.Clone(images)
	for i := range rest {
		rest[i].At -= cut
	}
	pieces := make([]float32, v)
	if err := fork.(engine.ImageSequence).ForwardImages(p.Prompt[cut:], rest, pieces); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(whole, pieces); d > logitTolerance {
		t.Errorf("in pieces, the last logits differ by %g", d)
	}
	// Decode after a Fork of the whole prompt continues its positions.
	f2, _ := seq.Fork()
	a, b := make([]float32, v), make([]float32, v)
	if err := seq.Forward([]int{p.Tokens[0]}, a); err != nil {
		t.Fatal(err)
	}
	if err := f2.Forward([]int{p.Tokens[0]}, b); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a, b); d != 0 || engine.Argmax(a) != p.Tokens[1] {
		t.Errorf("decode after Fork differs by %g, next %d want %d", d, engine.Argmax(a), p.Tokens[1])
	}
	if err := seq.(*Sequence).SaveState(&bytes.Buffer{}); !errors.Is(err, errImagesSaved) {
		t.Errorf("SaveState of a sequence with images: %v", err)
	}
}

// TestImagesRefused: images that do not fit the tokens, and any image on
// a text-only model.
func TestImagesRefused(t *testing.T) {
	m, ref, feats := visionSetup(t)
	c := m.cfg
	p := ref.Prompts[0]
	good := promptImages(c, ref, p.Prompt, p.Images, feats)
	for name, im := range map[string]engine.Image{
		"short features": {At: good[0].At, Grid: good[0].Grid, Features: feats[0][:len(feats[0])-1]},
		"past the end":   {At: len(p.Prompt) - 1, Grid: good[0].Grid, Features: feats[0]},
		"on text":        {At: 0, Grid: good[0].Grid, Features: feats[0]},
		"empty grid":     {At: good[0].At, Grid: [3]int{1, 0, 3}},
	} {
		seq, _ := m.NewSequence()
		if err := seq.(*Sequence).ForwardImages(p.Prompt, []engine.Image{im}, nil); !errors.Is(err, engine.ErrBadImages) {
			t.Errorf("%s: %v", name, err)
		}
		if seq.Len() != 0 {
			t.Errorf("%s: %d tokens ran", name, seq.Len())
		}
	}
	text, err := Open(filepath.Join(fixturesDir, "tiny-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer text.Close()
	seq, _ := text.NewSequence()
	if err := seq.(*Sequence).ForwardImages([]int{1, 2, 3}, []engine.Image{{At: 1, Grid: [3]int{1, 1, 1}}}, nil); !errors.Is(err, engine.ErrBadImages) {
		t.Errorf("text-only model: %v", err)
	}
}
