package service

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"petal/engine"
	"petal/engine/vision/preprocess"
)

// Image is a picture of a request, already decoded and preprocessed by the
// routes, in the order of its marker in the rendered prompt.
type Image struct {
	// Pixels is what the vision tower reads: the preprocessed patches and
	// their grid, which says how many pad tokens stand for the image in
	// the prompt (Pixels.Tokens()).
	Pixels preprocess.Pixels
	// Load, when set, makes Pixels.Values, nil until then: a route hands
	// the request over with the image's grid and its compressed file, so
	// that a queued request holds no pixel values (24 bytes a resized
	// pixel, 400 MB at the processor's max_pixels); they are made when the
	// request reaches the engine, for the images past its cached prefix
	// only. An error marked preprocess.ErrRefused is the request's fault.
	Load func(ctx context.Context) ([]float32, error)
	// Features are the vision tower's output for the image, when the
	// service ran it before placing the image (see imageEncoder); the
	// sequence runs it otherwise.
	Features []float32
	// Hash is the SHA-256 of the image's file: the same image, the same
	// features, so prefixes holding it may be shared, and no others.
	Hash [sha256.Size]byte
}

// ImageSpan is an image placed in a prompt: its pad tokens start at Start.
// Every image's pads are the same token, so the prefix cache keys a prompt
// on its tokens with each image's pads replaced by an id drawn from the
// image's hash (cacheKey).
type ImageSpan struct {
	Start int
	Image
}

// The vision markers of Qwen's chat template, which renders an image as
// one pad between them; the processor repeats the pad for each of the
// image's tokens.
const (
	ImagePadToken   = "<|image_pad|>"
	VisionStartMark = "<|vision_start|>"
	VisionEndMark   = "<|vision_end|>"
)

// visionModel is a model that reads images: a checkpoint with a vision
// tower, on a backend that runs it. A model without the method is
// text-only.
type visionModel interface {
	Vision() bool
}

// imageSequence is a sequence that reads images: the vision tower's entry
// point. Before the prompt is fed, it takes the images placed in it, so
// that prefill puts each image's features at its pads.
type imageSequence interface {
	PlaceImages(spans []ImageSpan) error
}

// errNoImagePrefill refuses images on a model that says it has a vision
// tower but whose sequences cannot take them.
var errNoImagePrefill = errors.New("service: the backend's sequences cannot place images in a prompt")

// placeImagesIn hands the prompt's images to a new sequence: a backend's
// engine.ImageSequence, which runs the vision tower on the pixels, or one
// that takes the spans as they are.
func placeImagesIn(seq engine.Sequence, spans []ImageSpan) error {
	if is, ok := seq.(imageSequence); ok {
		return is.PlaceImages(spans)
	}
	es, ok := seq.(engine.ImageSequence)
	if !ok {
		return errNoImagePrefill
	}
	images := make([]engine.Image, len(spans))
	for i, sp := range spans {
		images[i] = engine.Image{At: sp.Start, Pixels: sp.Pixels, Hash: sp.Hash, Features: sp.Features}
	}
	return es.PlaceImages(images)
}

// ErrTextOnly refuses images for a model without a vision tower.
var ErrTextOnly = errors.New("the loaded model is text-only: it has no vision tower to read images")

// vision reports whether the loaded model reads images.
func (s *Service) vision() bool {
	vm, ok := s.model.(visionModel)
	return ok && vm.Vision()
}

// placeImages repeats each image's pad token for the image's tokens, as
// the processor does after the template, and says where each image's pads
// start. tokens must hold exactly one pad per image.
func (s *Service) placeImages(tokens []int, images []Image) ([]int, []ImageSpan, error) {
	if len(images) == 0 {
		return tokens, nil, nil
	}
	if !s.vision() {
		return nil, nil, &badRequest{ErrTextOnly}
	}
	pad, ok := s.tok.TokenID(ImagePadToken)
	if !ok {
		return nil, nil, badRequestf("the model's tokenizer has no %s token to place an image at", ImagePadToken)
	}
	total, pads := 0, 0
	for _, t := range tokens {
		if t == pad {
			pads++
		}
	}
	for _, img := range images {
		total += img.Pixels.Tokens()
	}
	if pads != len(images) {
		// The text itself holds the marker, or the template dropped an
		// image: either way the features would land in the wrong place.
		return nil, nil, badRequestf("the prompt holds %d image markers (%s) for %d images: the text must not hold the marker itself", pads, ImagePadToken, len(images))
	}
	out := make([]int, 0, len(tokens)-pads+total)
	spans := make([]ImageSpan, 0, len(images))
	for _, t := range tokens {
		if t != pad {
			out = append(out, t)
			continue
		}
		img := images[len(spans)]
		spans = append(spans, ImageSpan{Start: len(out), Image: img})
		for range img.Pixels.Tokens() {
			out = append(out, pad)
		}
	}
	return out, spans, nil
}

// cacheKey is what the prefix cache keys a prompt's tokens on: the tokens,
// each image's pads replaced by a negative id (no token has one) drawn from
// its hash, so that equal keys hold equal images at equal places.
func cacheKey(tokens []int, spans []ImageSpan) []int {
	if len(spans) == 0 {
		return tokens
	}
	key := slices.Clone(tokens)
	for _, sp := range spans {
		id := -1 - int(binary.LittleEndian.Uint64(sp.Hash[:8])&(1<<63-1))
		for i := sp.Start; i < sp.Start+sp.Pixels.Tokens() && i < len(key); i++ {
			key[i] = id
		}
	}
	return key
}

// isImageKey reports whether a key's id stands for an image's pad.
func isImageKey(id int) bool { return id < 0 }

// insideImage reports whether the first n tokens end inside an image.
func insideImage(n int, spans []ImageSpan) bool {
	for _, sp := range spans {
		if sp.Start < n && n < sp.Start+sp.Pixels.Tokens() {
			return true
		}
	}
	return false
}

// loadImages makes the pixel values of the spans that have a Load and no
// values yet.
func loadImages(ctx context.Context, spans []ImageSpan) error {
	for i := range spans {
		im := &spans[i].Image
		if im.Pixels.Values != nil || im.Load == nil {
			continue
		}
		v, err := im.Load(ctx)
		if errors.Is(err, preprocess.ErrRefused) {
			return &badRequest{err}
		}
		if err != nil {
			return err
		}
		if want := im.Pixels.Grid.Patches() * im.Pixels.PatchDim; len(v) != want {
			return fmt.Errorf("service: image %d: %d pixel values for a grid of %d", i, len(v), want)
		}
		im.Pixels.Values = v
	}
	return nil
}

// imageEncoder is a model whose vision tower may run beside its passes and
// stops when its context ends: the service runs it before taking the
// engine, so that a big image (minutes on a CPU) holds up no other
// request and stops when its client leaves.
type imageEncoder interface {
	EncodeImageContext(ctx context.Context, px preprocess.Pixels) ([]float32, error)
}

// encodeImages runs the model's tower on the spans without features, when
// the model is an imageEncoder, and drops their pixel values, which
// placing them no longer needs.
func (s *Service) encodeImages(ctx context.Context, spans []ImageSpan) error {
	enc, ok := s.model.(imageEncoder)
	if !ok {
		return nil
	}
	for i := range spans {
		im := &spans[i].Image
		if im.Features != nil {
			continue
		}
		f, err := enc.EncodeImageContext(ctx, im.Pixels)
		if err != nil {
			return err
		}
		im.Features, im.Pixels.Values = f, nil
	}
	return nil
}

// imagesFrom are the spans at or past token n: those a sequence holding
// the first n tokens still needs.
func imagesFrom(spans []ImageSpan, n int) []ImageSpan {
	for i, sp := range spans {
		if sp.Start >= n {
			return spans[i:]
		}
	}
	return nil
}
