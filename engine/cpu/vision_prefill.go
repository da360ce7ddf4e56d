package cpu

import (
	"errors"
	"fmt"

	"petal/engine"
	"petal/engine/checkpoint"
)

var _ engine.ImageSequence = (*Sequence)(nil)

// imageJob is what a Forward with images adds to its tokens: each token's
// 3D rotary position and, at the images' tokens, the rows that replace
// their embeddings.
type imageJob struct {
	pos    [][3]int
	images []engine.Image
}

// ForwardImages is Forward with images in the tokens (see
// engine.ImageSequence).
func (s *Sequence) ForwardImages(tokens []int, images []engine.Image, out []float32) error {
	if s.layers == nil {
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	c := s.m.cfg
	if len(images) == 0 {
		return s.Forward(tokens, out)
	}
	if !c.HasVision() {
		return fmt.Errorf("cpu: %w: the model is text-only", engine.ErrBadImages)
	}
	if err := engine.CheckTokens(tokens, c.Vocab); err != nil {
		return err
	}
	if err := engine.CheckImages(tokens, images, c.Vision.ImageToken, c.Hidden); err != nil {
		return err
	}
	all, err := engine.CheckOut(out, len(tokens), c.Vocab)
	if err != nil {
		return err
	}
	if err := s.checkPositions(len(tokens)); err != nil {
		return err
	}
	img, next := s.imagePositions(tokens, images)
	sc := s.m.acquire()
	defer s.m.release(sc)
	sc.tokens = append(sc.tokens[:0], tokens...)
	sc.jobs = append(sc.jobs[:0], job{s: s, tokens: sc.tokens, out: out, all: all, img: img})
	s.m.run(sc, sc.jobs)
	s.ropeDelta = next - s.pos
	s.images = true
	return nil
}

// imagePositions gives each token its rotary position, as get_rope_index:
// text takes the next position in all three components; an image's
// tokens (frame, row, column) of its merged grid added to the position
// after the text before it, and the text after it goes on from one past
// the image's largest component. next is the position of the token after
// the last.
func (s *Sequence) imagePositions(tokens []int, images []engine.Image) (*imageJob, int) {
	img := &imageJob{pos: make([][3]int, len(tokens)), images: images}
	next := s.pos + s.ropeDelta
	i := 0
	for _, im := range images {
		for ; i < im.At; i++ {
			img.pos[i] = [3]int{next, next, next}
			next++
		}
		t, h, w := im.Grid[0], im.Grid[1], im.Grid[2]
		for f := range t {
			for r := range h {
				for col := range w {
					img.pos[i] = [3]int{next + f, next + r, next + col}
					i++
				}
			}
		}
		next += max(t, h, w)
	}
	for ; i < len(tokens); i++ {
		img.pos[i] = [3]int{next, next, next}
		next++
	}
	return img, next
}

// embed replaces the embeddings of the image tokens among the piece's
// tokens [off, off+len(x)/hidden) of the job with their feature rows.
func (img *imageJob) embed(x []float32, off, hidden int) {
	n := len(x) / hidden
	for _, im := range img.images {
		lo, hi := max(im.At, off), min(im.At+im.Tokens(), off+n)
		if lo < hi {
			copy(x[(lo-off)*hidden:(hi-off)*hidden], im.Features[(lo-im.At)*hidden:(hi-im.At)*hidden])
		}
	}
}

// ropePos is the rotary position of the piece's token j: an image job's,
// else its index past the sequence's start moved by the images before it.
func (g *seg) ropePos(j int) [3]int {
	if g.img != nil {
		return g.img.pos[g.off+j]
	}
	p := g.pos + j + g.s.ropeDelta
	return [3]int{p, p, p}
}

// ropeAxes says which component of a 3D position each rotary frequency
// takes: with mrope_interleaved, frequency j takes the height where j%3
// is 1 and j < 3·section[1], the width where j%3 is 2 and j < 3·section[2],
// else the time (transformers' apply_interleaved_mrope); otherwise the
// sections in order.
func ropeAxes(c *checkpoint.Config) []uint8 {
	half := c.RotaryDim / 2
	sec := c.MRopeSection
	axes := make([]uint8, half)
	for j := range axes {
		switch {
		case c.MRopeInterleaved && j%3 == 1 && j < 3*sec[1]:
			axes[j] = 1
		case c.MRopeInterleaved && j%3 == 2 && j < 3*sec[2]:
			axes[j] = 2
		case !c.MRopeInterleaved && sec[0] > 0 && j >= sec[0]+sec[1]:
			axes[j] = 2
		case !c.MRopeInterleaved && sec[0] > 0 && j >= sec[0]:
			axes[j] = 1
		}
	}
	return axes
}

// errImagesSaved refuses to save a sequence whose text positions an
// image moved: the saved state does not hold the move.
var errImagesSaved = errors.New("cpu: a sequence holding images cannot be saved")
