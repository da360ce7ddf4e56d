package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"petal/engine/backend"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/engine/spec"
	"petal/internal/service/servicetest"
)

// TestSpeculativeThroughService: a greedy reply on tiny-a with the
// reference's MTP head is the same text with the head drafting at every
// step as without, the drafts counted in the Summary and the Metrics; a
// seeded sampled reply drafted at every step is the same twice.
func TestSpeculativeThroughService(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "tiny-a")
	head, err := os.ReadFile("../../engine/testdata/mtp/tiny-a/model-mtp.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model-mtp.safetensors"), head, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(mode spec.Mode, parallel int) *Service {
		m, err := backend.Open("cpu", dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		s, err := New(m, dir, Options{Parallel: parallel, CacheBytes: -1, Speculate: mode})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	generate := func(s *Service, req *Request) (string, Summary, error) {
		var b strings.Builder
		sum, err := s.Generate(context.Background(), req, func(e reply.Event) error {
			b.WriteString(e.Text)
			return nil
		})
		return b.String(), sum, err
	}
	text := func(s *Service, req *Request) (string, Summary) {
		out, sum, err := generate(s, req)
		if err != nil {
			t.Fatal(err)
		}
		return out, sum
	}
	zero, warm := 0.0, 1.2
	seed := sample.Seed(7)
	prompt := "Once upon a time"
	greedy := &Request{Prompt: &prompt, MaxTokens: 24, Sampling: sample.Overrides{Temperature: &zero}}
	sampled := &Request{Prompt: &prompt, MaxTokens: 24, Sampling: sample.Overrides{Temperature: &warm, Seed: &seed}}
	off, on := open(spec.Off, 1), open(spec.Always, 1)
	want, wantSum := text(off, greedy)
	got, sum := text(on, greedy)
	if got != want {
		t.Errorf("drafting: %q, without: %q", got, want)
	}
	if wantSum.Drafted != 0 || sum.Drafted == 0 || sum.Drafted < sum.CompletionTokens-1-sum.Accepted {
		t.Errorf("drafted %d off, %d on (%d accepted) for %d tokens", wantSum.Drafted, sum.Drafted, sum.Accepted, sum.CompletionTokens)
	}
	if m := on.Metrics(); m.SpecDrafted != int64(sum.Drafted) || m.SpecAccepted != int64(sum.Accepted) {
		t.Errorf("metrics %d drafted %d accepted, the reply %d and %d", m.SpecDrafted, m.SpecAccepted, sum.Drafted, sum.Accepted)
	}
	a, sa := text(on, sampled)
	b, _ := text(on, sampled)
	if a != b || sa.Drafted == 0 {
		t.Errorf("seeded reply drafted %d: %q, then %q", sa.Drafted, a, b)
	}

	// Two replies together in batched steps, each drafting.
	other := "Hello"
	second := &Request{Prompt: &other, MaxTokens: 16, Sampling: sample.Overrides{Temperature: &zero}}
	wantSecond, _ := text(off, second)
	par := open(spec.Always, 2)
	got2 := make([]string, 2)
	sums := make([]Summary, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, req := range []*Request{greedy, second} {
		wg.Go(func() { got2[i], sums[i], errs[i] = generate(par, req) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got2[0] != want || got2[1] != wantSecond || sums[0].Drafted == 0 || sums[1].Drafted == 0 {
		t.Errorf("together, drafting (%d and %d drafts): %q and %q; alone without: %q and %q", sums[0].Drafted, sums[1].Drafted, got2[0], got2[1], want, wantSecond)
	}
}
