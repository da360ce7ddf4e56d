package engine

import (
	"context"
	"fmt"
	"time"

	"petal/engine/sample"
	"petal/engine/spec"
)

// DistPicker is a Picker whose distribution speculative sampling reads:
// the CPU sampler. Probabilities is the distribution Next draws from
// (every processor applied but a grammar's mask, which the loop applies to
// the logits first), Accept records a token picked for it.
type DistPicker interface {
	Picker
	Probabilities(logits []float32) ([]float64, error)
	Accept(id int)
	Seed() uint64
}

// The salts of speculative sampling's draws: the draft's, the accept
// test's and the residual's, each keyed by the request's seed and the
// drafted position's index in the reply, so a seeded reply drafted at the
// same steps is the same reply.
const (
	saltDraft    = 0x7370656364726166
	saltAccept   = 0x7370656361636370
	saltResidual = 0x7370656372657364
)

// uniform is a draw in [0, 1) from the stream of seed and counter.
func uniform(seed uint64, counter int) float64 {
	return float64(sample.Draw(seed, uint32(counter))>>11) * 0x1p-53
}

// speculates reports whether d can draft on seq: a Drafter of a model with
// a head, and a greedy pick or a DistPicker without logprobs (which report
// the plain pick's).
func speculates(seq Sequence, d *Decode) (Drafter, bool) {
	dr, ok := seq.(Drafter)
	if !ok {
		return nil, false
	}
	_, dist := d.Picker.(DistPicker)
	on := d.Speculate != spec.Off && d.Logprobs == nil && (d.Picker == nil || dist)
	return dr, dr.SetDrafting(on)
}

// specDecode is hostDecode with drafts: after each pick the head drafts
// the token after it, one Forward over [pick, draft] verifies the draft
// (keeping what a rewind needs) and the draft stands when the model would
// have picked it (greedy), or by the speculative-sampling rule; a rejected
// draft is rewound, its position taking the model's own token. While the
// policy says drafting does not pay, the steps are plain ones. Tokens
// reach Token exactly as hostDecode's do.
func specDecode(ctx context.Context, seq Drafter, vocab int, tail []int, d *Decode) (DecodeStats, error) {
	var st DecodeStats
	p := newPicker(d, vocab)
	logits := make([]float32, vocab)
	draft := make([]float32, vocab)
	verify := make([]float32, 2*vocab)
	if err := seq.Forward(tail, logits); err != nil {
		return st, fmt.Errorf("engine: prefill: %w", err)
	}
	pol := spec.NewPolicy(d.Speculate, d.SpecMemory)
	one := make([]int, 1)
	pair := make([]int, 2)
	// emit hands id to Token and reports whether the decode ends, and
	// with what error.
	emit := func(id int) (bool, error) {
		st.Tokens++
		stop, err := d.Token(id)
		if err != nil || stop || st.Tokens == d.MaxTokens {
			return true, err
		}
		if d.Constraint != nil {
			if err := d.Constraint.Advance(id); err != nil {
				return true, err
			}
		}
		if ctx.Err() != nil {
			return true, context.Cause(ctx)
		}
		return false, nil
	}
	id, err := p.pick(logits)
	if err != nil {
		return st, err
	}
	for {
		if end, err := emit(id); end {
			return st, err
		}
		start := time.Now()
		if !pol.Draft() {
			one[0] = id
			if err := seq.Forward(one, logits); err != nil {
				return st, fmt.Errorf("engine: decoding: %w", err)
			}
			el := time.Since(start)
			st.HostTime += el
			pol.Plain(el)
			if id, err = p.pick(logits); err != nil {
				return st, err
			}
			continue
		}
		if err := seq.Draft(id, draft); err != nil {
			return st, fmt.Errorf("engine: draft: %w", err)
		}
		mask := p.allowed()
		dt, q, err := p.draft(draft, mask, st.Tokens)
		if err != nil {
			return st, err
		}
		pair[0], pair[1] = id, dt
		seq.KeepForRewind()
		if err := seq.Forward(pair, verify); err != nil {
			// The model's last position has room for the pick alone: a
			// refused Forward leaves the sequence as it was, and the head
			// has seen the pick, as a plain step needs.
			one[0] = id
			if err := seq.Forward(one, logits); err != nil {
				return st, fmt.Errorf("engine: decoding: %w", err)
			}
			st.HostTime += time.Since(start)
			if id, err = p.pick(logits); err != nil {
				return st, err
			}
			continue
		}
		v, err := p.verify(verify[:vocab], mask, dt, q, st.Tokens)
		if err != nil {
			return st, err
		}
		el := time.Since(start)
		st.HostTime += el
		st.Drafted++
		pol.Verified(v.Accepted, el)
		if !v.Accepted {
			if err := seq.Rewind(1); err != nil {
				return st, fmt.Errorf("engine: rewind: %w", err)
			}
			id = v.Token
			continue
		}
		st.Accepted++
		if end, err := emit(dt); end {
			return st, err
		}
		if id, err = p.pick(verify[vocab:]); err != nil {
			return st, err
		}
	}
}

// picker picks a decode's tokens on the host as hostDecode does, and
// drafts and verifies with the same distribution.
type picker struct {
	d     *Decode
	limit int
	mask  []uint64
}

// newPicker returns d's picker over vocab logits.
func newPicker(d *Decode, vocab int) *picker {
	p := &picker{d: d, limit: d.Limit}
	if p.limit == 0 {
		p.limit = vocab
	}
	if d.Constraint != nil {
		p.mask = make([]uint64, (vocab+63)/64)
	}
	return p
}

// allowed fills the mask with what the grammar allows next; nil when no
// grammar limits the pick.
func (p *picker) allowed() []uint64 {
	if p.mask != nil && p.d.Constraint.Allowed(p.mask) {
		return p.mask
	}
	return nil
}

// pick picks the next token from logits, recording it with the Picker.
func (p *picker) pick(logits []float32) (int, error) {
	if mask := p.allowed(); mask != nil {
		MaskLogits(logits, mask)
	}
	d := p.d
	switch {
	case d.Logprobs != nil:
		id, lp, err := d.Picker.(LogprobPicker).NextLogprobs(logits, d.TopLogprobs)
		if err != nil {
			return 0, err
		}
		d.Logprobs(lp)
		return id, nil
	case d.Picker == nil:
		return Argmax(logits[:p.limit]), nil
	}
	return d.Picker.Next(logits)
}

// draft picks the draft from the head's logits under mask: its argmax
// when greedy, else a draw from q, its distribution after every processor,
// which it returns.
func (p *picker) draft(logits []float32, mask []uint64, n int) (int, []float64, error) {
	if mask != nil {
		MaskLogits(logits, mask)
	}
	dp, ok := p.d.Picker.(DistPicker)
	if !ok {
		return Argmax(logits[:p.limit]), nil, nil
	}
	q, err := dp.Probabilities(logits)
	if err != nil {
		return 0, nil, err
	}
	return spec.Draw(q, uniform(dp.Seed()^saltDraft, n)), q, nil
}

// verify judges the draft dt against the model's logits at its position:
// greedy, it stands when it is the argmax; sampled, by spec.Sampled. The
// token at the position is recorded with the Picker.
func (p *picker) verify(logits []float32, mask []uint64, dt int, q []float64, n int) (spec.Verdict, error) {
	if mask != nil {
		MaskLogits(logits, mask)
	}
	dp, ok := p.d.Picker.(DistPicker)
	if !ok {
		best := Argmax(logits[:p.limit])
		return spec.Verdict{Accepted: best == dt, Token: best}, nil
	}
	pd, err := dp.Probabilities(logits)
	if err != nil {
		return spec.Verdict{}, err
	}
	seed := dp.Seed()
	v := spec.Sampled(pd, q, dt, uniform(seed^saltAccept, n), uniform(seed^saltResidual, n))
	dp.Accept(v.Token)
	return v, nil
}
