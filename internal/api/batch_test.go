package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"petal/engine"
	"petal/engine/cpu"
	"petal/internal/service"
)

// answer is what a client made of one reply.
type answer struct {
	text, finish string
	logprobs     []float64
	err          error
}

// concurrentCase is one client's request and how it reads the reply.
type concurrentCase struct {
	name   string
	req    openai.ChatCompletionRequest
	stream bool
	// cancelAfter, when > 0, hangs up after that many streamed chunks.
	cancelAfter int
}

func concurrentCases() []concurrentCase {
	seed := 3
	off := map[string]any{"enable_thinking": false}
	user := func(s string) []openai.ChatCompletionMessage {
		return []openai.ChatCompletionMessage{{Role: "user", Content: s}}
	}
	return []concurrentCase{
		//lint:ignore SA1019 max_tokens is what most clients still send
		{name: "streamed greedy", stream: true, req: openai.ChatCompletionRequest{Messages: user("Tell me a story about a cat."), Temperature: 1e-9, MaxTokens: 64, ChatTemplateKwargs: off}},
		//lint:ignore SA1019 max_tokens is what most clients still send
		{name: "seeded sampling", req: openai.ChatCompletionRequest{Messages: user("Name three colours."), Temperature: 0.8, Seed: &seed, MaxTokens: 24, ChatTemplateKwargs: off}},
		//lint:ignore SA1019 max_tokens is what most clients still send
		{name: "logprobs", req: openai.ChatCompletionRequest{Messages: user("What is the sun?"), Temperature: 1e-9, MaxTokens: 16, LogProbs: true, TopLogProbs: 3, ChatTemplateKwargs: off}},
		//lint:ignore SA1019 max_tokens is what most clients still send
		{name: "forced tool call", req: openai.ChatCompletionRequest{Messages: user("Weather in Paris?"), Seed: &seed, MaxTokens: 80,
			Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_weather",
				Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"]}`)}}},
			ToolChoice: "required", ChatTemplateKwargs: off}},
		//lint:ignore SA1019 max_tokens is what most clients still send
		{name: "json schema", stream: true, req: openai.ChatCompletionRequest{Messages: user("Give me a number."), Temperature: 1e-9, MaxTokens: 40, ChatTemplateKwargs: off,
			ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "n", Strict: true,
					Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}}}},
		//lint:ignore SA1019 max_tokens is what most clients still send
		{name: "cancelled stream", stream: true, cancelAfter: 3, req: openai.ChatCompletionRequest{Messages: user("Count to a hundred."), Temperature: 1e-9, MaxTokens: 200, ChatTemplateKwargs: off}},
	}
}

// askOpenAI sends c's request with the go-openai client and reads the reply
// as its caller would.
func askOpenAI(c *openai.Client, cc concurrentCase) answer {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !cc.stream {
		resp, err := c.CreateChatCompletion(ctx, cc.req)
		if err != nil {
			return answer{err: err}
		}
		ch := resp.Choices[0]
		a := answer{text: ch.Message.Content, finish: string(ch.FinishReason)}
		for _, tc := range ch.Message.ToolCalls {
			a.text += "|" + tc.Function.Name + ":" + tc.Function.Arguments
		}
		if ch.LogProbs != nil {
			for _, lp := range ch.LogProbs.Content {
				a.logprobs = append(a.logprobs, lp.LogProb)
			}
		}
		return a
	}
	stream, err := c.CreateChatCompletionStream(ctx, cc.req)
	if err != nil {
		return answer{err: err}
	}
	defer stream.Close()
	var a answer
	var b strings.Builder
	for chunks := 0; ; chunks++ {
		if cc.cancelAfter > 0 && chunks == cc.cancelAfter {
			a.err = context.Canceled
			break
		}
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			a.err = err
			break
		}
		if len(resp.Choices) > 0 {
			b.WriteString(resp.Choices[0].Delta.Content)
			if resp.Choices[0].FinishReason != "" {
				a.finish = string(resp.Choices[0].FinishReason)
			}
		}
	}
	a.text = b.String()
	return a
}

// TestConcurrentClientsMatchAlone is issue 29's correctness check
// through the server: six go-openai clients at once (streamed, not,
// seeded sampling, logprobs, a forced tool call, a JSON schema, one that
// hangs up) on the demo model on the CPU backend get, apart from the one
// that hung up, the replies each gets alone, token for token and logprob
// for logprob, while sharing steps.
func TestConcurrentClientsMatchAlone(t *testing.T) {
	cases := concurrentCases()
	serve := func(parallel int) (*openai.Client, *service.Service) {
		m, err := cpu.Open(demoModel)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		// The first step waits for every client to be let in, so they
		// run together from the first tokens.
		var model engine.Model = m
		var svc *service.Service
		if parallel > 1 {
			model = &admitted{Model: m, ready: func() bool { return svc.Metrics().Running == len(cases) }}
		}
		svc, err = service.New(model, demoModel, service.Options{Name: "demo", Parallel: parallel, CacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		srv := httptest.NewServer(New(svc, Options{}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() {
			waitQueue(t, svc, func(m service.Metrics) bool { return m.Running == 0 && m.Waiting == 0 })
		})
		cfg := openai.DefaultConfig("")
		cfg.BaseURL = srv.URL + "/v1"
		return openai.NewClientWithConfig(cfg), svc
	}
	alone, _ := serve(1)
	want := make([]answer, len(cases))
	for i, c := range cases {
		want[i] = askOpenAI(alone, c)
		if c.cancelAfter == 0 && (want[i].err != nil || want[i].text == "") {
			t.Fatalf("%s alone: %q, %v", c.name, want[i].text, want[i].err)
		}
	}
	together, svc := serve(len(cases))
	got := make([]answer, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { got[i] = askOpenAI(together, c) })
	}
	wg.Wait()
	for i, c := range cases {
		w, g := want[i], got[i]
		if c.cancelAfter > 0 {
			if !errors.Is(g.err, context.Canceled) {
				t.Errorf("%s: %v, want the hang-up", c.name, g.err)
			}
			continue
		}
		if g.err != nil || g.text != w.text || g.finish != w.finish {
			t.Errorf("%s: together %q (%s, %v), alone %q (%s)", c.name, g.text, g.finish, g.err, w.text, w.finish)
		}
		if len(g.logprobs) != len(w.logprobs) {
			t.Errorf("%s: %d logprobs together, %d alone", c.name, len(g.logprobs), len(w.logprobs))
		}
		for k := range min(len(g.logprobs), len(w.logprobs)) {
			if g.logprobs[k] != w.logprobs[k] {
				t.Errorf("%s token %d: logprob %v together, %v alone", c.name, k, g.logprobs[k], w.logprobs[k])
			}
		}
	}
	met := waitQueue(t, svc, func(m service.Metrics) bool { return m.Running == 0 })
	if met.StepRows <= met.Steps {
		t.Errorf("%d rows in %d steps: the clients never shared a step", met.StepRows, met.Steps)
	}
	if met.Completed != int64(len(cases)-1) || met.Failed != 1 {
		t.Errorf("%d completed, %d failed; want %d and the hang-up", met.Completed, met.Failed, len(cases)-1)
	}
}

// admitted wraps a model so that its first step waits until ready
// reports every request let in (Step runs on the service's stepper, whose
// queue changes wake the wait).
type admitted struct {
	engine.Model
	ready   func() bool
	started bool
}

func (m *admitted) Step(rows []engine.Row) error {
	if !m.started {
		m.started = true
		for !m.ready() {
			runtime.Gosched()
		}
	}
	return engine.Step(m.Model, rows)
}
