package gpumodel

import (
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/reftest"
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

// visionSetup opens vision-a on the device and reads what transformers
// took and computed: its images' pixel values, their features, the
// prompts.
func visionSetup(t *testing.T) (*Model, *reftest.Vision, []preprocess.Pixels, [][]float32) {
	t.Helper()
	dev := openDevice(t)
	m := openFixture(t, dev, "vision-a")
	v := m.cfg.Vision
	ref, err := reftest.LoadVision(visionFixture, v.PatchDim(), m.cfg.Hidden)
	if err != nil {
		t.Fatal(err)
	}
	var fs [][]float32
	for _, im := range ref.Images {
		fs = append(fs, im.Features)
	}
	return m, ref, ref.Pixels(v.Merge), fs
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
		worst := maxDiff(got, want[i])
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

// promptImages places the prompt's images at its runs of image tokens.
func promptImages(m *Model, prompt, which []int, px []preprocess.Pixels) []engine.Image {
	var out []engine.Image
	k, tok := 0, m.cfg.Vision.ImageToken
	for i := range prompt {
		if prompt[i] != tok || (i > 0 && prompt[i-1] == tok) {
			continue
		}
		out = append(out, engine.Image{At: i, Pixels: px[which[k]], Hash: [32]byte{byte(which[k])}})
		k++
	}
	return out
}

// TestImagePromptsMatchTransformers prefills each of vision-a's prompts
// with its images on the device (the tower's features at the image
// tokens, 3D positions through mrope_prep) and decodes greedily through
// Forward: the positions are get_rope_index's, the logits at the prompt's
// end within maxLogitDiff of transformers' (the device's KV cache holds
// half precision, which moved the text fixtures' logits by up to 0.0025;
// transformers keeps fp32), and the answer is its tokens. Prompt 3 is
// also read in pieces cut inside each image, through a Fork, and must
// give the same answer.
func TestImagePromptsMatchTransformers(t *testing.T) {
	m, ref, px, _ := visionSetup(t)
	v := m.cfg.Vocab
	want := ref.PromptLogits
	for pi, p := range ref.Prompts {
		images := promptImages(m, p.Prompt, p.Images, px)
		if len(images) != len(p.Images) {
			t.Fatalf("prompt %d: %d image runs for %d images", pi, len(images), len(p.Images))
		}
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		s := seq.(*Sequence)
		if err := s.PlaceImages(images); err != nil {
			t.Fatal(err)
		}
		job, err := s.imageJob(p.Prompt)
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Prompt {
			for a := range 3 {
				if int(job.pos3[3*i+a]) != p.Positions[a][i] {
					t.Fatalf("prompt %d, token %d: position %v, reference %d %d %d", pi, i, job.pos3[3*i:3*i+3], p.Positions[0][i], p.Positions[1][i], p.Positions[2][i])
				}
			}
		}
		if job.delta != p.RopeDelta {
			t.Errorf("prompt %d: rope delta %d, reference %d", pi, job.delta, p.RopeDelta)
		}
		out := make([]float32, v)
		if err := s.Forward(p.Prompt, out); err != nil {
			t.Fatal(err)
		}
		worst := maxDiff(out, want[pi*v:(pi+1)*v])
		t.Logf("prompt %d (%d tokens, images %v): max |logit - transformers| at its end %.3g", pi, len(p.Prompt), p.Images, worst)
		if !(worst <= maxLogitDiff) {
			t.Errorf("prompt %d: last logits differ by %g, tolerance %g", pi, worst, maxLogitDiff)
		}
		if got := greedy(t, s, out, len(p.Tokens)); !slices.Equal(got, p.Tokens) {
			t.Errorf("prompt %d: answer %v, transformers %v", pi, got, p.Tokens)
		}
		if err := s.SaveState(io.Discard); !errors.Is(err, errImagesHeld) {
			t.Errorf("prompt %d: SaveState: %v, want errImagesHeld", pi, err)
		}
		s.Close()
		if len(p.Images) < 2 {
			continue
		}
		// In pieces: up to inside the first image, a Fork, up to inside the
		// second, the rest.
		first, second := images[0].At+2, images[1].At+images[1].Tokens()/2
		seq, _ = m.NewSequence()
		s = seq.(*Sequence)
		if err := s.PlaceImages(images); err != nil {
			t.Fatal(err)
		}
		if err := s.Forward(p.Prompt[:first], nil); err != nil {
			t.Fatal(err)
		}
		f, err := s.Fork()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		fs := f.(*Sequence)
		// The fork keeps the first image, begun, and not the second,
		// which it places again as a request continuing from a snapshot
		// does (placing it twice is refused).
		if len(fs.img.pending) != 1 {
			t.Fatalf("prompt %d: the fork holds %d pending images, want the begun one", pi, len(fs.img.pending))
		}
		if err := fs.PlaceImages(images[1:]); err != nil {
			t.Fatal(err)
		}
		if err := fs.Forward(p.Prompt[first:second], nil); err != nil {
			t.Fatal(err)
		}
		if err := fs.Forward(p.Prompt[second:], out); err != nil {
			t.Fatal(err)
		}
		if got := greedy(t, fs, out, len(p.Tokens)); !slices.Equal(got, p.Tokens) {
			t.Errorf("prompt %d in pieces: answer %v, transformers %v", pi, got, p.Tokens)
		}
		fs.Close()
	}
}

// greedy decodes n tokens through Forward from the logits in out.
func greedy(t *testing.T, s *Sequence, out []float32, n int) []int {
	t.Helper()
	var got []int
	for range n {
		next := engine.Argmax(out)
		got = append(got, next)
		if err := s.Forward([]int{next}, out); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// TestStepRunsImageRows: a Step holding a prompt with an image beside two
// text rows gives the image row the logits its Forward gives (bit for
// bit: Step runs it through Forward), and the text rows theirs.
func TestStepRunsImageRows(t *testing.T) {
	m, ref, px, _ := visionSetup(t)
	v := m.cfg.Vocab
	p := ref.Prompts[0]
	text := []int{5, 17, 42, 99, 7}
	seqs := make([]engine.Sequence, 3)
	for i := range seqs {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		seqs[i] = s
	}
	if err := seqs[0].(*Sequence).PlaceImages(promptImages(m, p.Prompt, p.Images, px)); err != nil {
		t.Fatal(err)
	}
	rows := []engine.Row{
		{Seq: seqs[0], Tokens: p.Prompt, Out: make([]float32, v)},
		{Seq: seqs[1], Tokens: text, Out: make([]float32, v)},
		{Seq: seqs[2], Tokens: text[:3], Out: make([]float32, v)},
	}
	if err := m.Step(rows); err != nil {
		t.Fatal(err)
	}
	alone, _ := m.NewSequence()
	defer alone.Close()
	if err := alone.(*Sequence).PlaceImages(promptImages(m, p.Prompt, p.Images, px)); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, v)
	if err := alone.Forward(p.Prompt, want); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0].Out, want) {
		t.Error("the image row's logits differ from its Forward's")
	}
	for i, toks := range [][]int{text, text[:3]} {
		s, _ := m.NewSequence()
		defer s.Close()
		if err := s.Forward(toks, want); err != nil {
			t.Fatal(err)
		}
		worst := maxDiff(rows[i+1].Out, want)
		if !(worst <= maxLogitDiff) {
			t.Errorf("text row %d: logits differ from its Forward's by %g", i+1, worst)
		}
	}
	if seqs[0].Len() != len(p.Prompt) || seqs[1].Len() != len(text) {
		t.Errorf("the sequences hold %d and %d tokens, want %d and %d", seqs[0].Len(), seqs[1].Len(), len(p.Prompt), len(text))
	}
}

// TestImageDecodeMatchesTransformers decodes each of vision-a's prompts
// through engine.Run's device loop (Decode: the prompt's tail through the
// image prefill, the steps after with the move through mrope_prep): the
// greedy answers are transformers'.
func TestImageDecodeMatchesTransformers(t *testing.T) {
	m, ref, px, _ := visionSetup(t)
	for pi, p := range ref.Prompts {
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if err := seq.(*Sequence).PlaceImages(promptImages(m, p.Prompt, p.Images, px)); err != nil {
			t.Fatal(err)
		}
		var got []int
		d := engine.Decode{Prompt: p.Prompt, MaxTokens: len(p.Tokens), Token: func(id int) (bool, error) {
			got = append(got, id)
			return false, nil
		}}
		if _, err := engine.Run(t.Context(), seq, m.cfg.Vocab, &d); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, p.Tokens) {
			t.Errorf("prompt %d: answer %v, transformers %v", pi, got, p.Tokens)
		}
		seq.Close()
	}
}
