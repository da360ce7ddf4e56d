package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"petal/engine/sample"
)

// Job is one Decode that runs in batched steps beside others (StepJobs):
// its prompt fed a piece per step, then one token per step, each picked on
// the host from the step's logits as Run's host loop does. A job belongs to
// one caller at a time; StepJobs hands it over for the step.
type Job struct {
	ctx   context.Context
	seq   Sequence
	d     *Decode
	vocab int
	limit int
	// maxPos is the model's positions limit (0: none).
	maxPos int
	// fed counts the prompt tokens the sequence holds; next is the picked
	// token the next step feeds once the prompt is in (-1: none yet).
	fed    int
	next   int
	splits []int
	logits []float32
	mask   []uint64
	one    [1]int
	st     DecodeStats
	done   bool
	err    error
	// spec drafts with the model's head (speculate_job.go); nil: never.
	spec *jobSpec
}

// NewJob checks d as Run does and returns its job on seq, a sequence of a
// model with vocab logits and maxPositions positions (0: no limit). ctx
// ends the job at the next step with its cause.
func NewJob(ctx context.Context, seq Sequence, vocab, maxPositions int, d *Decode) (*Job, error) {
	if err := d.check(vocab); err != nil {
		return nil, err
	}
	j := &Job{ctx: ctx, seq: seq, d: d, vocab: vocab, limit: d.Limit, maxPos: maxPositions, next: -1, splits: d.Splits,
		logits: make([]float32, vocab)}
	if j.limit == 0 {
		j.limit = vocab
	}
	if d.Constraint != nil {
		j.mask = make([]uint64, (vocab+63)/64)
	}
	j.spec = newJobSpec(j)
	return j, nil
}

// Done reports whether the job has ended, and then how: as Run would have
// returned.
func (j *Job) Done() (bool, DecodeStats, error) { return j.done, j.st, j.err }

// Prefilling reports whether the job still has prompt tokens to feed.
func (j *Job) Prefilling() bool { return !j.done && j.next < 0 }

// PromptLeft is how many prompt tokens the job has yet to feed.
func (j *Job) PromptLeft() int {
	if !j.Prefilling() {
		return 0
	}
	return len(j.d.Prompt) - j.fed
}

// finish ends the job with err (nil: complete).
func (j *Job) finish(err error) {
	j.done, j.err = true, err
}

// row is the job's share of the next step, of at most piece prompt
// tokens, or false when the job has ended or takes no part (piece 0 while
// prefilling).
func (j *Job) row(piece int) (Row, bool) {
	if j.done {
		return Row{}, false
	}
	if j.ctx.Err() != nil {
		j.finish(context.Cause(j.ctx))
		return Row{}, false
	}
	if j.next >= 0 {
		if r, ok := j.spec.row(j); ok || j.done {
			return r, ok
		}
		j.one[0] = j.next
		if !j.fits(1) {
			return Row{}, false
		}
		return Row{Seq: j.seq, Tokens: j.one[:], Out: j.logits}, true
	}
	if piece <= 0 {
		return Row{}, false
	}
	p := j.d.Prompt
	for len(j.splits) > 0 && j.splits[0] <= j.fed {
		j.splits = j.splits[1:]
	}
	cut := len(p)
	if len(j.splits) > 0 && j.splits[0] < cut {
		cut = j.splits[0]
	}
	end := pieceEnd(j.fed, cut, piece)
	if end == j.fed {
		return Row{}, false
	}
	if !j.fits(end - j.fed) {
		return Row{}, false
	}
	r := Row{Seq: j.seq, Tokens: p[j.fed:end]}
	if end == len(p) {
		r.Out = j.logits
	}
	return r, true
}

// fits ends the job when n more tokens would pass the model's positions.
func (j *Job) fits(n int) bool {
	if j.maxPos > 0 && j.seq.Len()+n > j.maxPos {
		j.finish(fmt.Errorf("engine: %d tokens exceed the model's %d positions", j.seq.Len()+n, j.maxPos))
		return false
	}
	return true
}

// took takes the step's result for the job's row r and reports whether
// the job now picks a token: a decode row, or its prompt's last piece.
func (j *Job) took(r Row, d time.Duration) bool {
	if _, onDevice := j.seq.(Decoder); onDevice {
		j.st.LogitsReadBytes += int64(4 * len(r.Out))
	}
	if j.next >= 0 {
		j.st.HostTime += d
		return true
	}
	j.fed += len(r.Tokens)
	if j.fed == len(j.d.Prompt) {
		return true
	}
	if len(j.splits) > 0 && j.fed == j.splits[0] && j.d.AtSplit != nil {
		j.d.AtSplit(j.fed, j.seq)
	}
	return false
}

// pick1 is pickNext guarded against a panic.
func (j *Job) pick1() { j.guarded(func() bool { j.pickNext(); return false }) }

// pickNext picks the next token from the step's logits and hands it to
// Token.
func (j *Job) pickNext() {
	if j.spec.pick(j) {
		return
	}
	id, err := j.pick()
	if err != nil {
		j.finish(err)
		return
	}
	j.emit(id)
}

// emit hands id, picked, to Token and reports whether the job goes on,
// with id the next step's token.
func (j *Job) emit(id int) bool {
	j.st.Tokens++
	stop, err := j.d.Token(id)
	if err != nil || stop || j.st.Tokens == j.d.MaxTokens {
		j.finish(err)
		return false
	}
	if j.d.Constraint != nil {
		if err := j.d.Constraint.Advance(id); err != nil {
			j.finish(err)
			return false
		}
	}
	j.next = id
	return true
}

// pick chooses the next token from the step's logits, as hostDecode does.
func (j *Job) pick() (int, error) {
	d := j.d
	if j.mask != nil && d.Constraint.Allowed(j.mask) {
		MaskLogits(j.logits, j.mask)
	}
	switch {
	case d.Logprobs != nil:
		id, lp, err := d.Picker.(LogprobPicker).NextLogprobs(j.logits, d.TopLogprobs)
		if err != nil {
			return 0, err
		}
		d.Logprobs(lp)
		return id, nil
	case d.Picker == nil:
		return Argmax(j.logits[:j.limit]), nil
	default:
		return d.Picker.Next(j.logits)
	}
}

// Accepter is a Picker told of the tokens a device's sampler drew, so its
// draw counter and penalties follow and it can take over the picks.
type Accepter interface {
	Accept(id int)
}

// CanSolo reports whether the job can go on alone on its sequence's
// device loop (Solo): a Decoder whose device picks as Run would let it
// (greedy, or drawing with the device's sampler, under a grammar's mask
// or not, from the request's first token on), with what is left of its
// prompt a last piece.
func (j *Job) CanSolo() bool {
	d := j.d
	if _, ok := j.seq.(Decoder); j.done || !ok || (d.Picker != nil && d.Sampling == nil) {
		return false
	}
	if d.Sampling != nil {
		// The device's sampler starts at the request's first draw.
		if _, ok := d.Picker.(Accepter); !ok || j.st.Tokens > 0 {
			return false
		}
	}
	if j.next >= 0 {
		return true
	}
	if len(d.Prompt)-j.fed > PrefillPiece {
		return false
	}
	for _, sp := range j.splits {
		if sp > j.fed && sp < len(d.Prompt) {
			return false
		}
	}
	return true
}

// Solo runs the job alone on its sequence's device loop, which picks on
// the device with steps in flight, until the job ends or yield (asked
// before each step is committed) says another job waits: then the job
// holds its last pick unfed and goes on in batched steps. Only when
// CanSolo.
func (j *Job) Solo(yield func() bool) {
	if j.ctx.Err() != nil {
		j.finish(context.Cause(j.ctx))
		return
	}
	j.guarded(func() bool { j.solo(yield); return false })
}

func (j *Job) solo(yield func() bool) {
	dec := j.seq.(Decoder)
	tail := j.d.Prompt[j.fed:]
	if j.next >= 0 {
		j.one[0] = j.next
		tail = j.one[:]
	}
	if !j.fits(len(tail)) {
		return
	}
	d := *j.d
	d.MaxTokens -= j.st.Tokens
	d.Splits, d.AtSplit, d.Yield = nil, nil, yield
	acc, _ := j.d.Picker.(Accepter)
	if d.Sampling == nil {
		d.Picker = nil
	}
	last, ended := -1, false
	d.Token = func(id int) (bool, error) {
		last = id
		if acc != nil {
			acc.Accept(id)
		}
		stop, err := j.d.Token(id)
		ended = stop || err != nil
		return stop, err
	}
	st, err := dec.Decode(j.ctx, tail, &d)
	j.fed = len(j.d.Prompt)
	j.st.Tokens += st.Tokens
	j.st.HostTime += st.HostTime
	j.st.LogitsReadBytes += st.LogitsReadBytes
	switch {
	case err == nil && last < 0:
		j.finish(errors.New("engine: the device loop ended without a token"))
	case err != nil || ended || j.st.Tokens >= j.d.MaxTokens:
		j.finish(err)
	default:
		// The loop yielded: the last token is the next step's, and the
		// grammar has yet to follow it.
		if j.d.Constraint != nil {
			if err := j.d.Constraint.Advance(last); err != nil {
				j.finish(err)
				return
			}
		}
		j.next = last
	}
}

// StepJobs runs one batched step of m over the jobs that have not ended:
// every decoding job feeds its last pick, and prefilling jobs, in the
// order given, feed pieces of their prompts taking at most prefill tokens
// together (a job past the budget waits for a later step; the caller's
// order is its policy). Then each job picks its next token and hands it
// to its Token function; the jobs do this concurrently, so the Token,
// Logprobs and Constraint of different jobs must not share unguarded
// state (AtSplit is called on the caller's goroutine). A job ends when
// its decode would (Done), a step error ending every job in the step; a
// panic in a job's functions ends that job with ErrPanic, one in the
// backend's step every job in it.
func StepJobs(m Model, jobs []*Job, prefill int) StepCount {
	var n StepCount
	rows := make([]Row, 0, len(jobs))
	in := make([]*Job, 0, len(jobs))
	for _, j := range jobs {
		piece := 0
		if j.Prefilling() {
			piece = min(prefill, PrefillPiece)
		}
		r, ok := j.row(piece)
		if !ok {
			continue
		}
		if j.next < 0 {
			prefill -= len(r.Tokens)
			n.Prompt += len(r.Tokens)
		} else {
			n.Decode++
		}
		rows = append(rows, r)
		in = append(in, j)
	}
	n.Rows = len(rows)
	if len(rows) == 0 {
		return n
	}
	start := time.Now()
	err := step(m, rows)
	took := time.Since(start) / time.Duration(len(rows))
	if err != nil {
		err = fmt.Errorf("engine: batched step: %w", err)
		for _, j := range in {
			j.finish(err)
		}
		return n
	}
	// AtSplit forks the sequence: the model's work stays on this
	// goroutine; only the picks, on the host, run side by side.
	picking := in[:0]
	for i, j := range in {
		if j.guarded(func() bool { return j.took(rows[i], took) }) {
			picking = append(picking, j)
		}
	}
	if len(picking) == 1 {
		picking[0].pick1()
		return n
	}
	var wg sync.WaitGroup
	for _, j := range picking {
		wg.Go(j.pick1)
	}
	wg.Wait()
	return n
}

// ErrPanic marks a job ended by a panic in its functions or the backend:
// the job fails, the process and the jobs beside it go on.
var ErrPanic = errors.New("engine: internal error")

// step is Step with a panic turned into an error.
func step(m Model, rows []Row) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the backend's step panicked: %v\n%s", ErrPanic, r, debug.Stack())
		}
	}()
	return Step(m, rows)
}

// guarded runs f for the job, ending the job with ErrPanic if f panics;
// it returns what f returns, false after a panic.
func (j *Job) guarded(f func() bool) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			j.finish(fmt.Errorf("%w: %v\n%s", ErrPanic, r, debug.Stack()))
			ok = false
		}
	}()
	return f()
}

// StepCount is what a StepJobs step ran: its rows (0: no job took part),
// the prompt tokens among them and the rows that decoded a reply's next
// token.
type StepCount struct {
	Rows, Prompt, Decode int
}

// check validates d for a decode over vocab logits.
func (d *Decode) check(vocab int) error {
	if len(d.Prompt) == 0 || d.MaxTokens < 1 || d.Token == nil {
		return errors.New("engine: a decode needs a prompt, at least one token and a Token function")
	}
	if d.Limit < 0 || d.Limit > vocab {
		return fmt.Errorf("engine: pick limit %d outside [0, %d]", d.Limit, vocab)
	}
	if d.Sampling != nil && (d.Picker == nil || d.Sampling.Params.Seed == nil) {
		return errors.New("engine: device sampling needs a seed and a host Picker to fall back on")
	}
	if d.Constraint != nil && d.Picker == nil {
		return errors.New("engine: a constrained decode needs a Picker")
	}
	if d.Logprobs != nil {
		if d.TopLogprobs < 0 || d.TopLogprobs > sample.MaxTopLogprobs {
			return fmt.Errorf("engine: %d top logprobs outside [0, %d]", d.TopLogprobs, sample.MaxTopLogprobs)
		}
		if _, ok := d.Picker.(LogprobPicker); !ok {
			return errors.New("engine: logprobs need a Picker that reports them")
		}
	}
	return CheckTokens(d.Prompt, vocab)
}
