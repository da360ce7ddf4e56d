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
// read back. (A request picked on the host, a reply under a grammar, takes
// engine.Run's host loop over Forward.)
func (s *Sequence) Decode(ctx context.Context, tail []int, d *engine.Decode) (engine.DecodeStats, error) {
	if s.closed {
		return engine.DecodeStats{}, fmt.Errorf("gpumodel: %w", engine.ErrClosed)
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
	first := gen(0)
	pending, pendingSteps, err := s.feed(n, &first)
	if err != nil {
		return st, err
	}
	dev := s.m.k.Device()
	for g := 0; ; g++ {
		// pending writes token g.
		var next gpu.CommandBuffer
		if g+1 < d.MaxTokens {
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
		tok := s.token(n + g%tokenRing)
		var stop bool
		if tok < 0 || tok >= s.m.cfg.Vocab {
			// The sampler found no id it may pick (all masked or NaN).
			err = fmt.Errorf("gpumodel: no token could be picked at position %d", base+n+g)
		} else {
			if d.Logprobs != nil {
				d.Logprobs(s.readRecord(n + g%tokenRing))
			}
			stop, err = d.Token(tok)
		}
		pending, pendingSteps = next, 1
		if err == nil && !stop && next != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil || stop || next == nil {
			return st, s.finish(pending, pendingSteps, err)
		}
	}
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
	for i := 0; i < n; {
		cb, err := dev.NewCommandBuffer()
		if err != nil {
			return s.drain(pending, pendingSteps, err)
		}
		j := i
		for ; j < n && j-i < maxStepsPerCommandBuffer; j++ {
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
	p := &d.Sampling.Params
	sp := shaders.SampleParams{
		Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
		PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty, RepetitionPenalty: p.RepetitionPenalty,
		Seed: *p.Seed,
	}
	if err := shaders.WriteSampleState(sm.state.Buf.Contents(), v, sp, d.Sampling.Prompt); err != nil {
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
	return "device loop: greedy argmax or the sampler on the GPU feeding the next step, two steps in flight, no logits read back (a reply under a grammar reads each step's logits back for the host's mask)"
}

var _ engine.Decoder = (*Sequence)(nil)
