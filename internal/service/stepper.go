package service

import (
	"context"
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
// exists while there is work, so an idle service holds none.
type stepper struct {
	model  engine.Model
	vocab  int
	maxPos int
	stats  *stats

	mu      sync.Mutex
	active  bool
	pending []*stepJob
	calls   []func()
	wake    chan struct{} // one buffered signal: work was added
	// perToken is the measured time of a prompt token, an average over
	// the steps that read prompts, which sizes the next steps' pieces.
	perToken time.Duration
}

// stepJob is a job and the channel closed once it has ended.
type stepJob struct {
	job  *engine.Job
	done chan struct{}
}

func newStepper(model engine.Model, st *stats) *stepper {
	cfg := model.Config()
	return &stepper{model: model, vocab: cfg.Vocab, maxPos: cfg.MaxPositions, stats: st, wake: make(chan struct{}, 1)}
}

// do runs f on the stepper's goroutine between steps and returns when it
// has.
func (t *stepper) do(f func()) {
	done := make(chan struct{})
	t.add(func() {
		defer close(done)
		f()
	}, nil)
	<-done
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
		return
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// loop runs calls and steps until nothing is left, then ends.
func (t *stepper) loop() {
	var running []*stepJob
	for {
		t.mu.Lock()
		calls, pending := t.calls, t.pending
		t.calls, t.pending = nil, nil
		if len(calls) == 0 && len(pending) == 0 && len(running) == 0 {
			t.active = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
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
			running[0].job.Solo(t.hasWork)
			running = reap(running)
		case len(running) > 0:
			running = t.step(running)
		}
	}
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
	// Beside another request (decoding, or about to once its own short
	// prompt is in) a step is kept to StepTarget, a prompt read alone to
	// SoloTarget.
	budget := t.piece(SoloTarget, MinSoloPiece)
	if len(jobs) > 1 {
		budget = t.piece(StepTarget, MinSharedPiece)
	}
	start := time.Now()
	n := engine.StepJobs(t.model, jobs, budget)
	took := time.Since(start)
	if n.Rows > 0 {
		t.stats.observeStep(n.Rows, decoding)
		if n.Prompt >= MinSharedPiece {
			t.learn(n.Prompt, took)
		}
	}
	return reap(running)
}

// hasWork reports whether a call or a new job waits for the loop.
func (t *stepper) hasWork() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls)+len(t.pending) > 0
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

// piece is the prompt budget of a step that aims at target: what the
// measured time per prompt token fits into it, at least least tokens and
// at most engine.PrefillPiece; before any measure, firstPiece.
func (t *stepper) piece(target time.Duration, least int) int {
	if t.perToken <= 0 {
		return max(least, firstPiece)
	}
	return max(least, min(engine.PrefillPiece, int(target/t.perToken)))
}

// learn updates the time per prompt token from a step that carried
// prompt tokens: the whole step's time over them (an upper bound when
// replies decoded beside them), averaged with the past.
func (t *stepper) learn(prompt int, took time.Duration) {
	cur := took / time.Duration(prompt)
	if t.perToken <= 0 {
		t.perToken = cur
		return
	}
	t.perToken = (3*t.perToken + cur) / 4
}
