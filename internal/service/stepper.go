package service

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"petal/engine"
)

// How the stepper cuts prompts into the pieces of its steps, by the
// measured time of a prompt token.
const (
	// StepTarget is the time a step that carries prompt pieces beside
	// another request aims at: each reply's next token waits at most about
	// this long for a prompt being read.
	StepTarget = 50 * time.Millisecond
	// MinSharedPiece is the fewest prompt tokens such a step takes, so a
	// long prompt always advances.
	MinSharedPiece = 16
	// SoloTarget is the time a piece of a prompt read alone aims at: a
	// request arriving meanwhile waits for the piece in flight. It is the
	// bound of a Metal command buffer's work on the slowest Mac, so a
	// Mac fast enough takes whole engine.PrefillPiece pieces.
	SoloTarget = 250 * time.Millisecond
	// MinSoloPiece is the fewest tokens of such a piece: below it a GPU
	// reads the experts' weights again for too few tokens.
	MinSoloPiece = 128
	// firstPiece is the prompt budget of a step before any has been
	// measured.
	firstPiece = 64
)

// stepper runs the generations of a service together when more than one
// may run (Options.Parallel): one goroutine owns the model and runs
// batched steps (engine.StepJobs) over every running generation, and the
// model calls a generation makes besides (the prefix cache's forks and
// loads, new sequences, closes) run on it between steps. The goroutine
// exists while there is work, so an idle service holds none. Nothing it
// runs may call do or run: it would wait for itself.
type stepper struct {
	model  engine.Model
	vocab  int
	maxPos int
	stats  *stats

	mu      sync.Mutex
	active  bool
	pending []*stepJob
	calls   []func()

	// The loop's own state. steps counts the batched steps, which take
	// turns at the prompt budget's order; fixed is the measured time of a
	// step's decode rows and perToken that of a prompt token, both
	// averages, which size the next steps' pieces.
	steps           int
	fixed, perToken time.Duration
}

// stepJob is a job and the channel closed once it has ended.
type stepJob struct {
	job  *engine.Job
	done chan struct{}
}

func newStepper(model engine.Model, st *stats) *stepper {
	cfg := model.Config()
	return &stepper{model: model, vocab: cfg.Vocab, maxPos: cfg.MaxPositions, stats: st}
}

// do runs f on the stepper's goroutine between steps and returns when it
// has; a panic in f is raised again on the caller's goroutine, where the
// server's handler recovers it for that request alone.
func (t *stepper) do(f func()) {
	done := make(chan struct{})
	var panicked any
	t.add(func() {
		defer close(done)
		defer func() { panicked = recover() }()
		f()
	}, nil)
	<-done
	if panicked != nil {
		panic(panicked)
	}
}

// run runs d on seq in the stepper's batches and returns as engine.Run
// would.
func (t *stepper) run(ctx context.Context, seq engine.Sequence, d *engine.Decode) (engine.DecodeStats, error) {
	j, err := engine.NewJob(ctx, seq, t.vocab, t.maxPos, d)
	if err != nil {
		return engine.DecodeStats{}, err
	}
	sj := &stepJob{job: j, done: make(chan struct{})}
	t.add(nil, sj)
	<-sj.done
	_, st, err := j.Done()
	return st, err
}

// add queues a call or a job, starting the loop when it is not running.
func (t *stepper) add(call func(), job *stepJob) {
	t.mu.Lock()
	if call != nil {
		t.calls = append(t.calls, call)
	}
	if job != nil {
		t.pending = append(t.pending, job)
	}
	start := !t.active
	t.active = true
	t.mu.Unlock()
	if start {
		go t.loop()
	}
}

// take returns the queued calls and jobs, or ends the loop when there are
// none and no job runs.
func (t *stepper) take(running int) (calls []func(), pending []*stepJob, more bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	calls, pending = t.calls, t.pending
	t.calls, t.pending = nil, nil
	if len(calls) == 0 && len(pending) == 0 && running == 0 {
		t.active = false
		t.stats.batch.Store(0)
		return nil, nil, false
	}
	return calls, pending, true
}

// loop runs calls and steps until nothing is left, then ends.
func (t *stepper) loop() {
	var running []*stepJob
	for {
		calls, pending, more := t.take(len(running))
		if !more {
			return
		}
		for _, f := range calls {
			f()
		}
		running = append(running, pending...)
		switch {
		case len(running) == 1 && running[0].job.CanSolo():
			// Alone, a reply decodes on its device's own loop (on a GPU,
			// picked there with steps in flight, no logits read back)
			// until another request arrives.
			t.stats.batch.Store(1)
			running[0].job.Solo(t.yield)
			running = reap(running)
		case len(running) > 0:
			running = t.step(running)
		}
	}
}

// yield is asked by a lone reply's device loop before each step: it runs
// the calls queued meanwhile (another request's prefix-cache lookup, which
// would otherwise wait for the whole reply) and ends the loop when a new
// job waits to join.
func (t *stepper) yield() bool {
	t.mu.Lock()
	calls := t.calls
	t.calls = nil
	t.mu.Unlock()
	for _, f := range calls {
		f()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending) > 0
}

// step runs one batched step over running and returns the jobs that go on.
func (t *stepper) step(running []*stepJob) []*stepJob {
	jobs := make([]*engine.Job, len(running))
	decoding := 0
	for i, r := range running {
		jobs[i] = r.job
		if !r.job.Prefilling() {
			decoding++
		}
	}
	// The prompt budget goes to the job with the fewest prompt tokens left
	// first, so a short request is not held behind a long prompt, and on
	// every other step in the order the jobs came, so a long prompt is
	// never starved by a stream of shorter ones.
	t.steps++
	if t.steps%2 == 0 {
		jobs = slices.Clone(jobs)
		slices.SortStableFunc(jobs, func(a, b *engine.Job) int { return cmp.Compare(a.PromptLeft(), b.PromptLeft()) })
	}
	// Beside another request (decoding, or about to once its own short
	// prompt is in) a step is kept to StepTarget, a prompt read alone to
	// SoloTarget.
	budget := t.piece(SoloTarget, MinSoloPiece, false)
	if len(jobs) > 1 {
		budget = t.piece(StepTarget, MinSharedPiece, true)
	}
	start := time.Now()
	n := engine.StepJobs(t.model, jobs, budget)
	took := time.Since(start)
	if n.Rows > 0 {
		t.stats.observeStep(n.Rows, n.Decode)
		t.learn(n, took)
	}
	return reap(running)
}

// reap signals the jobs that have ended and returns the others.
func reap(running []*stepJob) []*stepJob {
	left := running[:0]
	for _, r := range running {
		if done, _, _ := r.job.Done(); done {
			close(r.done)
			continue
		}
		left = append(left, r)
	}
	clear(running[len(left):])
	return left
}

// piece is the prompt budget of a step that aims at target: the prompt
// tokens that fit in it, beside decode rows (rows) in what they leave of
// it (when they take it all, as many as cost what they do, so a long
// prompt still moves), at least least and at most engine.PrefillPiece;
// before any measure, firstPiece.
func (t *stepper) piece(target time.Duration, least int, rows bool) int {
	if t.perToken <= 0 {
		return max(least, firstPiece)
	}
	room := target
	if rows {
		room = max(target-t.fixed, t.fixed)
	}
	return max(least, min(engine.PrefillPiece, int(room/t.perToken)))
}

// learn updates the averages from a step: its time with no prompt tokens
// is its decode rows' (fixed); with MinSharedPiece of them or more, what
// is left of it beside the decode rows over them is a prompt token's.
func (t *stepper) learn(n engine.StepCount, took time.Duration) {
	switch {
	case n.Prompt == 0:
		t.fixed = average(t.fixed, took)
	case n.Prompt >= MinSharedPiece:
		rest := took
		if n.Decode > 0 {
			rest = max(took-t.fixed, took/2)
		}
		t.perToken = average(t.perToken, rest/time.Duration(n.Prompt))
	}
}

// average moves a running average a quarter of the way to a new sample.
func average(avg, sample time.Duration) time.Duration {
	if avg <= 0 {
		return sample
	}
	return (3*avg + sample) / 4
}
