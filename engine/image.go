package engine

import (
	"errors"
	"fmt"
)

// Image is one image in a prompt: the tokens of a [ImageSequence]'s
// ForwardImages call from At on are its placeholders (Grid's product of
// them, each the checkpoint's image token id), whose embeddings Features
// replace and whose rotary positions are 3D (mRoPE): frame, row and column
// of the merged grid past the text before it, the text after it going on
// one past the image's largest extent, as transformers' get_rope_index.
type Image struct {
	At int
	// Grid is the merged grid: frames, rows, columns (the processor's
	// grid_thw with rows and columns divided by the merge size).
	Grid [3]int
	// Features are the vision tower's output, [Tokens()][hidden].
	Features []float32
	// Hash identifies the pixels (a SHA-256 of the pixel values or of the
	// file): two prompts with equal token ids are the same prefix only if
	// their images' hashes are equal too, so caches of sequences key on it.
	Hash [32]byte
}

// Tokens is how many prompt tokens the image takes.
func (im *Image) Tokens() int { return im.Grid[0] * im.Grid[1] * im.Grid[2] }

// ImageSequence is a Sequence whose prompt may hold images.
type ImageSequence interface {
	Sequence
	// ForwardImages is Forward with images placed among tokens (sorted by
	// At, not overlapping). After it, the sequence's text positions run
	// on from the last image's, so Forward continues it.
	ForwardImages(tokens []int, images []Image, out []float32) error
}

// ErrBadImages reports images that do not fit the tokens of a call or the
// model.
var ErrBadImages = errors.New("images do not fit the prompt")

// CheckImages validates images against a call's tokens: each within the
// tokens, in order, not overlapping, every placeholder the image token
// id, and hidden features per placeholder.
func CheckImages(tokens []int, images []Image, imageToken, hidden int) error {
	end := 0
	for i := range images {
		im := &images[i]
		n := im.Tokens()
		switch {
		case im.Grid[0] <= 0 || im.Grid[1] <= 0 || im.Grid[2] <= 0:
			return fmt.Errorf("%w: image %d: grid %v", ErrBadImages, i, im.Grid)
		case im.At < end || im.At+n > len(tokens):
			return fmt.Errorf("%w: image %d: tokens [%d, %d) overlap the one before or pass the %d tokens", ErrBadImages, i, im.At, im.At+n, len(tokens))
		case len(im.Features) != n*hidden:
			return fmt.Errorf("%w: image %d: %d features for %d tokens of %d", ErrBadImages, i, len(im.Features), n, hidden)
		}
		for j := im.At; j < im.At+n; j++ {
			if tokens[j] != imageToken {
				return fmt.Errorf("%w: image %d: token %d is %d, not the image token %d", ErrBadImages, i, j, tokens[j], imageToken)
			}
		}
		end = im.At + n
	}
	return nil
}
