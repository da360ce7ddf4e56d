package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"petal/engine/sample"
)

// runJobs steps jobs with the prefill budget until all have ended and
// returns how many steps it took.
func runJobs(t *testing.T, m Model, jobs []*Job, prefill int) int {
	t.Helper()
	steps := 0
	for {
		if StepJobs(m, jobs, prefill).Rows == 0 {
			return steps
		}
		steps++
		if steps > 10000 {
			t.Fatal("the jobs never end")
		}
	}
}

func TestStepJobsMatchRun(t *testing.T) {
	const vocab = 50
	m := chainModel{vocab}
	prompts := [][]int{make([]int, PrefillPiece+40), {3}, {9, 8, 7, 6, 5}}
	for i := range prompts[0] {
		prompts[0][i] = i % vocab
	}
	maxTokens := []int{6, 9, 3}
	// Alone, through Run.
	var want [][]int
	for i, p := range prompts {
		var got []int
		if _, err := Run(t.Context(), &chain{vocab: vocab}, vocab, &Decode{Prompt: p, MaxTokens: maxTokens[i], Token: collect(&got, -1)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, got)
	}
	// Together, with a prefill budget of 16 prompt tokens a step.
	const budget = 16
	got := make([][]int, len(prompts))
	seqs := make([]*chain, len(prompts))
	var jobs []*Job
	var split []int
	for i, p := range prompts {
		seqs[i] = &chain{vocab: vocab}
		d := &Decode{Prompt: p, MaxTokens: maxTokens[i], Token: collect(&got[i], -1)}
		if i == 0 {
			d.Splits = []int{20}
			d.AtSplit = func(n int, s Sequence) { split = append(split, n, s.Len()) }
		}
		j, err := NewJob(t.Context(), seqs[i], vocab, 0, d)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	// The short prompts first: the order is the caller's policy.
	runJobs(t, m, []*Job{jobs[1], jobs[2], jobs[0]}, budget)
	for i := range prompts {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("job %d: %v together, %v alone", i, got[i], want[i])
		}
		if done, st, err := jobs[i].Done(); !done || err != nil || st.Tokens != maxTokens[i] {
			t.Errorf("job %d: done %v, %d tokens, %v", i, done, st.Tokens, err)
		}
	}
	if !slices.Equal(split, []int{20, 20}) {
		t.Errorf("AtSplit saw (n, Len) %v, want [20 20]", split)
	}
	// Every prompt went in pieces within the budget, the short ones in
	// the first step beside the long one's first piece (in the order
	// given), the long one's cut at its split.
	for i, s := range seqs {
		fed := 0
		for _, r := range s.runs {
			if len(r) > budget {
				t.Errorf("job %d fed %d tokens in one step, over the budget of %d", i, len(r), budget)
			}
			fed += len(r)
		}
		if fed != len(prompts[i])+maxTokens[i]-1 {
			t.Errorf("job %d: %d tokens fed, want %d", i, fed, len(prompts[i])+maxTokens[i]-1)
		}
	}
	if !slices.Equal(seqs[1].runs[0], prompts[1]) || !slices.Equal(seqs[2].runs[0], prompts[2]) {
		t.Errorf("the short prompts' first runs %v and %v, want their prompts", seqs[1].runs[0], seqs[2].runs[0])
	}
	first := budget - len(prompts[1]) - len(prompts[2])
	if len(seqs[0].runs[0]) != first || len(seqs[0].runs[1]) != 20-first || len(seqs[0].runs[2]) != budget {
		t.Errorf("the long prompt's first pieces %d, %d and %d tokens, want %d, %d (cut at the split) and %d",
			len(seqs[0].runs[0]), len(seqs[0].runs[1]), len(seqs[0].runs[2]), first, 20-first, budget)
	}
}

func TestStepJobsEndOneJob(t *testing.T) {
	const vocab = 10
	m := chainModel{vocab}
	ctx, cancel := context.WithCancelCause(t.Context())
	gone := errors.New("client left")
	boom := errors.New("emit failed")
	var a, b, c []int
	ja, _ := NewJob(ctx, &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{1}, MaxTokens: 100, Token: func(id int) (bool, error) {
		a = append(a, id)
		if len(a) == 3 {
			cancel(gone)
		}
		return false, nil
	}})
	jb, _ := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{2}, MaxTokens: 100, Token: func(id int) (bool, error) {
		b = append(b, id)
		if len(b) == 5 {
			return false, boom
		}
		return false, nil
	}})
	// The third runs into the model's 8 positions.
	jc, _ := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 8, &Decode{Prompt: []int{3, 4}, MaxTokens: 100, Token: collect(&c, -1)})
	runJobs(t, m, []*Job{ja, jb, jc}, PrefillPiece)
	if _, _, err := ja.Done(); !errors.Is(err, gone) || len(a) != 3 {
		t.Errorf("cancelled job: %d tokens, %v", len(a), err)
	}
	if _, _, err := jb.Done(); !errors.Is(err, boom) || len(b) != 5 {
		t.Errorf("failing job: %d tokens, %v", len(b), err)
	}
	if _, _, err := jc.Done(); err == nil || len(c) != 7 {
		t.Errorf("job at the positions limit: %d tokens, %v", len(c), err)
	}
	if _, err := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{vocab}, MaxTokens: 1, Token: collect(&a, -1)}); err == nil {
		t.Error("a job with a token outside the vocabulary was taken")
	}
}

// failing is a model whose sequences' Forward fails on its nth call.
type failing struct {
	chainModel
	calls, n int
}

type failingSeq struct {
	*chain
	m *failing
}

func (f failingSeq) Forward(tokens []int, out []float32) error {
	f.m.calls++
	if f.m.calls == f.m.n {
		return errors.New("device lost")
	}
	return f.chain.Forward(tokens, out)
}

func TestStepJobsErrorEndsTheStep(t *testing.T) {
	const vocab = 10
	m := &failing{chainModel: chainModel{vocab}, n: 5}
	var jobs []*Job
	for i := range 2 {
		var got []int
		j, err := NewJob(t.Context(), failingSeq{&chain{vocab: vocab}, m}, vocab, 0, &Decode{Prompt: []int{i}, MaxTokens: 100, Token: collect(&got, -1)})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if steps := runJobs(t, m, jobs, PrefillPiece); steps != 3 {
		t.Errorf("%d steps, want 3 (the third fails)", steps)
	}
	for i, j := range jobs {
		if done, _, err := j.Done(); !done || err == nil {
			t.Errorf("job %d: done %v, err %v", i, done, err)
		}
	}
}

// devChain is a chain with a device loop as the GPU backend's: the step
// after a token is fed before the token is handed over, unless the
// decode ends there (MaxTokens or Yield).
type devChain struct {
	*chain
	decodes int
}

func (c *devChain) Decode(ctx context.Context, tail []int, d *Decode) (DecodeStats, error) {
	c.decodes++
	logits := make([]float32, c.vocab)
	if err := c.Forward(tail, logits); err != nil {
		return DecodeStats{}, err
	}
	var st DecodeStats
	for g := 0; ; g++ {
		id := Argmax(logits)
		more := g+1 < d.MaxTokens && (d.Yield == nil || !d.Yield())
		if more {
			if err := c.Forward([]int{id}, logits); err != nil {
				return st, err
			}
		}
		st.Tokens++
		stop, err := d.Token(id)
		if err != nil || stop || !more {
			return st, err
		}
		if d.Constraint != nil {
			if err := d.Constraint.Advance(id); err != nil {
				return st, err
			}
		}
	}
}

// accepting is a Picker that records the tokens it was told of.
type accepting struct {
	accepted []int
}

func (a *accepting) Next(logits []float32) (int, error) { return Argmax(logits), nil }
func (a *accepting) Accept(id int)                      { a.accepted = append(a.accepted, id) }

func TestJobSoloYieldsToABatch(t *testing.T) {
	const vocab = 50
	m := chainModel{vocab}
	var want []int
	if _, err := Run(t.Context(), &chain{vocab: vocab}, vocab, &Decode{Prompt: []int{5, 6, 7}, MaxTokens: 12, Token: collect(&want, -1)}); err != nil {
		t.Fatal(err)
	}
	var got, other []int
	seq := &devChain{chain: &chain{vocab: vocab}}
	j, err := NewJob(t.Context(), seq, vocab, 0, &Decode{Prompt: []int{5, 6, 7}, MaxTokens: 12, Token: collect(&got, -1)})
	if err != nil {
		t.Fatal(err)
	}
	if !j.CanSolo() {
		t.Fatal("a fresh greedy job on a device cannot go solo")
	}
	// Another request arrives after the fourth token: the job yields.
	j.Solo(func() bool { return len(got) >= 3 })
	if done, _, _ := j.Done(); done || len(got) != 4 || seq.Len() != 3+3 {
		t.Fatalf("after yielding: done %v, %d tokens, %d fed; want 4 tokens with 6 fed", done, len(got), seq.Len())
	}
	o, _ := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{1}, MaxTokens: 3, Token: collect(&other, -1)})
	for range 3 {
		StepJobs(m, []*Job{j, o}, PrefillPiece)
	}
	// Alone again, it goes back to its device loop to the end.
	if !j.CanSolo() {
		t.Fatal("a greedy job alone again cannot go solo")
	}
	j.Solo(func() bool { return false })
	if done, st, err := j.Done(); !done || err != nil || st.Tokens != 12 {
		t.Errorf("done %v, %d tokens, %v", done, st.Tokens, err)
	}
	if !slices.Equal(got, want) || seq.decodes != 2 {
		t.Errorf("tokens %v in %d device loops, want %v in 2", got, seq.decodes, want)
	}

	// A job drawn on the device tells its host picker every token, and
	// cannot go back to the device once the host has drawn.
	pick := &accepting{}
	got = nil
	seed := uint64(1)
	sj, _ := NewJob(t.Context(), &devChain{chain: &chain{vocab: vocab}}, vocab, 0, &Decode{Prompt: []int{2}, MaxTokens: 6, Picker: pick,
		Sampling: &Sampling{Params: sample.Params{Seed: &seed}}, Token: collect(&got, -1)})
	if !sj.CanSolo() {
		t.Fatal("a fresh sampled job cannot go solo")
	}
	sj.Solo(func() bool { return len(got) >= 2 })
	if !slices.Equal(pick.accepted, got) || len(got) != 3 {
		t.Errorf("the picker was told %v of the device's %v", pick.accepted, got)
	}
	if sj.CanSolo() {
		t.Error("a sampled job went back to the device after its first draws")
	}
	// A job under a grammar drawn on the device goes solo; when it
	// yields, the grammar follows every token handed over, the last one
	// included, before the batched steps pick the next.
	pick, got = &accepting{}, nil
	g := &following{}
	cj, _ := NewJob(t.Context(), &devChain{chain: &chain{vocab: vocab}}, vocab, 0, &Decode{Prompt: []int{2}, MaxTokens: 6, Picker: pick,
		Sampling: &Sampling{Params: sample.Params{Seed: &seed}}, Constraint: g, Token: collect(&got, -1)})
	if !cj.CanSolo() {
		t.Fatal("a fresh constrained job drawn on the device cannot go solo")
	}
	cj.Solo(func() bool { return len(got) >= 2 })
	if !slices.Equal(g.followed, got) || len(got) != 3 {
		t.Errorf("the grammar followed %v of %v", g.followed, got)
	}
	// One picked on the host never goes solo.
	for _, d := range []*Decode{
		{Prompt: []int{2}, MaxTokens: 6, Picker: pick, Constraint: allowAll{}, Token: collect(&got, -1)},
		{Prompt: []int{2}, MaxTokens: 6, Picker: pick, Token: collect(&got, -1)},
	} {
		if cj, _ := NewJob(t.Context(), &devChain{chain: &chain{vocab: vocab}}, vocab, 0, d); cj.CanSolo() {
			t.Errorf("%+v can go solo", d)
		}
	}
	// Nor one on a backend without a device loop.
	if cj, _ := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{2}, MaxTokens: 6, Token: collect(&got, -1)}); cj.CanSolo() {
		t.Error("a job on the CPU backend can go solo")
	}
}

// following is a Constraint that allows every id and records what it
// followed.
type following struct{ followed []int }

func (*following) Allowed([]uint64) bool { return false }
func (f *following) Advance(id int) error {
	f.followed = append(f.followed, id)
	return nil
}

// allowAll is a Constraint that allows every id.
type allowAll struct{}

func (allowAll) Allowed([]uint64) bool { return false }
func (allowAll) Advance(int) error     { return nil }

func TestPieceEnd(t *testing.T) {
	for _, c := range []struct{ fed, end, max, want int }{
		{0, 10, 16, 10}, // all of it fits
		{0, 3, 16, 3},   // a stretch shorter than MinPiece goes whole
		{0, 40, 16, 16}, // a full piece, enough left
		{0, 18, 16, 14}, // 16 would leave 2: leave MinPiece
		{0, 6, 4, 6},    // 4 would leave 2, and 2 leaving 4 is short: all 6
		{0, 40, 3, 0},   // under MinPiece left in the budget: wait
		{5, 7, 1, 5},    // a 2-token stretch waits for room for it whole
		{100, 612, 512, 612},
		{100, 614, 512, 610},
	} {
		if got := pieceEnd(c.fed, c.end, c.max); got != c.want {
			t.Errorf("pieceEnd(%d, %d, %d) = %d, want %d", c.fed, c.end, c.max, got, c.want)
		}
	}
}

// panicky is a chain whose Forward panics once armed.
type panicky struct {
	*chain
	armed bool
}

func (p *panicky) Forward(tokens []int, out []float32) error {
	if p.armed {
		panic("a bug in the backend")
	}
	return p.chain.Forward(tokens, out)
}

func TestStepJobsPanics(t *testing.T) {
	const vocab = 10
	m := chainModel{vocab}
	var a, b []int
	// A panic in one job's Token ends that job; the other goes on.
	ja, _ := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{1}, MaxTokens: 5, Token: func(id int) (bool, error) {
		if a = append(a, id); len(a) == 2 {
			panic("a bug in an emit")
		}
		return false, nil
	}})
	jb, _ := NewJob(t.Context(), &chain{vocab: vocab}, vocab, 0, &Decode{Prompt: []int{2}, MaxTokens: 5, Token: collect(&b, -1)})
	runJobs(t, m, []*Job{ja, jb}, PrefillPiece)
	if _, _, err := ja.Done(); !errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), "a bug in an emit") {
		t.Errorf("the panicking job: %v", err)
	}
	if _, st, err := jb.Done(); err != nil || st.Tokens != 5 {
		t.Errorf("the job beside it: %d tokens, %v", st.Tokens, err)
	}
	// A panic in the backend's step ends the jobs in the step.
	p := &panicky{chain: &chain{vocab: vocab}}
	jc, _ := NewJob(t.Context(), p, vocab, 0, &Decode{Prompt: []int{3}, MaxTokens: 5, Token: collect(&b, -1)})
	StepJobs(m, []*Job{jc}, PrefillPiece)
	p.armed = true
	StepJobs(m, []*Job{jc}, PrefillPiece)
	if done, _, err := jc.Done(); !done || !errors.Is(err, ErrPanic) {
		t.Errorf("after the backend panicked: done %v, %v", done, err)
	}
	// Solo and a panic in the device loop.
	pd := &devChain{chain: &chain{vocab: vocab}}
	jd, _ := NewJob(t.Context(), pd, vocab, 0, &Decode{Prompt: []int{3}, MaxTokens: 5, Token: func(int) (bool, error) { panic("in solo") }})
	jd.Solo(func() bool { return false })
	if _, _, err := jd.Done(); !errors.Is(err, ErrPanic) {
		t.Errorf("a panic in solo: %v", err)
	}
}
