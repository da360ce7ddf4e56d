package service

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"petal/engine/chattemplate"
	"petal/engine/cpu"
	"petal/engine/sample"
	"petal/internal/prefixdisk"
)

// demoDir is the demo model's folder in the repository.
const demoDir = "../../models/demo"

// logprobTolerance bounds how far a reply token's log probability after a
// restored state may be from an uncached run's: the prefill is split at
// other points, which reorders float sums.
const logprobTolerance = 1e-3

// agentPrompt is a long system prompt and a user message, as an agent
// opens a conversation.
func agentPrompt(question string) []chattemplate.Message {
	var b strings.Builder
	b.WriteString("You are a coding agent. Follow the rules below.\n")
	for i := range 40 {
		b.WriteString("Rule ")
		b.WriteString(strings.Repeat("x", i%7+1))
		b.WriteString(": read the file before editing it, keep changes small, and run the tests.\n")
	}
	return []chattemplate.Message{
		{Role: "system", Content: chattemplate.TextContent(b.String())},
		{Role: "user", Content: chattemplate.TextContent(question)},
	}
}

// demoService opens the demo model on the CPU with the disk tier in dir
// (none when dir is "") and the memory tier as cacheBytes says.
func demoService(t *testing.T, dir string, cacheBytes int64) (*Service, *prefixdisk.Store) {
	t.Helper()
	m, err := cpu.Open(demoDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var store *prefixdisk.Store
	if dir != "" {
		if store, err = prefixdisk.Open(dir, 1<<30, t.Logf); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
	}
	s, err := New(m, demoDir, Options{CacheBytes: cacheBytes, PrefixDisk: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, store
}

type answer struct {
	text string
	sum  Summary
}

func ask(t *testing.T, s *Service, msgs []chattemplate.Message) answer {
	t.Helper()
	zero := 0.0
	r, sum, err := collect(t, s, &Request{Messages: msgs, MaxTokens: 8, Logprobs: true, Sampling: sample.Overrides{Temperature: &zero}})
	if err != nil {
		t.Fatal(err)
	}
	return answer{text: r.Reasoning + "|" + r.Content, sum: sum}
}

// sameAnswer reports how a differs from an uncached run's.
func sameAnswer(t *testing.T, got, want answer) {
	t.Helper()
	if got.text != want.text || len(got.sum.Logprobs) != len(want.sum.Logprobs) {
		t.Fatalf("reply %q (%d tokens), uncached %q (%d)", got.text, len(got.sum.Logprobs), want.text, len(want.sum.Logprobs))
	}
	for i, lp := range got.sum.Logprobs {
		w := want.sum.Logprobs[i]
		if lp.Token.ID != w.Token.ID || math.Abs(lp.Logprob-w.Logprob) > logprobTolerance {
			t.Errorf("token %d: %d at %.6f, uncached %d at %.6f", i, lp.Token.ID, lp.Logprob, w.Token.ID, w.Logprob)
		}
	}
}

// sharedPrefix is the length of the tokens two prompts start with.
func sharedPrefix(t *testing.T, s *Service, a, b []chattemplate.Message) int {
	t.Helper()
	ta, err := s.Tokens(context.Background(), &Request{Messages: a})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Tokens(context.Background(), &Request{Messages: b})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < min(len(ta), len(tb)) && ta[n] == tb[n] {
		n++
	}
	return n
}

// TestDiskTierSurvivesRestart: on the demo model, a conversation with a
// long system prompt, then a new service over the same folder (a restart,
// with an empty memory tier), then a new conversation with the same
// system prompt: the prompt's start comes from disk and the reply equals
// an uncached run's.
func TestDiskTierSurvivesRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	first, second := agentPrompt("List the files."), agentPrompt("Which test fails?")

	s, store := demoService(t, dir, 0)
	ask(t, s, first)
	shared := sharedPrefix(t, s, first, second)
	s.Close()
	store.Close() // writes what is queued, as the server's shutdown does
	if files, _ := store.Usage(); files == 0 {
		t.Fatal("nothing was written to disk")
	}

	s, _ = demoService(t, dir, 0)
	got := ask(t, s, second)
	m := s.Metrics()
	t.Logf("shared prefix %d tokens, %d of %d prompt tokens cached; disk %+v", shared, got.sum.CachedTokens, got.sum.PromptTokens, *m.Disk)
	if got.sum.CachedTokens*10 < shared*9 || got.sum.CachedTokens > shared {
		t.Errorf("%d tokens cached of a shared prefix of %d", got.sum.CachedTokens, shared)
	}
	if got.sum.DiskCachedTokens != got.sum.CachedTokens || got.sum.DiskLoad <= 0 {
		t.Errorf("summary: %d of %d cached tokens from disk in %v", got.sum.DiskCachedTokens, got.sum.CachedTokens, got.sum.DiskLoad)
	}
	if m.CacheDiskHits != 1 || m.CacheMemoryHits != 0 || m.Disk.Hits != 1 || m.Disk.LoadSeconds <= 0 {
		t.Errorf("metrics: memory hits %d, disk hits %d, disk %+v", m.CacheMemoryHits, m.CacheDiskHits, *m.Disk)
	}
	// The restored prefix is in memory now: the same prompt again is a
	// memory hit.
	again := ask(t, s, second)
	if m := s.Metrics(); m.CacheMemoryHits != 1 || again.sum.CachedTokens < got.sum.CachedTokens || again.sum.DiskCachedTokens != 0 {
		t.Errorf("again: %d cached, memory hits %d", again.sum.CachedTokens, m.CacheMemoryHits)
	}

	fresh, _ := demoService(t, "", -1)
	want := ask(t, fresh, second)
	if want.sum.CachedTokens != 0 {
		t.Fatalf("the uncached run reused %d tokens", want.sum.CachedTokens)
	}
	sameAnswer(t, got, want)
	sameAnswer(t, again, want)
}

// TestDiskTierDamagedFiles: after a restart over a folder whose snapshots
// were all bit-flipped, none loads, each is deleted, and the reply equals
// an uncached run's.
func TestDiskTierDamagedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	msgs := agentPrompt("List the files.")
	s, store := demoService(t, dir, -1)
	ask(t, s, msgs)
	s.Close()
	store.Close()
	entries, err := prefixdisk.List(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("%d snapshots: %v", len(entries), err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 1
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	s, store = demoService(t, dir, -1)
	store.Close() // no new snapshots: the folder then holds only what survived
	got := ask(t, s, msgs)
	if got.sum.CachedTokens != 0 {
		t.Errorf("%d tokens came from damaged files", got.sum.CachedTokens)
	}
	// The prompt's prefixes were read and deleted; the snapshot after the
	// reply is no prefix of it and was not opened.
	var prefixes int
	for _, e := range entries {
		if e.Tokens < got.sum.PromptTokens {
			prefixes++
		}
	}
	left, _ := prefixdisk.List(dir)
	for _, e := range left {
		if e.Tokens < got.sum.PromptTokens {
			t.Errorf("damaged prefix kept: %+v", e)
		}
	}
	if st := store.Stats(); prefixes == 0 || st.Rejected != int64(prefixes) || len(left) != len(entries)-prefixes {
		t.Errorf("rejected %d of %d prefixes; %d of %d files left", st.Rejected, prefixes, len(left), len(entries))
	}
	fresh, _ := demoService(t, "", -1)
	sameAnswer(t, got, ask(t, fresh, msgs))
}

func TestLongPromptPoints(t *testing.T) {
	turns := []int{50, SnapshotStride + 10}
	s := &Service{}
	if got := s.withLongPromptPoints(turns, 3*SnapshotStride); !slices.Equal(got, turns) {
		t.Errorf("without a disk tier: points %v", got)
	}
	s.disk = &diskTier{}
	got := s.withLongPromptPoints(turns, 2*SnapshotStride+100)
	if want := []int{50, SnapshotStride, SnapshotStride + 10, 2 * SnapshotStride}; !slices.Equal(got, want) {
		t.Errorf("points %v, want %v", got, want)
	}
	if got := s.withLongPromptPoints(turns, LongPromptTokens); !slices.Equal(got, turns) {
		t.Errorf("short prompt: points %v", got)
	}
}
