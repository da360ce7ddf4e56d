package service

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"petal/engine/chattemplate"
	"petal/engine/cpu"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/service/servicetest"
)

// scripted returns a service over a scripted model whose reply to a
// prompt is reply(prompt text).
func scripted(t testing.TB, opts Options, reply func(prompt string) string) (*Service, *servicetest.Model) {
	t.Helper()
	dir, tok := servicetest.Folder(t)
	m := servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, reply))
	s, err := New(m, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, m
}

func constant(text string) func(string) string { return func(string) string { return text } }

func user(text string) []chattemplate.Message {
	return []chattemplate.Message{{Role: "user", Content: chattemplate.TextContent(text)}}
}

// collect runs a request and folds its events.
func collect(t *testing.T, s *Service, req *Request) (reply.Result, Summary, error) {
	t.Helper()
	var r reply.Result
	sum, err := s.Generate(context.Background(), req, func(e reply.Event) error {
		r.Add(e)
		return nil
	})
	return r, sum, err
}

func TestReasoningAndContent(t *testing.T) {
	s, _ := scripted(t, Options{}, constant("Let me think.\n</think>\n\nHello there!"))
	r, sum, err := collect(t, s, &Request{Messages: user("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reasoning != "Let me think." || r.Content != "Hello there!" || len(r.ToolCalls) != 0 {
		t.Errorf("got %+v", r)
	}
	want := len(s.tok.Encode("Let me think.\n</think>\n\nHello there!"))
	if sum.Finish != FinishStop || sum.CompletionTokens != want {
		t.Errorf("summary %+v, want stop after %d tokens", sum, want)
	}
	prompt, err := s.Tokens(context.Background(), &Request{Messages: user("hi")})
	if err != nil || sum.PromptTokens != len(prompt) {
		t.Errorf("prompt tokens %d, Tokens gives %d (%v)", sum.PromptTokens, len(prompt), err)
	}
}

func TestThinkingOff(t *testing.T) {
	var seen string
	s, _ := scripted(t, Options{}, func(p string) string { seen = p; return "Plain answer." })
	kw := map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
	r, _, err := collect(t, s, &Request{Messages: user("hi"), Kwargs: kw})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "Plain answer." || r.Reasoning != "" {
		t.Errorf("got %+v", r)
	}
	if !strings.HasSuffix(seen, "<think>\n\n</think>\n\n") {
		t.Errorf("prompt does not end with an empty think block: %q", seen)
	}
}

const weatherTool = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}]`

func TestToolCall(t *testing.T) {
	s, _ := scripted(t, Options{}, constant("Need weather.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"))
	var tools []chattemplate.Tool
	if err := json.Unmarshal([]byte(weatherTool), &tools); err != nil {
		t.Fatal(err)
	}
	r, sum, err := collect(t, s, &Request{Messages: user("weather?"), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "get_weather" || r.ToolCalls[0].Arguments != `{"city":"Paris","days":3}` {
		t.Fatalf("calls %+v", r.ToolCalls)
	}
	if sum.Finish != FinishToolCalls || r.Content != "" || r.Reasoning != "Need weather." {
		t.Errorf("finish %q, result %+v", sum.Finish, r)
	}
}

func TestStopAndLength(t *testing.T) {
	s, _ := scripted(t, Options{}, constant("</think>\n\nalpha beta STOP gamma"))
	r, sum, err := collect(t, s, &Request{Messages: user("x"), Stop: []string{"STOP"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "alpha beta" || sum.Finish != FinishStop || sum.StopSequence != "STOP" {
		t.Errorf("stop: %q %q at %q", r.Content, sum.Finish, sum.StopSequence)
	}
	r, sum, err = collect(t, s, &Request{Messages: user("x"), MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if sum.StopSequence != "" {
		t.Errorf("a reply cut by its length names stop string %q", sum.StopSequence)
	}
	if sum.Finish != FinishLength || sum.CompletionTokens != 12 || r.Content != "alpha bet" {
		t.Errorf("length: %q after %d tokens, finish %q", r.Content, sum.CompletionTokens, sum.Finish)
	}
}

func TestRawPrompt(t *testing.T) {
	s, _ := scripted(t, Options{}, func(p string) string { return "[" + p + "]" })
	prompt := "once upon"
	r, sum, err := collect(t, s, &Request{Prompt: &prompt})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "[once upon]" || sum.PromptTokens != len(prompt) {
		t.Errorf("got %q, %d prompt tokens", r.Content, sum.PromptTokens)
	}
}

func TestBadRequests(t *testing.T) {
	s, _ := scripted(t, Options{ContextLength: 64}, constant("x"))
	bad := -1.0
	long := strings.Repeat("word ", 40)
	cases := map[string]*Request{
		"no messages":     {},
		"template raises": {Messages: []chattemplate.Message{{Role: "assistant", Content: chattemplate.TextContent("x")}}},
		"temperature":     {Messages: user("x"), Sampling: sample.Overrides{Temperature: &bad}},
		"max tokens":      {Messages: user("x"), MaxTokens: -3},
		"stop too long":   {Messages: user("x"), Stop: []string{strings.Repeat("s", 600)}},
		"context":         {Messages: user(long)},
	}
	for name, req := range cases {
		_, _, err := collect(t, s, req)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: error %v is not ErrBadRequest", name, err)
		}
	}
	_, _, err := collect(t, s, &Request{Messages: user(long)})
	var ce *ContextError
	if !errors.As(err, &ce) || ce.ContextLength != 64 || ce.PromptTokens <= 64 {
		t.Fatalf("over-long prompt: %v", err)
	}
	if !strings.Contains(err.Error(), "64") {
		t.Errorf("message %q does not name the context length", err)
	}
}

func TestDeveloperRoleBecomesSystem(t *testing.T) {
	var seen string
	s, _ := scripted(t, Options{}, func(p string) string { seen = p; return "ok" })
	msgs := []chattemplate.Message{{Role: "developer", Content: chattemplate.TextContent("Be brief.")}, user("hi")[0]}
	if _, _, err := collect(t, s, &Request{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(seen, "<|im_start|>system\nBe brief.<|im_end|>") {
		t.Errorf("prompt %q", seen)
	}
}

func TestPrefixCacheAcrossTurns(t *testing.T) {
	s, m := scripted(t, Options{}, constant("Thinking.</think>\n\nAnswer one."))
	first := &Request{Messages: user("question one")}
	_, sum1, err := collect(t, s, first)
	if err != nil {
		t.Fatal(err)
	}
	if sum1.CachedTokens != 0 {
		t.Errorf("first request used %d cached tokens", sum1.CachedTokens)
	}
	second := &Request{Messages: append(user("question one"),
		chattemplate.Message{Role: "assistant", Content: chattemplate.TextContent("Answer one.")},
		user("question two")[0])}
	before := m.Forwarded()
	r, sum2, err := collect(t, s, second)
	if err != nil {
		t.Fatal(err)
	}
	// The first prompt up to its assistant opener is shared.
	shared := len(s.tok.Encode("<|im_start|>user\nquestion one<|im_end|>\n"))
	if sum2.CachedTokens != shared {
		t.Errorf("second request reused %d tokens, want %d", sum2.CachedTokens, shared)
	}
	// Every generated token runs, the last one too, as an end token follows.
	if ran := m.Forwarded() - before; ran != int64(sum2.PromptTokens-shared+sum2.CompletionTokens) {
		t.Errorf("model ran %d tokens for %d prompt (%d cached) and %d generated", ran, sum2.PromptTokens, shared, sum2.CompletionTokens)
	}
	if r.Content != "Answer one." {
		t.Errorf("content %q", r.Content)
	}
	if m.Live() != int64(s.Metrics().CacheEntries) {
		t.Errorf("%d live sequences, %d cached", m.Live(), s.Metrics().CacheEntries)
	}
}

// TestPrefixCacheSharesSystemPrompt: a new conversation behind the same
// system prompt (an agent's every new session) reads it from the cache.
func TestPrefixCacheSharesSystemPrompt(t *testing.T) {
	s, m := scripted(t, Options{}, constant("Thinking.</think>\n\nDone."))
	prompt := strings.Repeat("You are a careful coding agent. ", 8) + "Be brief."
	system := chattemplate.Message{Role: "system", Content: chattemplate.TextContent(prompt)}
	ask := func(question string) Summary {
		t.Helper()
		_, sum, err := collect(t, s, &Request{Messages: []chattemplate.Message{system, user(question)[0]}})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if sum := ask("first task"); sum.CachedTokens != 0 {
		t.Errorf("first request used %d cached tokens", sum.CachedTokens)
	}
	before := m.Forwarded()
	sum := ask("a different task")
	shared := len(s.tok.Encode("<|im_start|>system\n" + prompt + "<|im_end|>\n"))
	if sum.CachedTokens != shared {
		t.Errorf("second conversation reused %d tokens, want the system prompt's %d", sum.CachedTokens, shared)
	}
	if ran := m.Forwarded() - before; ran != int64(sum.PromptTokens-shared+sum.CompletionTokens) {
		t.Errorf("model ran %d tokens for %d prompt (%d cached) and %d generated", ran, sum.PromptTokens, shared, sum.CompletionTokens)
	}
}

// TestPrefixCacheMatchesFresh runs a two-turn chat on the CPU backend with
// and without the cache: greedy replies must be identical.
func TestPrefixCacheMatchesFresh(t *testing.T) {
	run := func(cacheBytes int64) ([]string, []int) {
		dir := servicetest.FixtureFolder(t, "tiny-a")
		m, err := cpu.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s, err := New(m, dir, Options{CacheBytes: cacheBytes})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		zero := 0.0
		msgs := user("hello")
		var texts []string
		var cached []int
		for turn := range 3 {
			var b strings.Builder
			sum, err := s.Generate(context.Background(), &Request{Messages: msgs, MaxTokens: 6, Sampling: sample.Overrides{Temperature: &zero}},
				func(e reply.Event) error { b.WriteString(e.Kind.String() + ":" + e.Text + "|"); return nil })
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, b.String())
			cached = append(cached, sum.CachedTokens)
			msgs = append(msgs, chattemplate.Message{Role: "assistant", Content: chattemplate.TextContent("reply " + string(rune('a'+turn)))},
				user("next")[0])
		}
		return texts, cached
	}
	withCache, cached := run(0)
	fresh, none := run(-1)
	for i := range withCache {
		if withCache[i] != fresh[i] {
			t.Errorf("turn %d: cached %q, fresh %q", i, withCache[i], fresh[i])
		}
	}
	if cached[1] == 0 || cached[2] <= cached[1] || none[1] != 0 {
		t.Errorf("cached tokens per turn %v (cache off: %v)", cached, none)
	}
}

func TestPrefixCacheEvicts(t *testing.T) {
	c := newPrefixCache(100, 3)
	m := servicetest.NewModel(100, func([]int) []int { return nil })
	put := func(tokens ...int) {
		seq, _ := m.NewSequence()
		if err := seq.Forward(tokens, nil); err != nil {
			t.Fatal(err)
		}
		if !c.put(tokens, seq) {
			seq.Close()
		}
	}
	put(1, 2)
	put(1, 2, 3)
	put(1, 2) // a duplicate is refused
	if n, _ := c.usage(); n != 2 || m.Live() != 2 {
		t.Fatalf("%d entries, %d live", n, m.Live())
	}
	seq, n, err := c.get([]int{1, 2, 3, 4})
	if err != nil || n != 3 {
		t.Fatalf("longest prefix %d (%v), want 3", n, err)
	}
	seq.Close()
	if seq, _, _ := c.get([]int{1, 2, 9}); seq != nil { // touches [1 2]
		seq.Close()
	}
	put(7)
	put(8) // over 3 entries: the least recently used, [1 2 3], goes
	seq, n, _ = c.get([]int{1, 2, 3, 4})
	if n != 2 {
		t.Errorf("after eviction the longest prefix is %d, want 2", n)
	}
	seq.Close()
	c.clear()
	if m.Live() != 0 {
		t.Errorf("%d live sequences after clear", m.Live())
	}
}

func TestQueueFullAndCancel(t *testing.T) {
	s, m := scripted(t, Options{QueueLimit: 1}, constant("</think>\n\n"+strings.Repeat("z", 200)))
	m.SetStepDelay(2 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var wg sync.WaitGroup
	var runErr error
	var firstOnce sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, runErr = s.Generate(ctx, &Request{Messages: user("a")}, func(reply.Event) error {
			firstOnce.Do(func() { close(started) })
			return nil
		})
	}()
	<-started
	waitCtx, waitCancel := context.WithCancel(context.Background())
	waitErr := make(chan error, 1)
	go func() {
		_, err := s.Generate(waitCtx, &Request{Messages: user("b")}, func(reply.Event) error { return nil })
		waitErr <- err
	}()
	timeout := time.After(5 * time.Second)
	for changed := s.QueueChanged(); s.Metrics().Waiting != 1; changed = s.QueueChanged() {
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the second request never queued: %+v", s.Metrics())
		}
	}
	if _, _, err := collect(t, s, &Request{Messages: user("c")}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third request: %v, want ErrQueueFull", err)
	}
	waitCancel()
	if err := <-waitErr; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	if s.Metrics().Waiting != 0 {
		t.Errorf("cancelled waiter still queued")
	}
	cancel()
	wg.Wait()
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("cancelled generation: %v", runErr)
	}
	if met := s.Metrics(); met.Running != 0 || met.Rejected != 1 {
		t.Errorf("metrics after cancel: %+v", met)
	}
	// The engine is free again.
	r, _, err := collect(t, s, &Request{Messages: user("d"), MaxTokens: 6})
	if err != nil || r.Content != "zzz" {
		t.Errorf("after cancel: %q, %v", r.Content, err)
	}
}

func TestQueueIsFIFO(t *testing.T) {
	q := newQueue(10, 1)
	first, err := q.join("")
	if err != nil {
		t.Fatal(err)
	}
	var tickets []*ticket
	for range 5 {
		tk, err := q.join("")
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	tickets[2].leave() // gives up its place
	first.leave()
	for i, tk := range tickets {
		if i == 2 {
			continue
		}
		select {
		case <-tk.turn:
		default:
			t.Fatalf("ticket %d not served next", i)
		}
		for _, later := range tickets[i+1:] {
			select {
			case <-later.turn:
				t.Fatalf("a later ticket was served with %d", i)
			default:
			}
		}
		tk.leave()
		tk.leave() // a second leave does nothing
	}
	if n, running := q.depth(); n != 0 || running != 0 {
		t.Errorf("queue left with %d waiting, %d running", n, running)
	}
}

func TestQueueTakesTurnsByClient(t *testing.T) {
	q := newQueue(10, 1)
	holder, err := q.join("agent")
	if err != nil {
		t.Fatal(err)
	}
	var tickets []*ticket
	for _, c := range []string{"agent", "agent", "agent", "chat", "agent", "editor", "chat"} {
		tk, err := q.join(c)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	var served []string
	for range tickets {
		holder.leave()
		holder = nil
		for _, tk := range tickets {
			select {
			case <-tk.turn:
				if !tk.done {
					if holder != nil {
						t.Fatal("two requests hold the engine")
					}
					holder = tk
				}
			default:
			}
		}
		if holder == nil {
			t.Fatal("nobody holds the engine")
		}
		served = append(served, holder.client)
	}
	holder.leave()
	// chat and editor have not been served, chat asked first; then the
	// agent, whose turn is oldest; then each client in turn while several
	// wait.
	want := []string{"chat", "editor", "agent", "chat", "agent", "agent", "agent"}
	if !slices.Equal(served, want) {
		t.Errorf("served %v, want %v", served, want)
	}
	if n, running := q.depth(); n != 0 || running != 0 {
		t.Errorf("queue left with %d waiting, %d running", n, running)
	}
}
