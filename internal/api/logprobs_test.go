package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"petal/internal/service"
)

// Chat logprobs through go-openai's client and types: one entry per reply
// token whose texts and bytes make up the content, each with the asked
// alternatives (the scripted token first), the same streamed as not, each
// chunk carrying its own tokens' (as OpenAI streams them); null when not
// asked.
func TestChatLogprobsShape(t *testing.T) {
	const text = "Hi there"
	ts := newTestServer(t, service.Options{}, Options{}, constant(text))
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = ts.URL + "/v1"
	c := openai.NewClientWithConfig(cfg)
	req := openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Hello"}},
		LogProbs: true, TopLogProbs: 3, ChatTemplateKwargs: map[string]any{"enable_thinking": false}}
	resp, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.Message.Content != text || ch.LogProbs == nil {
		t.Fatalf("reply %q, logprobs %+v", ch.Message.Content, ch.LogProbs)
	}
	var joined, joinedBytes strings.Builder
	for _, lp := range ch.LogProbs.Content {
		joined.WriteString(lp.Token)
		joinedBytes.Write(lp.Bytes)
		if lp.LogProb > 0 || len(lp.TopLogProbs) != 3 || lp.TopLogProbs[0].Token != lp.Token || lp.TopLogProbs[0].LogProb != lp.LogProb ||
			lp.TopLogProbs[1].LogProb > lp.TopLogProbs[0].LogProb {
			t.Errorf("token %+v", lp)
		}
	}
	if joined.String() != text || joinedBytes.String() != text || len(ch.LogProbs.Content) != resp.Usage.CompletionTokens {
		t.Errorf("logprobs tokens %q (bytes %q), %d of them for %d tokens", joined.String(), joinedBytes.String(), len(ch.LogProbs.Content), resp.Usage.CompletionTokens)
	}

	stream, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var streamed []openai.ChatCompletionTokenLogprob
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			var tokens strings.Builder
			if c.Logprobs != nil {
				streamed = append(streamed, c.Logprobs.Content...)
				for _, lp := range c.Logprobs.Content {
					tokens.WriteString(lp.Token)
				}
			}
			if tokens.String() != c.Delta.Content {
				t.Errorf("a chunk of content %q carries the logprobs of %q", c.Delta.Content, tokens.String())
			}
		}
	}
	if len(streamed) != len(ch.LogProbs.Content) {
		t.Fatalf("streamed %d logprobs, not streamed %d", len(streamed), len(ch.LogProbs.Content))
	}
	for i, s := range streamed {
		w := ch.LogProbs.Content[i]
		if s.Token != w.Token || s.Logprob != w.LogProb || len(s.TopLogprobs) != len(w.TopLogProbs) {
			t.Errorf("streamed %+v, not streamed %+v", s, w)
		}
	}

	req.LogProbs, req.TopLogProbs = false, 0
	resp, err = c.CreateChatCompletion(context.Background(), req)
	if err != nil || resp.Choices[0].LogProbs != nil {
		t.Errorf("not asked: logprobs %+v, %v", resp.Choices[0].LogProbs, err)
	}
}

// Completions' and Ollama's logprobs shapes, and the values refused.
func TestLogprobsShapesAndLimits(t *testing.T) {
	const text = "Hi there"
	ts := newTestServer(t, service.Options{}, Options{}, constant(text))
	resp, body := do(t, post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":20,"logprobs":2}`))
	var comp openai.CompletionResponse
	if err := json.Unmarshal([]byte(body), &comp); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("completions: %d %s (%v)", resp.StatusCode, body, err)
	}
	lp := comp.Choices[0].LogProbs
	if strings.Join(lp.Tokens, "") != comp.Choices[0].Text || len(lp.TokenLogprobs) != len(lp.Tokens) || len(lp.TextOffset) != len(lp.Tokens) {
		t.Fatalf("completion %q, logprobs %+v", comp.Choices[0].Text, lp)
	}
	for i, tok := range lp.Tokens {
		if _, ok := lp.TopLogprobs[i][tok]; !ok || len(lp.TopLogprobs[i]) != 2 || !strings.HasPrefix(comp.Choices[0].Text[lp.TextOffset[i]:], tok) {
			t.Errorf("token %d %q: top %v, offset %d", i, tok, lp.TopLogprobs[i], lp.TextOffset[i])
		}
	}

	// Streamed through go-openai, each chunk carries its text's tokens,
	// offsets counted over the whole text: together the reply's.
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = ts.URL + "/v1"
	stream, err := openai.NewClientWithConfig(cfg).CreateCompletionStream(context.Background(), openai.CompletionRequest{Prompt: "x", MaxTokens: 20, LogProbs: 2})
	if err != nil {
		t.Fatal(err)
	}
	var streamed openai.LogprobResult
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			l := c.LogProbs
			if strings.Join(l.Tokens, "") != c.Text {
				t.Errorf("a chunk of text %q carries the logprobs of %q", c.Text, l.Tokens)
			}
			streamed.Tokens = append(streamed.Tokens, l.Tokens...)
			streamed.TokenLogprobs = append(streamed.TokenLogprobs, l.TokenLogprobs...)
			streamed.TopLogprobs = append(streamed.TopLogprobs, l.TopLogprobs...)
			streamed.TextOffset = append(streamed.TextOffset, l.TextOffset...)
		}
	}
	stream.Close()
	if !reflect.DeepEqual(streamed, lp) {
		t.Errorf("streamed logprobs %+v, not streamed %+v", streamed, lp)
	}

	// Ollama 0.12's api.Logprob: {token, logprob, bytes, top_logprobs}.
	var oll struct {
		Message  struct{ Content string }
		Logprobs []struct {
			Token       string
			Logprob     float64
			Bytes       []int
			TopLogprobs []struct {
				Token   string
				Logprob float64
			} `json:"top_logprobs"`
		}
	}
	resp, body = do(t, post(t, ts.URL+"/api/chat", `{"messages":[{"role":"user","content":"Hello"}],"stream":false,"think":false,"logprobs":true,"top_logprobs":1}`))
	if err := json.Unmarshal([]byte(body), &oll); err != nil || resp.StatusCode != http.StatusOK || len(oll.Logprobs) == 0 {
		t.Fatalf("ollama chat: %d %s (%v)", resp.StatusCode, body, err)
	}
	var joined strings.Builder
	for _, l := range oll.Logprobs {
		joined.WriteString(l.Token)
		if len(l.Bytes) != len(l.Token) || len(l.TopLogprobs) != 1 || l.TopLogprobs[0].Token != l.Token {
			t.Errorf("ollama logprob %+v", l)
		}
	}
	if joined.String() != oll.Message.Content {
		t.Errorf("ollama logprobs tokens %q, content %q", joined.String(), oll.Message.Content)
	}
	// Streamed, each message carries its content's tokens, as Ollama's do.
	resp, body = do(t, post(t, ts.URL+"/api/chat", `{"messages":[{"role":"user","content":"Hello"}],"think":false,"logprobs":true,"top_logprobs":1}`))
	var tokens []string
	for line := range strings.Lines(body) {
		var m struct {
			Message  struct{ Content string }
			Logprobs []struct{ Token string }
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("ollama stream: %d %q (%v)", resp.StatusCode, line, err)
		}
		var mine strings.Builder
		for _, l := range m.Logprobs {
			mine.WriteString(l.Token)
			tokens = append(tokens, l.Token)
		}
		if mine.String() != m.Message.Content {
			t.Errorf("ollama: a message of %q carries the logprobs of %q", m.Message.Content, mine.String())
		}
	}
	if len(tokens) != len(oll.Logprobs) || strings.Join(tokens, "") != oll.Message.Content {
		t.Errorf("ollama streamed the logprobs of %q, not streamed %d tokens", tokens, len(oll.Logprobs))
	}

	for _, c := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":-1}`, "top_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, "top_logprobs"},
		{"/v1/completions", `{"prompt":"x","logprobs":21}`, "logprobs"},
		{"/api/generate", `{"prompt":"x","logprobs":true,"top_logprobs":99}`, "top_logprobs"},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, c.param) {
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
	}
}
