package service

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"petal/engine"
	"petal/engine/backend"
	"petal/engine/cpu"
	"petal/engine/grammar"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/service/servicetest"
)

func TestQueueGrantsParallel(t *testing.T) {
	q := newQueue(2, 3)
	var held []*ticket
	for range 3 {
		tk, err := q.join("")
		if err != nil {
			t.Fatal(err)
		}
		if tk.wait(t.Context()) != nil {
			t.Fatal("a ticket within parallel waits")
		}
		held = append(held, tk)
	}
	a, _ := q.join("")
	b, _ := q.join("")
	if _, err := q.join(""); !errors.Is(err, ErrQueueFull) {
		t.Errorf("a third waiter: %v, want ErrQueueFull", err)
	}
	if w, r := q.depth(); w != 2 || r != 3 {
		t.Errorf("depth %d waiting, %d running; want 2 and 3", w, r)
	}
	held[1].leave()
	select {
	case <-a.turn:
	default:
		t.Fatal("the first waiter did not get the freed place")
	}
	select {
	case <-b.turn:
		t.Fatal("the second waiter got a place nobody freed")
	default:
	}
	for _, tk := range []*ticket{held[0], held[2], a, b} {
		tk.leave()
	}
	if w, r := q.depth(); w != 0 || r != 0 {
		t.Errorf("depth %d waiting, %d running after all left", w, r)
	}
}

// TestParallelRunsTogether runs four scripted requests at once: each gets
// its own reply, they share steps, and one cancelled leaves the others.
// The fake clock makes every request reach the stepper while a step
// sleeps, so the batches are the same on every run.
func TestParallelRunsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, m := scripted(t, Options{Parallel: 4}, func(prompt string) string {
			i := strings.LastIndex(prompt, "say ")
			return "</think>\n\n" + strings.Repeat(prompt[i+4:i+5], 40)
		})
		m.SetStepDelay(time.Millisecond)
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		gone := errors.New("client left")
		results := make([]string, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				c := t.Context()
				if i == 2 {
					c = ctx
				}
				var b strings.Builder
				_, errs[i] = s.Generate(c, &Request{Messages: user(fmt.Sprintf("say %c", 'a'+i))}, func(e reply.Event) error {
					b.WriteString(e.Text)
					if i == 2 && b.Len() == 10 {
						cancel(gone)
					}
					return nil
				})
				results[i] = b.String()
			})
		}
		wg.Wait()
		for i := range 4 {
			if i == 2 {
				if !errors.Is(errs[i], gone) || len(results[i]) != 10 {
					t.Errorf("cancelled request: %q, %v", results[i], errs[i])
				}
				continue
			}
			if want := strings.Repeat(string(rune('a'+i)), 40); errs[i] != nil || results[i] != want {
				t.Errorf("request %d: %q, %v; want %q", i, results[i], errs[i], want)
			}
		}
		met := s.Metrics()
		if met.Parallel != 4 || met.Running != 0 || met.Waiting != 0 {
			t.Errorf("parallel %d, running %d, waiting %d after all ended", met.Parallel, met.Running, met.Waiting)
		}
		// Each request runs its prompt, then 39 decode rows: apart from
		// the first steps, four requests share every step.
		if met.Steps == 0 || met.StepRows < 3*met.Steps {
			t.Errorf("%d rows in %d steps: the requests did not share steps", met.StepRows, met.Steps)
		}
		s.Close() // the prefix cache's entries
		if m.Live() != 0 {
			t.Errorf("%d sequences left open", m.Live())
		}
	})
}

// gated wraps a model so that its first two steps wait for the test's
// before(step, rows); its sequences are the model's own.
type gated struct {
	engine.Model
	steps  int
	before func(step, rows int)
}

func (m *gated) Step(rows []engine.Row) error {
	if m.steps < 2 {
		m.before(m.steps, len(rows))
		m.steps++
	}
	return engine.Step(m.Model, rows)
}

// waitFor spins until cond holds: the stepper's state has no channel to
// wait on, and it changes within microseconds of the requests starting.
func waitFor(t *testing.T, what string, cond func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("never: %s", what)
			return
		}
		runtime.Gosched()
	}
}

// TestParallelMatchesAlone runs greedy, seeded, logprob and grammar
// requests on the CPU backend together and each alone: the replies are
// the same token for token.
func TestParallelMatchesAlone(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	zero, warm := 0.0, 0.9
	seed := sample.Seed(7)
	g, err := grammar.Compile([]byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	prompt := "a raw prompt"
	reqs := []*Request{
		{Messages: user("hello"), MaxTokens: 12, Sampling: sample.Overrides{Temperature: &zero}},
		{Messages: user("tell me more"), MaxTokens: 12, Sampling: sample.Overrides{Temperature: &warm, Seed: &seed}},
		{Messages: user("rank"), MaxTokens: 8, Logprobs: true, TopLogprobs: 3, Sampling: sample.Overrides{Temperature: &zero}},
		{Messages: user("json"), MaxTokens: 12, Grammar: g, Sampling: sample.Overrides{Temperature: &zero}},
		{Prompt: &prompt, MaxTokens: 10, Sampling: sample.Overrides{Temperature: &warm, Seed: &seed}},
	}
	type result struct {
		text string
		sum  Summary
		err  error
	}
	run := func(s *Service, req *Request) result {
		var b strings.Builder
		sum, err := s.Generate(context.Background(), req, func(e reply.Event) error {
			b.WriteString(e.Kind.String() + ":" + e.Text + "|")
			return nil
		})
		return result{b.String(), sum, err}
	}
	open := func(parallel int, before func(step, rows int)) *Service {
		m, err := cpu.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		var model engine.Model = m
		if before != nil {
			model = &gated{Model: m, before: before}
		}
		s, err := New(model, dir, Options{Parallel: parallel, CacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	alone := open(1, nil)
	var want []result
	for _, r := range reqs {
		want = append(want, run(alone, r))
	}
	// The first step waits for every request to reach the stepper, the
	// second for every job to be in, so the rest run together.
	var s *Service
	s = open(len(reqs), func(step, rows int) {
		waitFor(t, "every request at the stepper", func() bool {
			s.step.mu.Lock()
			defer s.step.mu.Unlock()
			n := rows + len(s.step.pending)
			if step == 0 {
				n += len(s.step.calls)
			}
			return n == len(reqs)
		})
	})
	got := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { got[i] = run(s, r) })
	}
	wg.Wait()
	for i := range reqs {
		w, g := want[i], got[i]
		if g.err != nil || w.err != nil {
			t.Errorf("request %d: %v together, %v alone", i, g.err, w.err)
			continue
		}
		if g.text != w.text || g.sum.CompletionTokens != w.sum.CompletionTokens || g.sum.Finish != w.sum.Finish {
			t.Errorf("request %d: %q (%d tokens, %s) together, %q (%d, %s) alone", i,
				g.text, g.sum.CompletionTokens, g.sum.Finish, w.text, w.sum.CompletionTokens, w.sum.Finish)
		}
		for k := range min(len(g.sum.Logprobs), len(w.sum.Logprobs)) {
			if g.sum.Logprobs[k].Logprob != w.sum.Logprobs[k].Logprob {
				t.Errorf("request %d token %d: logprob %v together, %v alone", i, k, g.sum.Logprobs[k].Logprob, w.sum.Logprobs[k].Logprob)
			}
		}
	}
	if met := s.Metrics(); met.StepRows < 2*met.Steps {
		t.Errorf("%d rows in %d steps: the requests did not run together", met.StepRows, met.Steps)
	}
}

// TestParallelPanicEndsOneRequest: a panic in one request's emit, which
// runs on the stepper, fails that request and leaves the process and the
// request beside it running.
func TestParallelPanicEndsOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, m := scripted(t, Options{Parallel: 2, CacheBytes: -1}, constant("</think>\n\n"+strings.Repeat("z", 30)))
		m.SetStepDelay(time.Millisecond)
		errs := make([]error, 2)
		texts := make([]string, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				var b strings.Builder
				_, errs[i] = s.Generate(t.Context(), &Request{Messages: user("go")}, func(e reply.Event) error {
					if i == 0 && b.Len() == 5 {
						panic("a bug in an emit")
					}
					b.WriteString(e.Text)
					return nil
				})
				texts[i] = b.String()
			})
		}
		wg.Wait()
		if !errors.Is(errs[0], engine.ErrPanic) {
			t.Errorf("the request whose emit panicked: %v", errs[0])
		}
		if errs[1] != nil || texts[1] != strings.Repeat("z", 30) {
			t.Errorf("the request beside it: %q, %v", texts[1], errs[1])
		}
	})
}

// TestStepperPieces: the prompt budget is what the decode rows leave of
// the target at the measured cost of a prompt token, or as much as the
// rows cost when they take the whole target.
func TestStepperPieces(t *testing.T) {
	var st stats
	sp := newStepper(servicetest.NewModel(100, func([]int) []int { return nil }), &st)
	if got := sp.piece(StepTarget, MinSharedPiece, true); got != firstPiece {
		t.Errorf("before any measure: %d, want %d", got, firstPiece)
	}
	sp.learn(engine.StepCount{Rows: 2, Decode: 2}, 10*time.Millisecond)
	sp.learn(engine.StepCount{Rows: 3, Prompt: 64, Decode: 2}, 42*time.Millisecond)
	if sp.fixed != 10*time.Millisecond || sp.perToken != 500*time.Microsecond {
		t.Fatalf("learned %v a step and %v a token, want 10ms and 500µs", sp.fixed, sp.perToken)
	}
	if got := sp.piece(StepTarget, MinSharedPiece, true); got != 80 {
		t.Errorf("beside decode rows: %d tokens, want (50-10)/0.5 = 80", got)
	}
	if got := sp.piece(SoloTarget, MinSoloPiece, false); got != 500 {
		t.Errorf("alone: %d tokens, want 250/0.5 = 500", got)
	}
	for range 20 {
		sp.learn(engine.StepCount{Rows: 8, Decode: 8}, 80*time.Millisecond)
	}
	if got := sp.piece(StepTarget, MinSharedPiece, true); got < 150 || got > 160 {
		t.Errorf("beside rows that take %v, more than the target: %d tokens, want about as many as cost as much (160)", sp.fixed, got)
	}
}

// TestParallelOnDeviceMatchesAlone runs on the GPU simulator a reply that
// starts alone (on the device's own loop, no logits read back), is joined
// by a second request (the first yields and both go on in batched steps)
// and ends alone again: both replies are the greedy tokens each gets
// alone.
func TestParallelOnDeviceMatchesAlone(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	zero := 0.0
	long, short := "Once upon a time", "Hello"
	reqs := []*Request{
		{Prompt: &long, MaxTokens: 24, Sampling: sample.Overrides{Temperature: &zero}},
		{Prompt: &short, MaxTokens: 6, Sampling: sample.Overrides{Temperature: &zero}},
	}
	open := func(parallel int) *Service {
		m, err := backend.Open("sim", dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		s, err := New(m, dir, Options{Parallel: parallel, CacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	text := func(s *Service, req *Request, after func(events int)) string {
		var b strings.Builder
		events := 0
		if _, err := s.Generate(context.Background(), req, func(e reply.Event) error {
			b.WriteString(e.Text)
			events++
			if after != nil {
				after(events)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	alone := open(1)
	want := []string{text(alone, reqs[0], nil), text(alone, reqs[1], nil)}

	s := open(2)
	got := make([]string, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		got[0] = text(s, reqs[0], func(events int) {
			if events == 4 {
				// The second request comes while the first runs alone;
				// the first's device loop yields to it, and goes on alone
				// once the second, shorter, has ended. (The emit runs on
				// the stepper: it must not wait for the second.)
				wg.Go(func() { got[1] = text(s, reqs[1], nil) })
			}
		})
	})
	wg.Wait()
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("request %d: %q beside the other, %q alone", i, got[i], want[i])
		}
	}
	met := s.Metrics()
	if met.Steps == 0 || met.StepRows <= met.Steps || met.LogitsReadbackBytes == 0 {
		t.Errorf("%d rows in %d steps, %d bytes read back: the requests never shared a batched step", met.StepRows, met.Steps, met.LogitsReadbackBytes)
	}
}
