package api

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"petal/internal/service"
)

// TestCPUFixture serves the tiny-a reference fixture (random weights, so
// the text is noise) on the CPU backend and checks that streamed and
// unstreamed greedy replies agree token for token.
func TestCPUFixture(t *testing.T) {
	svc := fixtureService(t, "cpu", "tiny-a", service.Options{Name: "tiny-a"})
	srv := httptest.NewServer(New(svc, Options{}))
	defer srv.Close()
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = srv.URL + "/v1"
	c := openai.NewClientWithConfig(cfg)
	req := openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Hello!"}},
		// go-openai leaves a zero temperature out, which would mean the
		// default; a tiny one is greedy as well.
		//lint:ignore SA1019 max_tokens is what most clients still send
		Temperature: 1e-9, MaxTokens: 12,
		ChatTemplateKwargs: map[string]any{"enable_thinking": false},
	}
	resp, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := resp.Choices[0].Message.Content
	if resp.Usage.CompletionTokens == 0 || resp.Usage.CompletionTokens > 12 {
		t.Fatalf("usage %+v", resp.Usage)
	}
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	stream, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	got := ""
	var u *openai.Usage
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ch.Usage != nil {
			u = ch.Usage
		}
		for _, choice := range ch.Choices {
			got += choice.Delta.Content
		}
	}
	if got != want || u == nil || u.CompletionTokens != resp.Usage.CompletionTokens {
		t.Errorf("streamed %q (%+v), unstreamed %q (%+v)", got, u, want, resp.Usage)
	}
	if u != nil && u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("the repeated prompt reused no cached tokens")
	}
}
