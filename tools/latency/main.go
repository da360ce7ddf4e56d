// Command latency measures what a short request waits behind long ones on
// a running Petal server (issue 29's table): a 16-token /v1/completions
// request, as an editor's autocomplete sends, alone; behind a streamed
// chat reply of about 1,900 tokens; behind an agent's chat request of
// about 11.3k prompt tokens (a coding agent's system prompt and tool list,
// built here and sized with the server's /v1/tokenize); behind both; and
// 20 such requests fired together during one stream (how many answered,
// how many were refused with 429, and how long the rest took).
//
// The replies must not stop early, so every request carries a logit_bias
// of -100 on the end-of-text tokens (-eos; by default the ids /v1/tokenize
// gives <|im_end|> and <|endoftext|>): the stream gives its full length and
// each short request its 16 tokens. Every prompt carries a number of its
// own near its start (the agent's in its first tool, which the template
// writes first), so the prefix cache serves no more than the template's
// first tokens; the table shows any it served. Before each case the
// tool waits for /metrics to show the server idle; a request is "behind"
// another once /metrics shows that one running (or, second in line,
// waiting) and, for the stream, once its first token arrived.
//
//	go run ./tools/latency -url http://127.0.0.1:8080 [-json]
//
// scripts/latency.sh starts petal serve on the demo model and runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The table, as defaults.
const (
	// shortTokens is the autocomplete request's max_tokens.
	shortTokens = 16
	// streamTokens is the long streamed reply's max_tokens.
	streamTokens = 1900
	// agentTokens is the agent prompt's size in tokens (opencode's real
	// request in the issue was 11.3k).
	agentTokens = 11300
	// agentReplyTokens is the agent's reply's max_tokens: its prompt is
	// what costs.
	agentReplyTokens = 32
	// burstRequests are the short requests fired together during a stream.
	burstRequests = 20
	// aloneRuns are the short requests measured one after another alone.
	aloneRuns = 5
	// banBias is the logit_bias that keeps a token from being picked
	// (OpenAI's smallest).
	banBias = -100
	// requestTimeout bounds every request: a serial server answers the
	// last one in line after all the others.
	requestTimeout = 10 * time.Minute
	// pollEvery is how often /metrics is read while waiting for a state.
	pollEvery = 10 * time.Millisecond
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	url := fs.String("url", "", "the server's base URL, e.g. http://127.0.0.1:8080 (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of the table")
	eos := fs.String("eos", "auto", "comma-separated token ids the replies may not end on ('auto': what /v1/tokenize gives <|im_end|> and <|endoftext|>; 'none': no bias, so replies may stop early)")
	stream := fs.Int("stream-tokens", streamTokens, "max_tokens of the long streamed reply")
	agent := fs.Int("agent-tokens", agentTokens, "tokens of the agent's prompt (system prompt, tools and question)")
	burst := fs.Int("burst", burstRequests, "short requests fired together during one stream")
	alone := fs.Int("alone", aloneRuns, "short requests measured alone, one after another")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *url == "" {
		return errors.New("-url is required")
	}
	if *stream < 1 || *agent < 1 || *burst < 1 || *alone < 1 {
		return errors.New("-stream-tokens, -agent-tokens, -burst and -alone must be at least 1")
	}
	c := &client{base: strings.TrimRight(*url, "/"), http: &http.Client{Timeout: requestTimeout}}
	ctx := context.Background()
	var err error
	if c.bias, err = c.eosBias(ctx, *eos); err != nil {
		return err
	}
	rep, err := measure(ctx, c, plan{streamTokens: *stream, agentTokens: *agent, burst: *burst, alone: *alone})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeTable(stdout, rep)
	return nil
}

// eosBias turns -eos into a logit_bias that bans those tokens.
func (c *client) eosBias(ctx context.Context, eos string) (map[string]int, error) {
	var ids []int
	switch eos {
	case "none":
		return nil, nil
	case "auto":
		for _, text := range []string{"<|im_end|>", "<|endoftext|>"} {
			toks, err := c.tokenize(ctx, map[string]any{"text": text})
			if err != nil {
				return nil, err
			}
			if len(toks) != 1 {
				return nil, fmt.Errorf("%s is %d tokens on this server, not one: name the end tokens with -eos", text, len(toks))
			}
			ids = append(ids, toks[0])
		}
	default:
		for p := range strings.SplitSeq(eos, ",") {
			id, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || id < 0 {
				return nil, fmt.Errorf("-eos: %q is not a token id", p)
			}
			ids = append(ids, id)
		}
	}
	bias := map[string]int{}
	for _, id := range ids {
		bias[strconv.Itoa(id)] = banBias
	}
	return bias, nil
}

// plan is what measure runs.
type plan struct {
	streamTokens, agentTokens, burst, alone int
}

// measure runs the cases one after another, each on an idle server.
func measure(ctx context.Context, c *client, p plan) (*report, error) {
	agentLines, agentCount, err := c.agentRequest(ctx, p.agentTokens)
	if err != nil {
		return nil, err
	}
	rep := &report{URL: c.base, ShortTokens: shortTokens, StreamTokens: p.streamTokens, AgentPromptTokens: agentCount, EOSBias: c.bias}
	// One unmeasured request: whatever the server does on its first.
	if o := c.short(ctx); o.Status != http.StatusOK {
		return nil, fmt.Errorf("the warm-up request: %s", o.describe())
	}
	for range p.alone {
		if err := c.waitIdle(ctx); err != nil {
			return nil, err
		}
		o := c.short(ctx)
		if o.Status != http.StatusOK {
			return nil, fmt.Errorf("a short request alone: %s", o.describe())
		}
		rep.Alone = append(rep.Alone, o)
	}

	if rep.BehindStream, err = c.behind(ctx, p, true, noAgent); err != nil {
		return nil, err
	}
	if rep.BehindAgent, err = c.behind(ctx, p, false, agentLines); err != nil {
		return nil, err
	}
	if rep.BehindBoth, err = c.behind(ctx, p, true, agentLines); err != nil {
		return nil, err
	}
	if rep.Burst, err = c.burst(ctx, p); err != nil {
		return nil, err
	}
	return rep, nil
}

// noAgent is behind's agent argument for no agent's request.
const noAgent = -1

// behind starts a stream (when stream), then the agent's request with
// agentLines of file map (unless noAgent), then, once they hold or await
// the model, measures one short request, and waits for all to end.
func (c *client) behind(ctx context.Context, p plan, stream bool, agentLines int) (behindCase, error) {
	var out behindCase
	if err := c.waitIdle(ctx); err != nil {
		return out, err
	}
	var waits []<-chan outcome
	queued := 0.0
	if stream {
		s := c.startStream(ctx, p.streamTokens)
		<-s.first
		waits = append(waits, s.done)
		queued++
	}
	if agentLines != noAgent {
		done := c.startAgent(ctx, agentLines)
		queued++
		if err := c.waitLoad(ctx, queued); err != nil {
			return out, err
		}
		waits = append(waits, done)
	}
	out.Short = c.short(ctx)
	for _, w := range waits {
		out.Long = append(out.Long, <-w)
	}
	return out, nil
}

// burst fires p.burst short requests together once a stream's first token
// arrived, and waits for them and the stream.
func (c *client) burst(ctx context.Context, p plan) (burstCase, error) {
	out := burstCase{Sent: p.burst}
	if err := c.waitIdle(ctx); err != nil {
		return out, err
	}
	s := c.startStream(ctx, p.streamTokens)
	<-s.first
	results := make(chan outcome, p.burst)
	for range p.burst {
		go func() { results <- c.short(ctx) }()
	}
	for range p.burst {
		out.Short = append(out.Short, <-results)
	}
	out.Stream = <-s.done
	return out, nil
}
