package cpu

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/vision/preprocess"
	"petal/engine/vision/tower"
)

var _ engine.ImageSequence = (*Sequence)(nil)

// placed is an image a sequence waits for the tokens of: base is the
// rotary position of its first token once that token has come (-1 before),
// so that an image fed in pieces keeps its positions.
type placed struct {
	engine.Image
	grid [3]int
	base int
}

// visionTower is a Model's tower, widened on first use.
type visionTower struct {
	once sync.Once
	t    *tower.Tower
	err  error
}

// Vision reports whether the model reads images: its checkpoint holds a
// vision tower.
func (m *Model) Vision() bool { return m.cfg.HasVision() }

// EncodeImage runs the vision tower on an image's pixel values: its merged
// features, [tokens][hidden].
func (m *Model) EncodeImage(px preprocess.Pixels) ([]float32, error) {
	return m.EncodeImageContext(context.Background(), px)
}

// EncodeImageContext is EncodeImage, stopped between the tower's blocks
// when ctx ends. It may run beside the model's passes (the tower shares no
// state with them), so a server encodes a request's images before it
// takes the engine, not while holding it.
func (m *Model) EncodeImageContext(ctx context.Context, px preprocess.Pixels) ([]float32, error) {
	if !m.Vision() {
		return nil, fmt.Errorf("cpu: %w: the model is text-only", engine.ErrBadImages)
	}
	vt := &m.tower
	vt.once.Do(func() {
		if vt.t, vt.err = tower.New(m.ckpt); vt.err == nil {
			vt.t.SetKernels(visionKernels{})
		}
	})
	if vt.err != nil {
		return nil, vt.err
	}
	f, err := vt.t.EncodeContext(ctx, px)
	if errors.Is(err, tower.ErrBadImage) {
		err = fmt.Errorf("%w: %w", engine.ErrBadImages, err)
	}
	return f, err
}

// PlaceImages announces images whose tokens are to come (see
// engine.ImageSequence), running the tower on those without features.
func (s *Sequence) PlaceImages(images []engine.Image) error {
	if s.layers == nil {
		return fmt.Errorf("cpu: %w", engine.ErrClosed)
	}
	c := s.m.cfg
	if !c.HasVision() {
		return fmt.Errorf("cpu: %w: the model is text-only", engine.ErrBadImages)
	}
	end := s.pos
	if n := len(s.pending); n > 0 {
		end = s.pending[n-1].At + s.pending[n-1].Tokens()
	}
	add := make([]placed, 0, len(images))
	for i, im := range images {
		g := im.Grid()
		if im.Pixels.Merge != c.Vision.Merge || g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || im.At < end {
			return fmt.Errorf("cpu: %w: image %d at token %d, grid %v merged by %d: before token %d or not the tower's shape", engine.ErrBadImages, i, im.At, g, im.Pixels.Merge, end)
		}
		if im.Features == nil {
			f, err := s.m.EncodeImage(im.Pixels)
			if err != nil {
				return fmt.Errorf("cpu: image %d: %w", i, err)
			}
			im.Features = f
		}
		if len(im.Features) != im.Tokens()*c.Hidden {
			return fmt.Errorf("cpu: %w: image %d: %d features for %d tokens of %d", engine.ErrBadImages, i, len(im.Features), im.Tokens(), c.Hidden)
		}
		add = append(add, placed{Image: im, grid: g, base: -1})
		end = im.At + im.Tokens()
	}
	s.pending = append(s.pending, add...)
	s.images = s.images || len(add) > 0
	return nil
}

// imageJob is what a job's tokens take from the images placed: each
// token's 3D rotary position, the images over the job (At counted from
// its first token) whose rows replace embeddings, and the sequence's
// images and rotary move after the job.
type imageJob struct {
	pos     [][3]int
	images  []engine.Image
	pending []placed
	delta   int
}

// imageJob prepares a job of tokens appended to s, or nil when no placed
// image is among them; it changes nothing in s (commitImages does, after
// the job ran). Each token takes its rotary position as get_rope_index
// gives it: text the next position in all three components, an image's
// tokens (frame, row, column) past its first token's position, and the
// text after an image one past its largest component.
func (s *Sequence) imageJob(tokens []int) (*imageJob, error) {
	if len(s.pending) == 0 || s.pending[0].At >= s.pos+len(tokens) {
		return nil, nil
	}
	img := &imageJob{pos: make([][3]int, len(tokens)), pending: append([]placed(nil), s.pending...)}
	next := s.pos + s.ropeDelta
	k := 0 // the placed image the tokens reach next
	for i := range tokens {
		a := s.pos + i
		if k == len(img.pending) || a < img.pending[k].At {
			img.pos[i] = [3]int{next, next, next}
			next++
			continue
		}
		p := &img.pending[k]
		if tokens[i] != s.m.cfg.Vision.ImageToken {
			return nil, fmt.Errorf("cpu: %w: token %d is %d where an image's token %d stands", engine.ErrBadImages, a, tokens[i], s.m.cfg.Vision.ImageToken)
		}
		if p.base < 0 {
			p.base = next
		}
		off := a - p.At
		_, h, w := p.grid[0], p.grid[1], p.grid[2]
		img.pos[i] = [3]int{p.base + off/(h*w), p.base + off/w%h, p.base + off%w}
		if off == p.Tokens()-1 {
			next = p.base + max(p.grid[0], h, w)
			k++
		}
	}
	for j := range img.pending {
		if img.pending[j].At < s.pos+len(tokens) {
			im := img.pending[j].Image
			im.At -= s.pos
			img.images = append(img.images, im)
		}
	}
	img.pending = img.pending[k:]
	img.delta = next - (s.pos + len(tokens))
	return img, nil
}

// commitImages records what a job that ran did to s's images.
func (s *Sequence) commitImages(img *imageJob) {
	if img != nil {
		s.pending, s.ropeDelta = img.pending, img.delta
	}
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

// errImagesSaved refuses to save a sequence that holds or awaits images:
// the saved state holds neither the rotary move nor the placed images.
var errImagesSaved = errors.New("cpu: a sequence holding images cannot be saved")
