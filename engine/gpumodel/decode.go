package gpumodel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"petal/engine"
	"petal/engine/sample"
	"petal/gpu"
	"petal/shaders"
)

// tokenRing is how many token slots after the prompt's the generated tokens
// cycle through. The step feeding token g reads its slot and writes token
// g+1's while the host reads token g; the slot of token g is written again
// by the step committed three iterations later, long after the host read
// it and after the step that read it completed.
const tokenRing = 4

// Decode is the device side of engine.Run. With d.Sampling the sampler
// (shaders.Sample), else the argmax (over ids below d.Limit), runs on the
// GPU after each step and writes the next step's input slot, and two steps
// are in flight: the step after token g is committed before token g is
// read back. With d.Constraint the sampler draws from the ids its mask
// allows, uploaded before each draw (decodeConstrained). (A request
// picked on the host takes engine.Run's host loop over Forward.)
func (s *Sequence) Decode(ctx context.Context, tail []int, d *engine.Decode) (engine.DecodeStats, error) {
	if s.closed {
		return engine.DecodeStats{}, fmt.Errorf("gpumodel: %w", engine.ErrClosed)
	}
	if s.img.held {
		var err error
		if tail, err = s.imageTail(tail); err != nil {
			return engine.DecodeStats{}, err
		}
	}
	defer s.releaseChunk() // every return below has waited for its steps
	if d.Sampling != nil {
		if err := s.startSampling(d); err != nil {
			return engine.DecodeStats{}, err
		}
		defer func() { s.sampling, s.samp.logprobs = false, false }()
	}
	if d.Logprobs != nil && d.Sampling == nil {
		return engine.DecodeStats{}, errors.New("gpumodel: logprobs are drawn by the sampler; the decode needs Sampling")
	}
	if d.Constraint != nil && d.Sampling == nil {
		return engine.DecodeStats{}, errors.New("gpumodel: a constraint masks the sampler's draw; the decode needs Sampling")
	}
	s.limit = d.Limit
	defer func() { s.limit = 0 }()
	var st engine.DecodeStats
	n := len(tail)
	if err := s.ensureCapacity(s.pos + n); err != nil {
		return st, err
	}
	if err := s.ensureTokens(n + tokenRing); err != nil {
		return st, err
	}
	s.putTokens(0, tail)
	gen := func(g int) shaders.View { return s.slot(n + g%tokenRing) }
	base := s.pos
	if d.Constraint != nil {
		if err := s.putAllowed(d); err != nil {
			return st, err
		}
	}
	first := gen(0)
	pending, pendingSteps, err := s.feed(n, &first)
	if err != nil {
		return st, err
	}
	if d.Constraint != nil {
		return s.decodeConstrained(ctx, d, base, n, pending, pendingSteps)
	}
	dev := s.m.k.Device()
	for g := 0; ; g++ {
		// pending writes token g.
		var next gpu.CommandBuffer
		if g+1 < d.MaxTokens && (d.Yield == nil || !d.Yield()) {
			pos := base + n + g
			if pos >= s.cap {
				// Growing copies the caches: nothing may be in flight.
				if err := s.wait(pending, pendingSteps); err != nil {
					return st, err
				}
				pending = nil
				if err := s.ensureCapacity(pos + 1); err != nil {
					return st, err
				}
			}
			start := time.Now()
			cb, err := dev.NewCommandBuffer()
			if err == nil {
				err = s.encode(cb, step{pos: pos, token: gen(g), next: gen(g + 1)})
			}
			if err == nil {
				err = cb.Commit()
			}
			st.HostTime += time.Since(start)
			if err != nil {
				return st, s.finish(pending, pendingSteps, err)
			}
			next = cb
		}
		if pending != nil {
			if err := s.wait(pending, pendingSteps); err != nil {
				return st, s.finish(next, 1, err)
			}
		}
		st.Tokens++
		stop, err := s.take(d, n+g%tokenRing, base+n+g)
		pending, pendingSteps = next, 1
		if err == nil && !stop && next != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil || stop || next == nil {
			return st, s.finish(pending, pendingSteps, err)
		}
	}
}

// take hands the token in slot i, written by the pick after position pos,
// to d.
func (s *Sequence) take(d *engine.Decode, i, pos int) (stop bool, err error) {
	tok := s.token(i)
	switch {
	case tok == shaders.SampleBadLogits:
		return false, fmt.Errorf("%w: gpumodel: the logits after position %d hold NaN or +Inf", sample.ErrBadLogits, pos)
	case tok < 0 || tok >= s.m.cfg.Vocab:
		// The sampler found no id it may pick (all masked).
		return false, fmt.Errorf("gpumodel: no token could be picked at position %d", pos)
	}
	if d.Logprobs != nil {
		d.Logprobs(s.readRecord(i))
	}
	return d.Token(tok)
}

// decodeConstrained is Decode's loop for a reply under a grammar, whose
// mask for token g+1 depends on token g: each step is two command buffers,
// the model's forward pass (committed before token g is read back, so the
// GPU runs it while the host advances the grammar and writes the mask) and
// the sampler's draw (committed once the mask is in place, before the next
// forward pass is encoded). So the GPU waits for the host only when the
// mask takes longer than a forward pass; the logits stay on the device.
// pending is the feed, which drew token 0; base is the position of the
// prompt tail's first token.
func (s *Sequence) decodeConstrained(ctx context.Context, d *engine.Decode, base, n int, pending gpu.CommandBuffer, pendingSteps int) (engine.DecodeStats, error) {
	var st engine.DecodeStats
	dev := s.m.k.Device()
	gen := func(g int) shaders.View { return s.slot(n + g%tokenRing) }
	// fwd is the forward pass the draw pending reads (none for the feed).
	var fwd gpu.CommandBuffer
	for g := 0; ; g++ {
		// pending draws token g.
		var next gpu.CommandBuffer
		if g+1 < d.MaxTokens && (d.Yield == nil || !d.Yield()) {
			pos := base + n + g
			if pos >= s.cap {
				if err := s.drainAll(nil, fwd, pending, pendingSteps); err != nil {
					return st, err
				}
				fwd, pending = nil, nil
				if err := s.ensureCapacity(pos + 1); err != nil {
					return st, err
				}
			}
			start := time.Now()
			cb, err := dev.NewCommandBuffer()
			if err == nil {
				err = s.encode(cb, step{pos: pos, token: gen(g), logits: true})
			}
			if err == nil {
				err = cb.Commit()
			}
			st.HostTime += time.Since(start)
			if err != nil {
				return st, s.drainAll(err, fwd, pending, pendingSteps)
			}
			next = cb
		}
		if err := s.drainAll(nil, fwd, pending, pendingSteps); err != nil {
			return st, s.finish(next, 1, err)
		}
		st.Tokens++
		stop, err := s.take(d, n+g%tokenRing, base+n+g)
		if err == nil && !stop && next != nil {
			if err = d.Constraint.Advance(s.token(n + g%tokenRing)); err == nil && ctx.Err() != nil {
				err = context.Cause(ctx)
			}
		}
		if err != nil || stop || next == nil {
			return st, s.finish(next, 1, err)
		}
		start := time.Now()
		err = s.putAllowed(d)
		var draw gpu.CommandBuffer
		if err == nil {
			draw, err = dev.NewCommandBuffer()
		}
		if err == nil {
			e := enc{k: s.m.k, cb: draw}
			s.pick(&e, gen(g+1))
			err = e.err()
		}
		if err == nil {
			err = draw.Commit()
		}
		st.HostTime += time.Since(start)
		if err != nil {
			return st, s.finish(next, 1, err)
		}
		fwd, pending, pendingSteps = next, draw, 0
	}
}

// drainAll waits for a forward pass (one step) and then the draw after it
// (steps more), either nil, and returns err or else the first error.
func (s *Sequence) drainAll(err error, fwd, draw gpu.CommandBuffer, steps int) error {
	err = s.finish(fwd, 1, err)
	return s.finish(draw, steps, err)
}

// putAllowed writes the sampler's mask for d's next draw: the ids its
// Constraint allows (all, while it has none) below d.Limit.
func (s *Sequence) putAllowed(d *engine.Decode) error {
	sm := &s.samp
	v := s.m.cfg.Vocab
	limit := d.Limit
	if limit == 0 {
		limit = v
	}
	if len(sm.allowed) != (v+63)/64 {
		sm.allowed = make([]uint64, (v+63)/64)
	}
	allowed := sm.allowed
	if !d.Constraint.Allowed(allowed) {
		allowed = nil
	}
	// The mask no longer holds the limit alone.
	sm.maskLimit = 0
	return shaders.WriteSampleAllowed(sm.mask.Buf.Contents(), v, limit, allowed)
}

// feed encodes and commits the steps of the n tokens in slots 0..n-1, the
// last one writing its argmax to next; it returns the last command buffer,
// still in flight, and how many steps it holds. A long run takes the
// chunked prefill, a short one decode steps in command buffers of bounded
// size.
func (s *Sequence) feed(n int, next *shaders.View) (gpu.CommandBuffer, int, error) {
	if n >= prefillMinTokens {
		return s.prefill(0, n, lastLogits, nil, next)
	}
	dev := s.m.k.Device()
	var pending gpu.CommandBuffer
	pendingSteps := 0
	base := s.pos
	per := s.stepsPerBuffer(base, n)
	for i := 0; i < n; {
		cb, err := dev.NewCommandBuffer()
		if err != nil {
			return s.drain(pending, pendingSteps, err)
		}
		j := i
		for ; j < n && j-i < per; j++ {
			if j > i {
				cb.Barrier()
			}
			st := step{pos: base + j, token: s.slot(j)}
			if j == n-1 {
				st.next = *next
			}
			if err := s.encode(cb, st); err != nil {
				return s.drain(pending, pendingSteps, err)
			}
		}
		if err := cb.Commit(); err != nil {
			return s.drain(pending, pendingSteps, err)
		}
		if pending != nil {
			if err := s.wait(pending, pendingSteps); err != nil {
				return s.drain(cb, j-i, err)
			}
		}
		pending, pendingSteps = cb, j-i
		i = j
	}
	return pending, pendingSteps, nil
}

// startSampling readies the sampler's mask (ids from d.Limit on never
// drawn) and the request's state, in buffers the sequence keeps for its
// next requests; no command buffer may be in flight.
func (s *Sequence) startSampling(d *engine.Decode) error {
	v := s.m.cfg.Vocab
	sm := &s.samp
	if sm.state.Buf == nil {
		var err error
		if sm.state, err = s.alloc(shaders.SampleStateBytes(v)); err != nil {
			return err
		}
		if sm.mask, err = s.alloc(shaders.SampleMaskBytes(v)); err != nil {
			return err
		}
	}
	limit := d.Limit
	if limit == 0 {
		limit = v
	}
	if sm.maskLimit != limit {
		if err := shaders.WriteSampleMask(sm.mask.Buf.Contents(), v, limit); err != nil {
			return err
		}
		sm.maskLimit = limit
	}
	if err := shaders.WriteSampleState(sm.state.Buf.Contents(), v, d.Sampling.Params, d.Sampling.Bias, d.Sampling.Prompt); err != nil {
		return err
	}
	if d.Logprobs != nil {
		if sm.records.Buf == nil {
			var err error
			if sm.records, err = s.alloc(tokenRing * shaders.SampleRecordBytes); err != nil {
				return err
			}
		}
		sm.logprobs, sm.top = true, d.TopLogprobs
	}
	s.sampling = true
	return nil
}

// readRecord is the logprobs of the token in slot i, from its record (a
// few hundred bytes: the only thing read back besides the id).
func (s *Sequence) readRecord(i int) sample.Logprobs {
	b := s.record(s.slot(i)).At(0)
	r, _ := shaders.ReadSampleRecord(b.Buf.Contents()[b.Off:]) // the buffer holds whole records
	lp := sample.Logprobs{Logprob: float64(r.Logprob)}
	for j := range min(int(r.Top), shaders.SampleMaxTopLogprobs) {
		lp.Top = append(lp.Top, sample.TokenLogprob{ID: int(r.TopIDs[j]), Logprob: float64(r.TopLogprobs[j])})
	}
	return lp
}

// finish waits for the command buffer still in flight, if any, and returns
// err or else its error.
func (s *Sequence) finish(pending gpu.CommandBuffer, steps int, err error) error {
	if pending == nil {
		return err
	}
	if werr := s.wait(pending, steps); err == nil {
		return werr
	}
	return err
}

// DecodePath says how the model's sequences decode (engine.DecodePath).
func (m *Model) DecodePath() string {
	return "device loop: greedy argmax or the sampler on the GPU feeding the next step, two steps in flight, no logits read back (a reply under a grammar uploads its mask of allowed ids before each draw, the next forward pass running meanwhile)"
}

var _ engine.Decoder = (*Sequence)(nil)
