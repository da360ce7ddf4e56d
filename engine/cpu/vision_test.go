package cpu

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/reftest"
	"petal/engine/vision/preprocess"
)

// visionFixture is tools/visref's vision-a: a tiny checkpoint with a
// vision tower, three images and four prompts holding them, with what
// transformers computed.
var visionFixture = filepath.Join(fixturesDir, "vision-a")

// visionSetup opens the fixture's model and reads what transformers took
// and computed: the images' pixel values, their features, the prompts.
func visionSetup(t *testing.T) (*Model, *reftest.Vision, []preprocess.Pixels) {
	t.Helper()
	m, err := Open(visionFixture)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	v := m.cfg.Vision
	ref, err := reftest.LoadVision(visionFixture, v.PatchDim(), m.cfg.Hidden)
	if err != nil {
		t.Fatal(err)
	}
	return m, ref, ref.Pixels(v.Merge)
}

// promptImages places the prompt's images at its runs of image tokens,
// from shift on.
func promptImages(c *checkpoint.Config, prompt, which []int, px []preprocess.Pixels, shift int) []engine.Image {
	var out []engine.Image
	k := 0
	for i := 0; i < len(prompt); i++ {
		if prompt[i] != c.Vision.ImageToken || (i > 0 && prompt[i-1] == c.Vision.ImageToken) {
			continue
		}
		out = append(out, engine.Image{At: shift + i, Pixels: px[which[k]], Hash: [32]byte{byte(which[k])}})
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
	m, ref, px := visionSetup(t)
	c := m.cfg
	v := c.Vocab
	want := ref.PromptLogits
	for pi, p := range ref.Prompts {
		images := promptImages(c, p.Prompt, p.Images, px, 0)
		if len(images) != len(p.Images) {
			t.Fatalf("prompt %d: %d image runs for %d images", pi, len(images), len(p.Images))
		}
		seq, _ := m.NewSequence()
		s := seq.(*Sequence)
		if err := s.PlaceImages(images); err != nil {
			t.Fatal(err)
		}
		img, err := s.imageJob(p.Prompt)
		if err != nil {
			t.Fatal(err)
		}
		for i, pos := range img.pos {
			if pos != [3]int{p.Positions[0][i], p.Positions[1][i], p.Positions[2][i]} {
				t.Fatalf("prompt %d, token %d: position %v, reference %d %d %d", pi, i, pos, p.Positions[0][i], p.Positions[1][i], p.Positions[2][i])
			}
		}
		out := make([]float32, v)
		if err := s.Forward(p.Prompt, out); err != nil {
			t.Fatal(err)
		}
		worst := maxDiff(out, want[pi*v:(pi+1)*v])
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

// TestImagePromptPieces: the two-image prompt read in pieces (cut
// inside the first image, then inside the second, through a Fork that
// has the second placed again), and
// beside another prompt in one Step, reaches the logits of one Forward;
// decode after a Fork continues the positions.
func TestImagePromptPieces(t *testing.T) {
	m, ref, px := visionSetup(t)
	c := m.cfg
	v := c.Vocab
	p := ref.Prompts[len(ref.Prompts)-1]
	whole := make([]float32, v)
	seq, _ := m.NewSequence()
	if err := seq.(*Sequence).PlaceImages(promptImages(c, p.Prompt, p.Images, px, 0)); err != nil {
		t.Fatal(err)
	}
	if err := seq.Forward(p.Prompt, whole); err != nil {
		t.Fatal(err)
	}
	images := promptImages(c, p.Prompt, p.Images, px, 0)
	cut1, cut2 := images[0].At+3, images[1].At+5
	seq2, _ := m.NewSequence()
	if err := seq2.(*Sequence).PlaceImages(images); err != nil {
		t.Fatal(err)
	}
	if err := seq2.Forward(p.Prompt[:cut1], nil); err != nil {
		t.Fatal(err)
	}
	// The fork keeps the first image, begun, and not the second, which
	// it places again as a request that continues from a snapshot does.
	fork, _ := seq2.Fork()
	if err := fork.(*Sequence).PlaceImages(images[1:]); err != nil {
		t.Fatal(err)
	}
	if err := fork.Forward(p.Prompt[cut1:cut2], nil); err != nil {
		t.Fatal(err)
	}
	pieces := make([]float32, v)
	if err := fork.Forward(p.Prompt[cut2:], pieces); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(whole, pieces); d > logitTolerance {
		t.Errorf("in pieces, the last logits differ by %g", d)
	}
	// In one Step beside the one-image prompt 0, each row as alone.
	q := ref.Prompts[0]
	alone := make([]float32, v)
	sq, _ := m.NewSequence()
	if err := sq.(*Sequence).PlaceImages(promptImages(c, q.Prompt, q.Images, px, 0)); err != nil {
		t.Fatal(err)
	}
	if err := sq.Forward(q.Prompt, alone); err != nil {
		t.Fatal(err)
	}
	a, b := make([]float32, v), make([]float32, v)
	ra, _ := m.NewSequence()
	rb, _ := m.NewSequence()
	if err := ra.(*Sequence).PlaceImages(promptImages(c, p.Prompt, p.Images, px, 0)); err != nil {
		t.Fatal(err)
	}
	if err := rb.(*Sequence).PlaceImages(promptImages(c, q.Prompt, q.Images, px, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.Step([]engine.Row{{Seq: ra, Tokens: p.Prompt, Out: a}, {Seq: rb, Tokens: q.Prompt, Out: b}}); err != nil {
		t.Fatal(err)
	}
	if da, db := maxDiff(whole, a), maxDiff(alone, b); da > logitTolerance || db > logitTolerance {
		t.Errorf("in one Step the rows differ from alone by %g and %g", da, db)
	}
	// Decode after a Fork of the whole prompt continues its positions.
	f2, _ := seq.Fork()
	a, b = make([]float32, v), make([]float32, v)
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

// TestImagesRefused: images that do not fit the sequence, the tokens or
// the tower, and any image on a text-only model; nothing runs.
func TestImagesRefused(t *testing.T) {
	m, ref, px := visionSetup(t)
	c := m.cfg
	p := ref.Prompts[0]
	good := promptImages(c, p.Prompt, p.Images, px, 0)[0]
	short := good
	short.Features = make([]float32, good.Tokens()*c.Hidden-1)
	odd := good
	odd.Pixels.Grid.H = 3
	late := good
	late.At = 0 // on text: refused when the tokens come
	for name, im := range map[string]engine.Image{"short features": short, "odd grid": odd, "on text": late} {
		seq, _ := m.NewSequence()
		err := seq.(*Sequence).PlaceImages([]engine.Image{im})
		if err == nil {
			err = seq.Forward(p.Prompt, nil)
		}
		if !errors.Is(err, engine.ErrBadImages) {
			t.Errorf("%s: %v", name, err)
		}
		if seq.Len() != 0 {
			t.Errorf("%s: %d tokens ran", name, seq.Len())
		}
	}
	seq, _ := m.NewSequence()
	if err := seq.Forward(p.Prompt[:3], nil); err != nil {
		t.Fatal(err)
	}
	before := good
	before.At = 2
	if err := seq.(*Sequence).PlaceImages([]engine.Image{before}); !errors.Is(err, engine.ErrBadImages) {
		t.Errorf("an image before the sequence's end: %v", err)
	}
	text, err := Open(filepath.Join(fixturesDir, "tiny-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer text.Close()
	ts, _ := text.NewSequence()
	if err := ts.(*Sequence).PlaceImages([]engine.Image{good}); !errors.Is(err, engine.ErrBadImages) || text.Vision() {
		t.Errorf("text-only model: %v, Vision %v", err, text.Vision())
	}
}

// TestEncodeImageMatchesTransformers runs the tower through the model, on
// the CPU's product kernels, against get_image_features.
func TestEncodeImageMatchesTransformers(t *testing.T) {
	m, ref, px := visionSetup(t)
	for i, p := range px {
		got, err := m.EncodeImage(p)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.Images[i].Features
		if len(got) != len(want) {
			t.Fatalf("image %d: %d features, want %d", i, len(got), len(want))
		}
		worst := maxDiff(got, want)
		t.Logf("image %d: max |feature - transformers| = %.3g", i, worst)
		if worst > 2e-3 {
			t.Errorf("image %d: features differ by %g", i, worst)
		}
	}
}

// BenchmarkVisionMatMul is one product of the tower's MLP at Qwen3.6's
// widths (4304 x 1152) over 1024 patches, a 512x512 image.
func BenchmarkVisionMatMul(b *testing.B) {
	const rows, cols, n = 4304, 1152, 1024
	w, x, out := make([]float32, rows*cols), make([]float32, n*cols), make([]float32, n*rows)
	for i := range w {
		w[i] = float32(i%7) * 0.01
	}
	for b.Loop() {
		visionKernels{}.MatMul(w, rows, cols, x, n, out)
	}
	b.ReportMetric(2*rows*cols*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// endsAfter is a context whose Err turns to Canceled after n checks and
// stays so; checks counts the checks up to the first that ended. The
// tower checks once before each block and once before the merger.
type endsAfter struct {
	context.Context
	n, checks int
}

func (c *endsAfter) Err() error {
	if c.checks > c.n {
		return context.Canceled
	}
	c.checks++
	if c.checks > c.n {
		return context.Canceled
	}
	return nil
}

func (c *endsAfter) Done() <-chan struct{} { return nil }

// TestEncodeImageStopsBetweenBlocks: EncodeImageContext checks its context
// before each of the tower's blocks and stops with the cause at the first
// ended check; a context that never ends gives EncodeImage's features.
func TestEncodeImageStopsBetweenBlocks(t *testing.T) {
	m, _, px := visionSetup(t)
	want, err := m.EncodeImage(px[0])
	if err != nil {
		t.Fatal(err)
	}
	depth := m.cfg.Vision.Depth
	for _, n := range []int{0, 1, depth} {
		ctx, cancel := context.WithCancelCause(t.Context())
		gone := errors.New("the client left")
		cancel(gone)
		// Err says whether it ended; context.Cause reads the parent's cause.
		c := &endsAfter{Context: ctx, n: n}
		if _, err := m.EncodeImageContext(c, px[0]); !errors.Is(err, gone) {
			t.Errorf("ended after %d checks: %v, want the cause", n, err)
		}
		if c.checks != n+1 {
			t.Errorf("ended after %d checks: the tower checked %d times", n, c.checks)
		}
	}
	c := &endsAfter{Context: t.Context(), n: depth + 1}
	got, err := m.EncodeImageContext(c, px[0])
	if err != nil || !slices.Equal(got, want) || c.checks != depth+1 {
		t.Errorf("with a context that outlasts the tower: %v, features equal %v, %d checks for %d blocks and the merger", err, slices.Equal(got, want), c.checks, depth)
	}
}
