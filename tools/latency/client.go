package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// client talks to the server under test.
type client struct {
	base string
	http *http.Client
	// bias is every request's logit_bias.
	bias map[string]int
	// nonce numbers the prompts, each starting with its own number.
	nonce atomic.Int64
}

// outcome is one request's end: its status (0: no answer), its time from
// sending to the last byte, and the tokens its usage counted.
type outcome struct {
	Status           int     `json:"status"`
	Secs             float64 `json:"secs"`
	PromptTokens     int     `json:"prompt_tokens,omitempty"`
	CachedTokens     int     `json:"cached_tokens,omitempty"`
	CompletionTokens int     `json:"completion_tokens,omitempty"`
	Err              string  `json:"error,omitempty"`
}

func (o outcome) describe() string {
	if o.Err != "" {
		return fmt.Sprintf("status %d: %s", o.Status, o.Err)
	}
	return fmt.Sprintf("status %d", o.Status)
}

// usage is the OpenAI usage object.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// set copies u's counts into o.
func (o *outcome) set(u usage) {
	o.PromptTokens, o.CachedTokens, o.CompletionTokens = u.PromptTokens, u.PromptTokensDetails.CachedTokens, u.CompletionTokens
}

// short sends the autocomplete request: a piece of code to continue,
// shortTokens tokens, greedy.
func (c *client) short(ctx context.Context) outcome {
	n := c.nonce.Add(1)
	body := map[string]any{
		"prompt":      fmt.Sprintf("// file %d\nfunc sum(xs []int) int {\n\ttotal := 0\n\tfor _, x := range xs {\n\t\t", n),
		"max_tokens":  shortTokens,
		"temperature": 0,
		"logit_bias":  c.bias,
	}
	start := time.Now()
	resp, err := c.post(ctx, "/v1/completions", body)
	if err != nil {
		return outcome{Secs: time.Since(start).Seconds(), Err: err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	o := outcome{Status: resp.StatusCode, Secs: time.Since(start).Seconds()}
	if err != nil {
		o.Err = err.Error()
		return o
	}
	if resp.StatusCode != http.StatusOK {
		o.Err = strings.TrimSpace(string(data))
		return o
	}
	var r struct {
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		o.Err = err.Error()
	}
	o.set(r.Usage)
	return o
}

// stream is a streamed chat reply under way: first is closed when its
// first token arrived (or it ended without one), done gives its outcome.
type stream struct {
	first chan struct{}
	done  chan outcome
}

// startStream starts a streamed chat reply of tokens tokens.
func (c *client) startStream(ctx context.Context, tokens int) *stream {
	n := c.nonce.Add(1)
	body := map[string]any{
		"messages": []map[string]string{
			{"role": "user", "content": fmt.Sprintf("(%d) Tell me a long story about a lighthouse keeper and the ships she saw, chapter after chapter.", n)},
		},
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
		"max_tokens":     tokens,
		"temperature":    0,
		"logit_bias":     c.bias,
	}
	s := &stream{first: make(chan struct{}), done: make(chan outcome, 1)}
	go func() {
		var once sync.Once
		arrived := func() { once.Do(func() { close(s.first) }) }
		defer arrived()
		start := time.Now()
		resp, err := c.post(ctx, "/v1/chat/completions", body)
		if err != nil {
			s.done <- outcome{Secs: time.Since(start).Seconds(), Err: err.Error()}
			return
		}
		defer resp.Body.Close()
		o := outcome{Status: resp.StatusCode}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(resp.Body)
			o.Err = strings.TrimSpace(string(data))
		} else {
			u, err := readSSE(resp.Body, arrived)
			o.set(u)
			if err != nil {
				o.Err = err.Error()
			}
		}
		o.Secs = time.Since(start).Seconds()
		s.done <- o
	}()
	return s
}

// readSSE reads a streamed chat completion to its end, calling first once
// a chunk carries content, and returns the usage its last chunk gave.
func readSSE(r io.Reader, first func()) (usage, error) {
	var u usage
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return u, nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return u, fmt.Errorf("a chunk that is not JSON: %w", err)
		}
		if chunk.Error != nil {
			return u, errors.New(chunk.Error.Message)
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" {
				first()
			}
		}
		if chunk.Usage != nil {
			u = *chunk.Usage
		}
	}
	if err := sc.Err(); err != nil {
		return u, err
	}
	return u, errors.New("the stream ended without [DONE]")
}

// startAgent sends the agent's request with lines of file map.
func (c *client) startAgent(ctx context.Context, lines int) <-chan outcome {
	done := make(chan outcome, 1)
	body, err := c.agentBody(lines)
	if err != nil {
		done <- outcome{Err: err.Error()}
		return done
	}
	go func() {
		start := time.Now()
		resp, err := c.postRaw(ctx, "/v1/chat/completions", body)
		if err != nil {
			done <- outcome{Secs: time.Since(start).Seconds(), Err: err.Error()}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		o := outcome{Status: resp.StatusCode, Secs: time.Since(start).Seconds()}
		var r struct {
			Usage usage `json:"usage"`
		}
		switch {
		case err != nil:
			o.Err = err.Error()
		case resp.StatusCode != http.StatusOK:
			o.Err = strings.TrimSpace(string(data))
		case json.Unmarshal(data, &r) != nil:
			o.Err = "the reply is not JSON"
		}
		o.set(r.Usage)
		done <- o
	}()
	return done
}

// agentRequest sizes the agent's chat request to about target prompt
// tokens on this server: the system prompt and tools, then as many lines
// of the project's file map as fill it. It returns how many lines, and
// the prompt's tokens as /v1/tokenize counts them.
func (c *client) agentRequest(ctx context.Context, target int) (lines, tokens int, err error) {
	count := func(lines int) (int, error) {
		msgs, tools := agentConversation(c.nonce.Load(), lines)
		toks, err := c.tokenize(ctx, map[string]any{"messages": msgs, "tools": tools})
		return len(toks), err
	}
	base, err := count(0)
	if err != nil {
		return 0, 0, err
	}
	more, err := count(fileMapProbe)
	if err != nil {
		return 0, 0, err
	}
	lines = linesFor(target, base, more, fileMapProbe)
	tokens, err = count(lines)
	return lines, tokens, err
}

// agentBody is the agent's chat request with lines of file map, under a
// new nonce: the same request twice would be served from the prefix cache.
func (c *client) agentBody(lines int) ([]byte, error) {
	msgs, tools := agentConversation(c.nonce.Add(1), lines)
	return json.Marshal(map[string]any{
		"messages": msgs, "tools": tools,
		"max_tokens": agentReplyTokens, "temperature": 0, "logit_bias": c.bias,
	})
}

// fileMapProbe is how many file-map lines agentRequest measures to learn
// their tokens per line.
const fileMapProbe = 100

// linesFor is how many file-map lines bring a prompt of base tokens
// (with none) and withProbe tokens (with probe lines) to target.
func linesFor(target, base, withProbe, probe int) int {
	per := float64(withProbe-base) / float64(probe)
	if target <= base || per <= 0 {
		return 0
	}
	return int(float64(target-base)/per + 0.5)
}

// tokenize returns the tokens /v1/tokenize gives body.
func (c *client) tokenize(ctx context.Context, body map[string]any) ([]int, error) {
	resp, err := c.post(ctx, "/v1/tokenize", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/v1/tokenize: status %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var r struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("/v1/tokenize: %w", err)
	}
	return r.Tokens, nil
}

// waitIdle waits until the server runs and queues nothing.
func (c *client) waitIdle(ctx context.Context) error {
	return c.waitMetrics(ctx, "idle", func(running, waiting float64) bool { return running == 0 && waiting == 0 })
}

// waitLoad waits until the server holds at least n requests, running or
// waiting.
func (c *client) waitLoad(ctx context.Context, n float64) error {
	return c.waitMetrics(ctx, fmt.Sprintf("holding %g requests", n), func(running, waiting float64) bool { return running+waiting >= n })
}

// waitMetrics reads /metrics every pollEvery until ok holds of its
// running and waiting gauges, for at most requestTimeout.
func (c *client) waitMetrics(ctx context.Context, what string, ok func(running, waiting float64) bool) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
		if err != nil {
			return err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return fmt.Errorf("waiting for the server to be %s: %w", what, err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		g, err := gauges(string(data), runningGauge, waitingGauge)
		if err != nil {
			return err
		}
		if ok(g[runningGauge], g[waitingGauge]) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the server to be %s: %w", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// The gauges of petal serve's /metrics that say what holds the model.
const (
	runningGauge = "petal_requests_running"
	waitingGauge = "petal_queue_depth"
)

// gauges reads the named unlabelled samples from a Prometheus text
// exposition; each must be there.
func gauges(text string, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	for line := range strings.Lines(text) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		for _, want := range names {
			if name == want {
				v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				if err != nil {
					return nil, fmt.Errorf("/metrics: %s is %q", name, value)
				}
				out[name] = v
			}
		}
	}
	for _, want := range names {
		if _, ok := out[want]; !ok {
			return nil, fmt.Errorf("/metrics has no %s", want)
		}
	}
	return out, nil
}

func (c *client) post(ctx context.Context, path string, body any) (*http.Response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return c.postRaw(ctx, path, data)
}

func (c *client) postRaw(ctx context.Context, path string, data []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.http.Do(req)
}
