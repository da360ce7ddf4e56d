package cpu

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/reftest"
	"petal/engine/sample"
	"petal/engine/sample/chisq"
	"petal/engine/spec"
)

// withHead copies the checkpoint in dir to a new folder and gives it a
// head: dir's own model-mtp.safetensors if it has one, else a random one
// of its shape.
func withHead(t *testing.T, dir string) *Model {
	t.Helper()
	plain, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := plain.cfg
	o := checkpointtest.Options{
		Hidden: c.Hidden, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		Experts: c.Experts, ExpertIntermediate: c.ExpertIntermediate, SharedIntermediate: c.SharedIntermediate,
		Flat: !strings.HasPrefix(plain.ckpt.Embed.Name, "language_model."), Seed: 7,
	}
	plain.Close()
	out := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "model-mtp.safetensors")); err != nil {
		if err := checkpointtest.WriteMTP(out, o); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// greedyRun decodes n tokens greedily after prompt in mode.
func greedyRun(t *testing.T, m *Model, prompt []int, n int, mode spec.Mode) ([]int, engine.DecodeStats) {
	t.Helper()
	seq, _ := m.NewSequence()
	defer seq.Close()
	var out []int
	st, err := engine.Run(context.Background(), seq, m.cfg.Vocab, &engine.Decode{
		Prompt: prompt, MaxTokens: n, Speculate: mode,
		Token: func(id int) (bool, error) { out = append(out, id); return false, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

// TestSpeculativeGreedyMatches: greedy decoding with a draft at every step
// (and with the policy) gives token for token the reply without drafts, on
// every fixture (tiny-a with the reference's head, the others with random
// heads, whose drafts nearly all fail and are rewound) and the demo.
func TestSpeculativeGreedyMatches(t *testing.T) {
	refs, err := reftest.All()
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]*Model{"demo": withHead(t, demoDir)}
	prompts := map[string][][]int{"demo": {{6112, 100, 200, 300, 400, 6113}, {17}}}
	for _, ref := range refs {
		models[ref.Name()] = withHead(t, ref.Dir)
		for _, g := range ref.Greedy {
			prompts[ref.Name()] = append(prompts[ref.Name()], g.Prompt)
		}
	}
	mtpFix, tokens, _ := openMTPFixture(t)
	models["tiny-a+reference head"] = mtpFix
	prompts["tiny-a+reference head"] = [][]int{tokens[:5], tokens[:30]}
	const n = 40
	for name, m := range models {
		for _, p := range prompts[name] {
			want, _ := greedyRun(t, m, p, n, spec.Off)
			for _, mode := range []spec.Mode{spec.Always, spec.Auto} {
				got, st := greedyRun(t, m, p, n, mode)
				if !slices.Equal(got, want) {
					t.Errorf("%s, %d-token prompt, speculative %v:\n got %v\nwant %v", name, len(p), mode, got, want)
				}
				if mode == spec.Always && st.Drafted == 0 {
					t.Errorf("%s: no drafts with speculative on", name)
				}
				t.Logf("%s, %d-token prompt, %v: %d drafts, %d accepted", name, len(p), mode, st.Drafted, st.Accepted)
			}
		}
	}
}

// TestSpeculativeSamplingIsExact: with a draft at every step, the token at
// a drafted position is distributed exactly as the model's sampler would
// draw it (temperature, top-p, min-p, repetition and presence penalties
// and a logit bias applied): a chi-square test over seeded replies of the
// second token, given the most frequent first, against the sampler's
// probabilities; the same counts are refused against the head's own
// distribution, so the test can fail. The same seed gives the same reply.
func TestSpeculativeSamplingIsExact(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	v := m.cfg.Vocab
	prompt := tokens[:6]
	temp := 1.6
	params := sample.Params{Temperature: temp, TopP: 0.97, MinP: 0.002, RepetitionPenalty: 1.3, PresencePenalty: 0.4}
	bias := sample.LogitBias{tokens[7]: 3, tokens[8]: -2}
	newSampler := func(seed uint64) *sample.Sampler {
		p := params
		p.Seed = &seed
		s, err := sample.New(p, sample.Vocab{Size: v}, prompt)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetLogitBias(bias); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const draws = 2500
	pairs := make([][2]int, draws)
	drafted, accepted := 0, 0
	run := func(seed uint64) ([2]int, engine.DecodeStats) {
		seq, _ := m.NewSequence()
		defer seq.Close()
		var out []int
		st, err := engine.Run(context.Background(), seq, v, &engine.Decode{
			Prompt: prompt, MaxTokens: 2, Speculate: spec.Always, Picker: newSampler(seed),
			Token: func(id int) (bool, error) { out = append(out, id); return false, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		return [2]int{out[0], out[1]}, st
	}
	firsts := make([]int, v)
	for i := range pairs {
		var st engine.DecodeStats
		pairs[i], st = run(uint64(i))
		drafted += st.Drafted
		accepted += st.Accepted
		firsts[pairs[i][0]]++
	}
	if again, _ := run(11); again != pairs[11] {
		t.Errorf("seed 11: %v, then %v", pairs[11], again)
	}
	first := 0
	for id, c := range firsts {
		if c > firsts[first] {
			first = id
		}
	}
	counts := make([]int, v)
	n := 0
	for _, p := range pairs {
		if p[0] == first {
			counts[p[1]]++
			n++
		}
	}
	// The exact distribution of the second token: the sampler's, after
	// the first was drawn, over the model's logits after prompt+first.
	s := newSampler(0)
	s.Accept(first)
	seq, _ := m.NewSequence()
	defer seq.Close()
	logits := make([]float32, v)
	if err := seq.Forward(append(slices.Clone(prompt), first), logits); err != nil {
		t.Fatal(err)
	}
	want, err := s.Probabilities(logits)
	if err != nil {
		t.Fatal(err)
	}
	chi, df := chisq.Test(counts, want, n)
	t.Logf("%d replies, %d with first token %d; %d drafts, %d accepted; chi-square %.1f (df %d, limit %.1f)", draws, n, first, drafted, accepted, chi, df, chisq.Limit(df))
	if chi > chisq.Limit(df) {
		t.Errorf("second token's counts refuse the model's distribution: chi-square %.1f, df %d", chi, df)
	}
	if accepted == 0 || accepted == drafted {
		t.Errorf("%d of %d drafts accepted: the test does not see both outcomes", accepted, drafted)
	}
	// The head's distribution at that position, which a rule that always
	// accepted would follow.
	sq, _ := m.NewSequence()
	defer sq.Close()
	d := sq.(*Sequence)
	d.SetDrafting(true)
	if err := d.Forward(prompt, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Draft(first, logits); err != nil {
		t.Fatal(err)
	}
	q, err := newSamplerAfter(newSampler(0), first).Probabilities(logits)
	if err != nil {
		t.Fatal(err)
	}
	if chiQ, dfQ := chisq.Test(counts, q, n); chiQ <= chisq.Limit(dfQ) {
		t.Errorf("the counts also pass against the head's distribution (chi-square %.1f, df %d): the test cannot tell", chiQ, dfQ)
	}
}

func newSamplerAfter(s *sample.Sampler, id int) *sample.Sampler {
	s.Accept(id)
	return s
}

// TestSpeculativeJobsMatch: jobs that draft, stepped together with
// engine.StepJobs (verify rows of two tokens beside prompt pieces and
// other jobs' rows), give each the greedy reply it gets alone without
// drafts.
func TestSpeculativeJobsMatch(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	v := m.cfg.Vocab
	prompts := [][]int{tokens[:5], tokens[3:30], tokens[10:12]}
	const n = 30
	outs := make([][]int, len(prompts))
	jobs := make([]*engine.Job, len(prompts))
	for i, p := range prompts {
		seq, _ := m.NewSequence()
		defer seq.Close()
		j, err := engine.NewJob(context.Background(), seq, v, 0, &engine.Decode{
			Prompt: p, MaxTokens: n, Speculate: spec.Always,
			Token: func(id int) (bool, error) { outs[i] = append(outs[i], id); return false, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = j
	}
	for steps := 0; ; steps++ {
		if steps > 10*n {
			t.Fatal("the jobs do not end")
		}
		if engine.StepJobs(m, jobs, 8).Rows == 0 {
			break
		}
	}
	for i, j := range jobs {
		_, st, err := j.Done()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := greedyRun(t, m, prompts[i], n, spec.Off)
		if !slices.Equal(outs[i], want) || st.Drafted == 0 {
			t.Errorf("job %d (%d drafts, %d accepted):\n got %v\nwant %v", i, st.Drafted, st.Accepted, outs[i], want)
		}
	}
}

// TestSpeculativeAtTheLastPosition: at the model's last positions, where
// a verify step of two tokens does not fit, the decode takes plain steps
// and gives the reply without drafts, as far as it goes.
func TestSpeculativeAtTheLastPosition(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	m.cfg.MaxPositions = 12
	for _, n := range []int{3, 4} {
		prompt := tokens[:12-n+1]
		run := func(mode spec.Mode) ([]int, error) {
			seq, _ := m.NewSequence()
			defer seq.Close()
			var out []int
			_, err := engine.Run(context.Background(), seq, m.cfg.Vocab, &engine.Decode{
				Prompt: prompt, MaxTokens: n, Speculate: mode,
				Token: func(id int) (bool, error) { out = append(out, id); return false, nil },
			})
			return out, err
		}
		want, errOff := run(spec.Off)
		got, errOn := run(spec.Always)
		if !slices.Equal(got, want) || (errOn == nil) != (errOff == nil) {
			t.Errorf("%d tokens to the end: drafting %v (%v), without %v (%v)", n, got, errOn, want, errOff)
		}
	}
}

// TestSpeculativeJobAtTheLastPosition: a job in batched steps near the
// model's last position takes plain steps where a two-token verify row
// does not fit, as the host loop does, instead of ending with an error.
func TestSpeculativeJobAtTheLastPosition(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	const maxPos = 12
	for _, n := range []int{3, 4} {
		prompt := tokens[:maxPos-n+1]
		run := func(mode spec.Mode) ([]int, error) {
			seq, _ := m.NewSequence()
			defer seq.Close()
			var out []int
			j, err := engine.NewJob(context.Background(), seq, m.cfg.Vocab, maxPos, &engine.Decode{
				Prompt: prompt, MaxTokens: n, Speculate: mode,
				Token: func(id int) (bool, error) { out = append(out, id); return false, nil },
			})
			if err != nil {
				return nil, err
			}
			for steps := 0; engine.StepJobs(m, []*engine.Job{j}, 8).Rows > 0; steps++ {
				if steps > 10*n {
					t.Fatal("the job does not end")
				}
			}
			_, _, err = j.Done()
			return out, err
		}
		want, errOff := run(spec.Off)
		got, errOn := run(spec.Always)
		if !slices.Equal(got, want) || (errOn == nil) != (errOff == nil) {
			t.Errorf("%d tokens to the end: drafting %v (%v), without %v (%v)", n, got, errOn, want, errOff)
		}
	}
}
