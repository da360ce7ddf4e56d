package engine

import (
	"fmt"
	"time"

	"petal/engine/spec"
)

// jobSpec is a Job's speculative decoding (specDecode's, a step at a
// time): in a step where the policy drafts, the job's row is [pick, draft]
// with logits for both, and its pick verifies the draft.
type jobSpec struct {
	seq    Drafter
	pol    *spec.Policy
	p      picker
	draft  []float32
	verify []float32
	pair   [2]int
	q      []float64 // the draft's distribution (nil when greedy)
	mask   []uint64  // the grammar's mask at the drafted position
	// drafted reports whether the job's row in the step in flight holds
	// a draft; start is when the row was made.
	drafted bool
	start   time.Time
}

// newJobSpec returns j's speculative decoding, nil when j does not draft
// (the sequence has no head, or d does not ask or allow it). It turns the
// head on before the prompt, so that it sees all of it.
func newJobSpec(j *Job) *jobSpec {
	dr, ok := speculates(j.seq, j.d)
	if !ok {
		return nil
	}
	return &jobSpec{
		seq: dr, pol: spec.NewPolicy(j.d.Speculate, j.d.SpecMemory),
		p:     picker{d: j.d, limit: j.limit, mask: j.mask},
		draft: make([]float32, j.vocab), verify: make([]float32, 2*j.vocab),
	}
}

// row is the job's decode row when it drafts in this step: the head's
// draft after j.next, in a row that keeps what a rewind needs.
func (s *jobSpec) row(j *Job) (Row, bool) {
	if s == nil {
		return Row{}, false
	}
	s.start, s.drafted = time.Now(), false
	// At the model's last position the two-token row does not fit: a plain
	// step (whose own check ends the job if even one does not).
	if !s.pol.Draft() || (j.maxPos > 0 && j.seq.Len()+2 > j.maxPos) {
		return Row{}, false
	}
	if err := s.seq.Draft(j.next, s.draft); err != nil {
		j.finish(fmt.Errorf("engine: draft: %w", err))
		return Row{}, false
	}
	s.mask = s.p.allowed()
	dt, q, err := s.p.draft(s.draft, s.mask, j.st.Tokens)
	if err != nil {
		j.finish(err)
		return Row{}, false
	}
	s.q, s.drafted = q, true
	s.pair = [2]int{j.next, dt}
	s.seq.KeepForRewind()
	return Row{Seq: j.seq, Tokens: s.pair[:], Out: s.verify}, true
}

// pick takes the step's result for the job and reports whether it did: a
// verify step's, whose tokens (the drafted position's, and the next when
// the draft stood) it hands to Token; after a plain step it only times it.
func (s *jobSpec) pick(j *Job) bool {
	if s == nil {
		return false
	}
	el := time.Since(s.start)
	if !s.drafted {
		s.pol.Plain(el)
		return false
	}
	s.drafted = false
	v, err := s.p.verify(s.verify[:j.vocab], s.mask, s.pair[1], s.q, j.st.Tokens)
	if err != nil {
		j.finish(err)
		return true
	}
	j.st.Drafted++
	s.pol.Verified(v.Accepted, el)
	if !v.Accepted {
		if err := s.seq.Rewind(1); err != nil {
			j.finish(fmt.Errorf("engine: rewind: %w", err))
			return true
		}
		j.emit(v.Token)
		return true
	}
	j.st.Accepted++
	if !j.emit(v.Token) {
		return true
	}
	id, err := s.p.pick(s.verify[j.vocab:])
	if err != nil {
		j.finish(err)
		return true
	}
	j.emit(id)
	return true
}
