package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A streamed reply is read to [DONE]: first is called on each chunk with
// content,
// the usage of the last chunk is kept, and a stream cut short or carrying
// an error is one.
func TestReadSSE(t *testing.T) {
	const body = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n" +
		": keep-alive\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"Once\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\" upon\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":38,\"completion_tokens\":2}}\n\n" +
		"data: [DONE]\n\n"
	firsts := 0
	u, err := readSSE(strings.NewReader(body), func() { firsts++ })
	if err != nil || u.PromptTokens != 38 || u.CompletionTokens != 2 {
		t.Errorf("usage %+v, error %v", u, err)
	}
	if firsts != 2 {
		t.Errorf("first called %d times, want once per content chunk (the caller closes once)", firsts)
	}
	roleOnly := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"
	called := false
	if _, err := readSSE(strings.NewReader(roleOnly+"data: [DONE]\n\n"), func() { called = true }); err != nil || called {
		t.Errorf("a chunk without content: first called %v, error %v", called, err)
	}
	for _, bad := range []string{
		roleOnly,
		roleOnly + "data: {\"error\":{\"message\":\"the model failed\"}}\n\n",
		"data: {not json\n\n",
	} {
		if _, err := readSSE(strings.NewReader(bad), func() {}); err == nil {
			t.Errorf("%q read without an error", bad)
		}
	}
}

func TestGauges(t *testing.T) {
	const text = `# HELP petal_queue_depth Requests waiting for the model.
# TYPE petal_queue_depth gauge
petal_queue_depth 3
# HELP petal_requests_running Requests holding the model.
petal_requests_running 1
petal_requests_running_total 9
petal_time_to_first_token_seconds_bucket{le="0.1"} 4
`
	g, err := gauges(text, runningGauge, waitingGauge)
	if err != nil || g[runningGauge] != 1 || g[waitingGauge] != 3 {
		t.Errorf("%v %v", g, err)
	}
	if _, err := gauges("petal_requests_running 1\n", runningGauge, waitingGauge); err == nil {
		t.Error("a missing gauge went unnoticed")
	}
	if _, err := gauges("petal_queue_depth x\n", waitingGauge); err == nil {
		t.Error("a gauge that is not a number went unnoticed")
	}
}

// The file map's lines are sized from a probe: the count that brings the
// prompt closest to the target, none when the rest alone is past it.
func TestLinesFor(t *testing.T) {
	for _, c := range []struct{ target, base, probe, lines, want int }{
		{11300, 4300, 6300, 100, 350},
		{11310, 4300, 6300, 100, 351},
		{4000, 4300, 6300, 100, 0},
		{11300, 4300, 4300, 100, 0},
	} {
		if got := linesFor(c.target, c.base, c.probe, c.lines); got != c.want {
			t.Errorf("linesFor(%d, %d, %d, %d) = %d, want %d", c.target, c.base, c.probe, c.lines, got, c.want)
		}
	}
}

// The agent's request opens with its nonce (in the first tool, which the
// template writes first), grows by the file map's lines, each different,
// and carries tools whose schemas are JSON.
func TestAgentConversation(t *testing.T) {
	msgs, tools := agentConversation(7, 0)
	more, _ := agentConversation(8, 50)
	if first := tools[0]["function"].(map[string]any)["description"].(string); !strings.HasPrefix(first, "Session 7. ") {
		t.Errorf("first tool's description %q", first)
	}
	if msgs[0]["content"] != agentSystem || msgs[1]["role"] != "user" {
		t.Errorf("messages %q", msgs)
	}
	lines := strings.Split(strings.TrimPrefix(more[0]["content"], agentSystem), "\n")
	seen := map[string]bool{}
	for _, l := range lines[:50] {
		if seen[l] || !strings.HasPrefix(l, "- ") {
			t.Errorf("file map line %q repeated or malformed", l)
		}
		seen[l] = true
	}
	if len(lines) != 51 || lines[50] != "" {
		t.Errorf("%d file map lines, want 50", len(lines)-1)
	}
	data, err := json.Marshal(tools)
	if err != nil {
		t.Fatal(err)
	}
	var back []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Type string `json:"type"`
			} `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(data, &back); err != nil || len(back) != len(agentTools) {
		t.Fatalf("%v: %s", err, data)
	}
	for _, tl := range back {
		if tl.Type != "function" || tl.Function.Name == "" || tl.Function.Parameters.Type != "object" {
			t.Errorf("tool %+v", tl)
		}
	}
}

func TestSpan(t *testing.T) {
	for _, c := range []struct {
		secs []float64
		want string
	}{
		{nil, "none"},
		{[]float64{0.091, 0.223}, "91-223 ms"},
		{[]float64{10.61, 11.2}, "10.6-11.2 s"},
		{[]float64{0.9, 1.2}, "900 ms to 1.2 s"},
		{[]float64{10.41, 10.44}, "10.4 s"},
	} {
		if got := span(c.secs); got != c.want {
			t.Errorf("span(%v) = %q, want %q", c.secs, got, c.want)
		}
	}
	if got := thousands(11312); got != "11,312" {
		t.Errorf("thousands: %q", got)
	}
	if got := thousands(999); got != "999" {
		t.Errorf("thousands: %q", got)
	}
}

// The table has the rows with the measured figures; a burst's
// answers, 429s and other failures are counted apart.
func TestWriteTable(t *testing.T) {
	stream := outcome{Status: 200, Secs: 10.9, PromptTokens: 38, CompletionTokens: 1900}
	agent := outcome{Status: 200, Secs: 9.9, PromptTokens: 11312, CompletionTokens: 32}
	r := &report{
		ShortTokens: 16, StreamTokens: 1900, AgentPromptTokens: 11312,
		Alone:        []outcome{{Status: 200, Secs: 0.223}, {Status: 200, Secs: 0.091}},
		BehindStream: behindCase{Short: outcome{Status: 200, Secs: 10.4}, Long: []outcome{stream}},
		BehindAgent:  behindCase{Short: outcome{Status: 200, Secs: 9.8}, Long: []outcome{agent}},
		BehindBoth:   behindCase{Short: outcome{Status: 200, Secs: 20.5}, Long: []outcome{stream, {Status: 500, Err: "boom"}}},
		Burst: burstCase{Sent: 4, Stream: stream, Short: []outcome{
			{Status: 200, Secs: 11.2}, {Status: 429, Secs: 0.01}, {Status: 200, Secs: 10.6}, {Err: "connection reset"},
		}},
	}
	var b bytes.Buffer
	writeTable(&b, r)
	if got, want := longCell("agent", outcome{Status: 200, Secs: 2, PromptTokens: 100, CachedTokens: 60, CompletionTokens: 3}), "agent: 100 prompt (60 from the prefix cache) + 3 reply tokens in 2.0 s"; got != want {
		t.Errorf("longCell %q, want %q", got, want)
	}
	for _, want := range []string{
		"| alone | 91-223 ms (2 runs) | |",
		"| behind a streamed reply of 1,900 tokens | 10.4 s | stream: 38 prompt + 1900 reply tokens in 10.9 s |",
		"| behind an agent prompt of 11,312 tokens | 9.8 s | agent: 11312 prompt + 32 reply tokens in 9.9 s |",
		"| behind both | 20.5 s | stream: 38 prompt + 1900 reply tokens in 10.9 s; agent failed: status 500: boom |",
		"| 4 short requests during one stream | 2 answered after 10.6-11.2 s, 1 refused with 429, 1 failed otherwise |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
