package service

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"petal/engine"
	"petal/engine/chattemplate"
	"petal/engine/cpu"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/engine/vision/preprocess"
	"petal/internal/service/servicetest"
)

// visionFolder is the vision-a fixture (tools/visref) as a model folder:
// the test tokenizer with Qwen's vision markers added, and the config's
// vision token ids set to theirs.
func visionFolder(t *testing.T) string {
	t.Helper()
	dir := servicetest.FixtureFolder(t, "vision-a")
	edit := func(name string, f func(doc map[string]any)) {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		if data, err = json.Marshal(doc); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first := 256 + len(servicetest.AddedTokens)
	marks := []string{VisionStartMark, VisionEndMark, ImagePadToken}
	edit("tokenizer.json", func(doc map[string]any) {
		added := doc["added_tokens"].([]any)
		for i, s := range marks {
			added = append(added, map[string]any{"id": first + i, "content": s, "single_word": false,
				"lstrip": false, "rstrip": false, "normalized": false, "special": true})
		}
		doc["added_tokens"] = added
	})
	edit("config.json", func(doc map[string]any) {
		doc["vision_start_token_id"], doc["vision_end_token_id"], doc["image_token_id"] = first, first+1, first+2
		doc["video_token_id"] = first + 3
	})
	return dir
}

// fixturePixels is the fixture's first image (a 4x6-patch grid).
func fixturePixels(t *testing.T) preprocess.Pixels {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "engine", "testdata", "fixtures", "vision-a", "pixels.f32"))
	if err != nil {
		t.Fatal(err)
	}
	const patches, dim = 24, 3 * 2 * 16 * 16
	v := make([]float32, patches*dim)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return preprocess.Pixels{Grid: preprocess.Grid{T: 1, H: 4, W: 6}, Merge: 2, PatchDim: dim, Values: v}
}

// twoImages are the fixture's first image and another of the same grid
// (its values times -0.5), with their own hashes.
func twoImages(t *testing.T) (a, b Image) {
	t.Helper()
	pa := fixturePixels(t)
	pb := pa
	pb.Values = make([]float32, len(pa.Values))
	for i, x := range pa.Values {
		pb.Values[i] = -0.5 * x
	}
	return Image{Pixels: pa, Hash: [32]byte{1}}, Image{Pixels: pb, Hash: [32]byte{2}}
}

// openCPU opens the vision fixture's folder dir on the CPU backend until
// the test ends.
func openCPU(t *testing.T, dir string) *cpu.Model {
	t.Helper()
	m, err := cpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// serve is a service of m until the test ends.
func serve(t *testing.T, m engine.Model, dir string, opts Options) *Service {
	t.Helper()
	s, err := New(m, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// imageReplyTokens is how long the tests' replies run: enough tokens to
// tell two images' answers apart.
const imageReplyTokens = 6

// imageChat is a user turn asking "what is it?" about an image, or about
// nothing when !image, after a system turn when system is not empty.
func imageChat(system string, image bool) []chattemplate.Message {
	parts := []chattemplate.ContentPart{{Type: "text", Text: "what is it?"}}
	if image {
		parts = append([]chattemplate.ContentPart{{Type: "image"}}, parts...)
	}
	var msgs []chattemplate.Message
	if system != "" {
		msgs = append(msgs, chattemplate.Message{Role: "system", Content: chattemplate.TextContent(system)})
	}
	return append(msgs, chattemplate.Message{Role: "user", Content: &chattemplate.Content{Parts: parts}})
}

// askGreedy sends msgs with images to s, greedily, and returns the reply's
// events as "kind:text|" pieces and its summary.
func askGreedy(ctx context.Context, s *Service, msgs []chattemplate.Message, images ...Image) (string, Summary, error) {
	zero := 0.0
	var sb strings.Builder
	sum, err := s.Generate(ctx, &Request{Messages: msgs, Images: images, MaxTokens: imageReplyTokens,
		Sampling: sample.Overrides{Temperature: &zero}},
		func(e reply.Event) error { sb.WriteString(e.Kind.String() + ":" + e.Text + "|"); return nil })
	return sb.String(), sum, err
}

// mustAsk is askGreedy that fails the test on an error.
func mustAsk(t *testing.T, s *Service, msgs []chattemplate.Message, images ...Image) (string, Summary) {
	t.Helper()
	got, sum, err := askGreedy(context.Background(), s, msgs, images...)
	if err != nil {
		t.Fatal(err)
	}
	return got, sum
}

// TestImagesOnCPU runs chats holding an image through the service on the
// CPU backend, its prefix cache on and off: the same image and text reuse
// the prefix past the image and answer as without the cache; another
// image of the same size (the same tokens) reuses nothing past its start
// and answers as a fresh service does.
func TestImagesOnCPU(t *testing.T) {
	dir := visionFolder(t)
	imgA, imgB := twoImages(t)
	open := func(cacheBytes int64) *Service {
		s := serve(t, openCPU(t, dir), dir, Options{CacheBytes: cacheBytes})
		if !s.Info().Vision {
			t.Fatal("the vision fixture is text-only to the service")
		}
		return s
	}
	ask := func(s *Service, img Image) (string, Summary) {
		t.Helper()
		return mustAsk(t, s, imageChat("", true), img)
	}
	cached, fresh := open(0), open(-1)
	first, s1 := ask(cached, imgA)
	again, s2 := ask(cached, imgA)
	other, s3 := ask(cached, imgB)
	wantA, _ := ask(fresh, imgA)
	wantB, _ := ask(fresh, imgB)
	t.Logf("prompt %d tokens; cached %d, %d, %d", s1.PromptTokens, s1.CachedTokens, s2.CachedTokens, s3.CachedTokens)
	if first != wantA || again != wantA || other != wantB {
		t.Errorf("replies with the cache %q, %q, %q; without %q, %q", first, again, other, wantA, wantB)
	}
	// The image's 6 pads are tokens 7-12 (<|im_start|>, "user\n" as 5
	// byte tokens, <|vision_start|>): the second request reuses past them,
	// the third (another image) nothing past their start.
	const padsStart, padsEnd = 7, 13
	if s2.CachedTokens < padsEnd || s3.CachedTokens > padsStart || s1.CachedTokens != 0 {
		t.Errorf("cached tokens %d, %d (same image) and %d (another) of %d", s1.CachedTokens, s2.CachedTokens, s3.CachedTokens, s1.PromptTokens)
	}
}

// TestImagesAfterSystemTurnOnCPU: with a system turn before the image, the
// prefix cache's snapshot at the turn's end is taken while the request's
// image is placed but not yet fed; a later request with the same system
// turn and another image starts from that snapshot, which must not carry
// the first image. Images A, B, A answer as a fresh service does.
func TestImagesAfterSystemTurnOnCPU(t *testing.T) {
	dir := visionFolder(t)
	imgA, imgB := twoImages(t)
	open := func(cacheBytes int64) *Service {
		return serve(t, openCPU(t, dir), dir, Options{CacheBytes: cacheBytes})
	}
	ask := func(s *Service, img Image) (string, Summary) {
		t.Helper()
		return mustAsk(t, s, imageChat("be brief", true), img)
	}
	cached, fresh := open(0), open(-1)
	wantA, _ := ask(fresh, imgA)
	wantB, _ := ask(fresh, imgB)
	for i, c := range []struct {
		img  Image
		want string
	}{{imgA, wantA}, {imgB, wantB}, {imgA, wantA}} {
		got, sum := ask(cached, c.img)
		t.Logf("request %d: %d prompt tokens, %d cached", i, sum.PromptTokens, sum.CachedTokens)
		if got != c.want {
			t.Errorf("request %d: %q with the cache, %q without", i, got, c.want)
		}
		if i > 0 && sum.CachedTokens == 0 {
			t.Errorf("request %d reused nothing of the system turn", i)
		}
	}
}

// TestImagesLoadedAtTheEngine: an image handed over as its grid and a Load
// (as the routes hand it, no values while queued) is loaded when the
// request runs, answers as the image with its values does, is not loaded
// again when the cache holds the prefix past it, and a Load refusing the
// file is the request's fault.
func TestImagesLoadedAtTheEngine(t *testing.T) {
	dir := visionFolder(t)
	a := fixturePixels(t)
	s := serve(t, openCPU(t, dir), dir, Options{})
	ask := func(img Image) (string, error) {
		got, _, err := askGreedy(context.Background(), s, imageChat("", true), img)
		return got, err
	}
	want, err := ask(Image{Pixels: a, Hash: [32]byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	loads := 0
	lazy := a
	lazy.Values = nil
	load := func(context.Context) ([]float32, error) { loads++; return a.Values, nil }
	// Another hash, so that the first request's prefix is not reused.
	got, err := ask(Image{Pixels: lazy, Hash: [32]byte{2}, Load: load})
	if err != nil || got != want || loads != 1 {
		t.Fatalf("loaded image: %q, %v, %d loads; want %q, 1 load", got, err, loads, want)
	}
	if got, err = ask(Image{Pixels: lazy, Hash: [32]byte{2}, Load: load}); err != nil || got != want || loads != 1 {
		t.Fatalf("cached past the image: %q, %v, %d loads; want %q, no new load", got, err, loads, want)
	}
	refuse := func(context.Context) ([]float32, error) {
		return nil, fmt.Errorf("%w: truncated", preprocess.ErrRefused)
	}
	if _, err := ask(Image{Pixels: lazy, Hash: [32]byte{3}, Load: refuse}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a refused load: %v, want ErrBadRequest", err)
	}
}

// gatedEncoder is the CPU model whose tower waits for a gate: started is
// closed when an image's encoding begins, and the encoding goes on when
// open is closed or stops when its context ends.
type gatedEncoder struct {
	*cpu.Model
	started, open chan struct{}
	once          sync.Once
}

func (g *gatedEncoder) EncodeImageContext(ctx context.Context, px preprocess.Pixels) ([]float32, error) {
	g.once.Do(func() { close(g.started) })
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return g.Model.EncodeImageContext(ctx, px)
}

// TestImagesEncodedOffTheEngine: with two requests in parallel, a request
// whose image is being encoded holds up no other (a text request
// completes meanwhile), answers as before once its encoding ends, and a
// request whose client leaves during the encoding stops with its cause.
func TestImagesEncodedOffTheEngine(t *testing.T) {
	dir := visionFolder(t)
	a := fixturePixels(t)
	g := &gatedEncoder{Model: openCPU(t, dir), started: make(chan struct{}), open: make(chan struct{})}
	s := serve(t, g, dir, Options{Parallel: 2, CacheBytes: -1})
	ask := func(ctx context.Context, images ...Image) error {
		_, _, err := askGreedy(ctx, s, imageChat("", len(images) > 0), images...)
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ask(t.Context(), Image{Pixels: a, Hash: [32]byte{1}}) }()
	<-g.started
	if err := ask(t.Context()); err != nil {
		t.Fatalf("a text request while an image encodes: %v", err)
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatalf("the image request: %v", err)
	}
	g.open, g.started, g.once = make(chan struct{}), make(chan struct{}), sync.Once{}
	ctx, leave := context.WithCancelCause(t.Context())
	gone := errors.New("the client left")
	go func() { done <- ask(ctx, Image{Pixels: a, Hash: [32]byte{2}}) }()
	<-g.started
	leave(gone)
	if err := <-done; !errors.Is(err, gone) {
		t.Fatalf("a request whose client left while its image encoded: %v", err)
	}
}
