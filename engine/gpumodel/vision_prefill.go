package gpumodel

import (
	"errors"
	"fmt"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/gpu"
	"petal/shaders"
)

var _ engine.ImageSequence = (*Sequence)(nil)

// errImagesHeld refuses to save a sequence holding images: past an image
// the rotary positions run behind the cache rows (engine.Image), and the
// saved state does not hold the move.
var errImagesHeld = errors.New("gpumodel: a sequence holding images cannot be saved")

// imageState is what a sequence keeps of its images: those whose tokens
// are still to come, with their features on the device, and the move of
// the rotary positions against the cache rows (transformers' rope_deltas)
// once an image has passed.
type imageState struct {
	pending []placedImage
	delta   int
	held    bool  // an image was placed: positions may run off the rows
	axes    []int // the position component each rotary frequency takes
}

// placedImage is an image a sequence waits for the tokens of: base is its
// first token's rotary position once that token has come (-1 before).
type placedImage struct {
	at    int
	grid  [3]int // merged: frames, rows, columns
	feats shaders.View
	base  int
}

func (p *placedImage) tokens() int { return p.grid[0] * p.grid[1] * p.grid[2] }

// refuse says why SaveState cannot take the sequence.
func (st *imageState) refuse() error {
	if st.held {
		return errImagesHeld
	}
	return nil
}

// PlaceImages announces images whose tokens are to come (see
// engine.ImageSequence): the tower runs on the device on those without
// features, which stay there until their tokens are fed.
func (s *Sequence) PlaceImages(images []engine.Image) error {
	if s.closed {
		return fmt.Errorf("gpumodel: %w", engine.ErrClosed)
	}
	c := s.m.cfg
	if !c.HasVision() {
		return fmt.Errorf("gpumodel: %w: the model is text-only", engine.ErrBadImages)
	}
	end := s.pos
	if n := len(s.img.pending); n > 0 {
		end = s.img.pending[n-1].at + s.img.pending[n-1].tokens()
	}
	add := make([]placedImage, 0, len(images))
	drop := func() {
		for _, p := range add {
			s.free(p.feats.Buf)
		}
	}
	for i, im := range images {
		g := im.Grid()
		if im.Pixels.Merge != c.Vision.Merge || g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || im.At < end {
			drop()
			return fmt.Errorf("gpumodel: %w: image %d at token %d, grid %v merged by %d: before token %d or not the tower's shape", engine.ErrBadImages, i, im.At, g, im.Pixels.Merge, end)
		}
		p := placedImage{at: im.At, grid: g, base: -1}
		if im.Features != nil {
			if len(im.Features) != im.Tokens()*c.Hidden {
				drop()
				return fmt.Errorf("gpumodel: %w: image %d: %d features for %d tokens of %d", engine.ErrBadImages, i, len(im.Features), im.Tokens(), c.Hidden)
			}
			v, err := s.alloc(4 * len(im.Features))
			if err != nil {
				drop()
				return err
			}
			copy(v.Buf.Contents(), f32Bytes(im.Features))
			p.feats = v
		} else {
			f, err := s.m.encodeImage(im.Pixels)
			if err != nil {
				drop()
				return fmt.Errorf("gpumodel: image %d: %w", i, err)
			}
			if f.tokens != im.Tokens() {
				f.release()
				drop()
				return fmt.Errorf("gpumodel: %w: image %d: the tower gave %d tokens, the prompt holds %d", engine.ErrBadImages, i, f.tokens, im.Tokens())
			}
			s.bufs = append(s.bufs, f.v.Buf)
			p.feats = f.v
		}
		add = append(add, p)
		end = im.At + im.Tokens()
	}
	s.img.pending = append(s.img.pending, add...)
	s.img.held = s.img.held || len(add) > 0
	s.img.axes = ropeAxes(c)
	return nil
}

// imageJob is what a Forward's tokens take from the placed images: each
// token's 3D rotary position, the feature rows that replace embeddings,
// and the images and move after it.
type imageJob struct {
	pos3    []uint32 // [tokens][3]: time, height, width
	spans   []featureSpan
	pending []placedImage
	done    []placedImage // images whose last token the job feeds
	delta   int
}

// featureSpan is rows of an image's features that replace the embeddings
// of the job's tokens from row on.
type featureSpan struct {
	row, rows int
	src       shaders.View
}

// imageJob prepares tokens appended to s; it changes nothing in s. Each
// token takes its rotary position as transformers' get_rope_index gives
// it: text the next position in all three components, an image's tokens
// (frame, row, column) past its first token's position, the text after
// an image one past its largest component.
func (s *Sequence) imageJob(tokens []int) (*imageJob, error) {
	c := s.m.cfg
	h := c.Hidden
	job := &imageJob{pos3: make([]uint32, 3*len(tokens)), pending: append([]placedImage(nil), s.img.pending...)}
	next := s.pos + s.img.delta
	k := 0
	for i := range tokens {
		a := s.pos + i
		if k == len(job.pending) || a < job.pending[k].at {
			job.pos3[3*i], job.pos3[3*i+1], job.pos3[3*i+2] = uint32(next), uint32(next), uint32(next)
			next++
			continue
		}
		p := &job.pending[k]
		if tokens[i] != c.Vision.ImageToken {
			return nil, fmt.Errorf("gpumodel: %w: token %d is %d where an image's token %d stands", engine.ErrBadImages, a, tokens[i], c.Vision.ImageToken)
		}
		if p.base < 0 {
			p.base = next
		}
		off := a - p.at
		rows, cols := p.grid[1], p.grid[2]
		job.pos3[3*i] = uint32(p.base + off/(rows*cols))
		job.pos3[3*i+1] = uint32(p.base + off/cols%rows)
		job.pos3[3*i+2] = uint32(p.base + off%cols)
		if n := len(job.spans); n > 0 && job.spans[n-1].src.Buf == p.feats.Buf && job.spans[n-1].row+job.spans[n-1].rows == i {
			job.spans[n-1].rows++
		} else {
			job.spans = append(job.spans, featureSpan{row: i, rows: 1, src: p.feats.At(4 * off * h)})
		}
		if off == p.tokens()-1 {
			next = p.base + max(p.grid[0], rows, cols)
			job.done = append(job.done, *p)
			k++
		}
	}
	job.pending = job.pending[k:]
	job.delta = next - (s.pos + len(tokens))
	return job, nil
}

// ropeAxes is the position component each rotary frequency takes (see
// engine/cpu's ropeAxes): with mrope_interleaved, frequency j takes the
// height where j%3 is 1 and j < 3·section[1], the width where j%3 is 2
// and j < 3·section[2], else the time; otherwise the sections in order.
func ropeAxes(c *checkpoint.Config) []int {
	sec := c.MRopeSection
	axes := make([]int, c.RotaryDim/2)
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

// forwardImages is Forward for a sequence holding images, its tokens in
// the slots from 0: the chunked prefill whatever their number, the image
// tokens' embeddings replaced by their features and every attention
// layer's prep rotating by the tokens' 3D positions.
func (s *Sequence) forwardImages(tokens []int, all bool, out []float32) error {
	job, err := s.imageJob(tokens)
	if err != nil {
		return err
	}
	n, v := len(tokens), s.m.cfg.Vocab
	size := min(n, s.m.prefillChunk)
	if err := s.ensureChunk(size, all); err != nil {
		return err
	}
	defer s.releaseChunk()
	pos3, err := s.alloc(4 * len(job.pos3))
	if err != nil {
		return err
	}
	defer s.free(pos3.Buf)
	for i, p := range job.pos3 {
		putU32(pos3.Buf.Contents()[4*i:], p)
	}
	axes := ropeAxes(s.m.cfg)
	shareLevel := func(a, b piece) bool { return a.kind == pieceAttn && b.kind == pieceAttn }
	for i := 0; i < n; i += size {
		cnt := min(size, n-i)
		ch := chunk{pos: s.pos, slot: i, n: cnt}
		switch {
		case all:
			ch.logits = allLogits
		case len(out) > 0 && i+cnt == n:
			ch.logits = lastLogits
		}
		bufs, err := s.splitChunk(ch)
		if err != nil {
			return err
		}
		encode := func(e *enc, p piece) {
			switch p.kind {
			case pieceEmbed:
				s.embedImageRows(e, ch, job.spans, i)
			case pieceAttnIn:
				s.attentionInMRope(e, &s.m.layers[p.layer], &s.layers[p.layer], ch, pos3.At(12*i), axes)
			default:
				s.encodePiece(e, ch, p)
			}
		}
		var cbs []gpu.CommandBuffer
		err = encodeBuffers(s.m, bufs, shareLevel, encode, func(cb gpu.CommandBuffer, _ Cost) error {
			if err := cb.Commit(); err != nil {
				return err
			}
			cbs = append(cbs, cb)
			return nil
		})
		if err := s.drainChunk(cbs, cnt, err); err != nil {
			return err
		}
		if all {
			readFloats(out[i*v:(i+cnt)*v], s.chunk.all.Buf.Contents()[s.chunk.all.Off:])
		}
	}
	if !all && len(out) > 0 {
		readFloats(out, s.act.logitsBuf.Contents())
	}
	for _, p := range job.done {
		s.free(p.feats.Buf)
	}
	s.img.pending, s.img.delta = job.pending, job.delta
	return nil
}

// embedImageRows is the chunk's embedding with the feature rows of spans
// (rows counted from the job's first token; the chunk starts at its row
// first) in place of the image tokens', then the first layer's norm.
func (s *Sequence) embedImageRows(e *enc, ch chunk, spans []featureSpan, first int) {
	m, ca := s.m, &s.chunk
	c := m.cfg
	h, n := c.Hidden, ch.n
	e.embedRows(ca.x, m.embed, s.slot(ch.slot), n)
	e.barrier()
	for _, sp := range spans {
		lo, hi := max(sp.row, first), min(sp.row+sp.rows, first+n)
		if lo < hi {
			e.copyFloats(row(ca.x, lo-first, h), sp.src.At(4*(lo-sp.row)*h), (hi-lo)*h)
		}
	}
	e.barrier()
	e.rmsNorm(ca.xn, ca.x, m.layers[0].inNorm, h, n, c.RMSNormEps)
}

// attentionInMRope is attentionIn with the rows' 3D positions at pos3.
func (s *Sequence) attentionInMRope(e *enc, l *layer, ls *layerState, ch chunk, pos3 shaders.View, axes []int) {
	ca, n := &s.chunk, ch.n
	e.qmm(ca.qg, l.q, ca.xn, n)
	e.qmm(ca.k, l.kp, ca.xn, n)
	e.qmm(ca.v, l.v, ca.xn, n)
	e.barrier()
	e.mropePrep(shaders.AttnPrepIO{
		Q: ca.q, Gate: ca.gate, QG: ca.qg, K: ca.k, V: ca.v, KCache: ls.kCache, VCache: ls.vCache,
		QNorm: l.qNorm, KNorm: l.kNorm, Shape: s.m.attn, Pos: ch.pos,
	}, pos3, axes, n)
}

func (e *enc) copyFloats(out, x shaders.View, n int) {
	if e.add(moved(2 * n)) {
		e.check(e.k.CopyFloats(e.cb, out, x, n))
	}
}

// mropePrep costs as attnPrep, and reads the rows' positions.
func (e *enc) mropePrep(io shaders.AttnPrepIO, pos3 shaders.View, axes []int, rows int) {
	a := io.Shape
	c := moved(rows * (4*a.Heads*a.HeadDim + 2*a.KVHeads*a.HeadDim + 3))
	c.Bytes += kvBytes(a, int64(rows))
	if e.add(c) {
		e.check(e.k.MRopePrep(e.cb, io, pos3, axes, rows))
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// forkImages gives the fork f s's images: the move, and copies of the
// features of the pending images whose tokens s has begun to feed (each
// sequence frees its own). The others belong to the request that placed
// them: one that continues from the fork, as from a prefix-cache
// snapshot, places its own (engine.ImageSequence).
func (s *Sequence) forkImages(f *Sequence) error {
	f.img = imageState{delta: s.img.delta, held: s.img.held, axes: s.img.axes}
	for _, p := range s.img.pending {
		if p.at >= s.pos {
			break
		}
		v, err := f.alloc(p.feats.Buf.Len())
		if err != nil {
			return err
		}
		copy(v.Buf.Contents(), p.feats.Buf.Contents())
		p.feats = shaders.View{Buf: v.Buf, Off: p.feats.Off}
		f.img.pending = append(f.img.pending, p)
	}
	return nil
}

// stepImageRows runs the rows whose sequences hold images alone, through
// their Forward (a batched pass gives each token one position), and
// returns the others for the batched step.
func stepImageRows(rows []engine.Row, seqs []*Sequence) ([]engine.Row, error) {
	var rest []engine.Row
	for i, r := range rows {
		if !seqs[i].img.held {
			rest = append(rest, r)
			continue
		}
		if err := seqs[i].Forward(r.Tokens, r.Out); err != nil {
			return nil, fmt.Errorf("gpumodel: row %d: %w", i, err)
		}
	}
	return rest, nil
}

// imageTail readies Decode's prompt tail on a sequence holding images: all
// but its last token through Forward (the chunked prefill with the
// features and 3D positions), so the decode steps take the last and the
// generated ones, which are text.
func (s *Sequence) imageTail(tail []int) ([]int, error) {
	if len(tail) > 1 {
		if err := s.Forward(tail[:len(tail)-1], nil); err != nil {
			return nil, err
		}
		tail = tail[len(tail)-1:]
	}
	if len(s.img.pending) > 0 {
		return nil, fmt.Errorf("gpumodel: %w: the decode starts at token %d, before the image placed at token %d", engine.ErrBadImages, s.pos+len(tail)-1, s.img.pending[0].at)
	}
	return tail, nil
}

// mropeStep is a decode step's attention prep on a sequence holding
// images: the token at cache row io.Pos turns by io.Pos plus the move in
// all three components.
func (s *Sequence) mropeStep(e *enc, io shaders.AttnPrepIO) {
	a := io.Shape
	c := moved(4*a.Heads*a.HeadDim + 2*a.KVHeads*a.HeadDim)
	c.Bytes += kvBytes(a, 1)
	if e.add(c) {
		e.check(e.k.MRopeStep(e.cb, io, s.img.delta, s.img.axes))
	}
}
