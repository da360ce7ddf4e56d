package engine

import (
	"errors"

	"petal/engine/vision/preprocess"
)

// Image is one image in a prompt: the sequence's tokens from At on (At
// counts from the sequence's first token) are its placeholders, one per
// merged patch, each the checkpoint's image token id. Their embeddings are
// the vision tower's features of the image and their rotary positions 3D
// (mRoPE): frame, row and column of the merged grid past the text before
// it, the text after it going on one past the image's largest extent, as
// transformers' get_rope_index.
type Image struct {
	At int
	// Pixels are the preprocessed image; the sequence runs its model's
	// vision tower on them unless Features are given.
	Pixels preprocess.Pixels
	// Features, when set, are the tower's output for Pixels already,
	// [tokens][hidden] (Pixels.Values may then be empty; its Grid and
	// Merge still say the image's shape).
	Features []float32
	// Hash identifies the image (a SHA-256 of its file or pixel values):
	// two prompts with equal token ids are the same prefix only if their
	// images' hashes are equal too, so caches of sequences key on it.
	Hash [32]byte
}

// Grid is the image's merged grid: frames, rows, columns.
func (im *Image) Grid() [3]int {
	g, m := im.Pixels.Grid, max(im.Pixels.Merge, 1)
	return [3]int{g.T, g.H / m, g.W / m}
}

// Tokens is how many prompt tokens the image takes.
func (im *Image) Tokens() int {
	g := im.Grid()
	return g[0] * g[1] * g[2]
}

// ImageSequence is a Sequence whose prompt may hold images.
type ImageSequence interface {
	Sequence
	// PlaceImages announces images whose tokens are still to come, in
	// order: the Forward or Step calls that feed those tokens (in pieces
	// or at once) put the features at them and give them their 3D
	// positions, and the text after them runs on from the last image's
	// positions. It refuses an image before the sequence's end or before
	// one already placed, a text-only model, and pixels its tower refuses.
	// A Fork keeps only the images whose tokens it has begun to feed: the
	// others belong to the request that placed them, and one that
	// continues from the fork places its own.
	PlaceImages(images []Image) error
}

// ErrBadImages reports images that do not fit a sequence, its tokens or
// its model; callers test with errors.Is.
var ErrBadImages = errors.New("images do not fit the prompt")
