package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"petal/internal/service"
)

func client(ts *testServer, key string) *openai.Client {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = ts.URL + "/v1"
	return openai.NewClientWithConfig(cfg)
}

const thoughtAndAnswer = "I should greet.\n</think>\n\nHello, world!"

func TestOpenAIChat(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant(thoughtAndAnswer))
	resp, err := client(ts, "").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model:    "gpt-4o", // unknown names map to the served model
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	if msg.Content != "Hello, world!" || msg.ReasoningContent != "I should greet." || msg.Role != "assistant" {
		t.Errorf("message %+v", msg)
	}
	if resp.Choices[0].FinishReason != openai.FinishReasonStop || resp.Model != "qwen-test" || resp.Object != "chat.completion" {
		t.Errorf("response %+v", resp)
	}
	want := len(ts.tok.Encode(thoughtAndAnswer))
	u := resp.Usage
	if u.CompletionTokens != want || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v, want %d completion tokens", u, want)
	}
}

func TestOpenAIStream(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant(thoughtAndAnswer))
	stream, err := client(ts, "").CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Messages:      []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var content, reasoning, role string
	var finish openai.FinishReason
	var usage *openai.Usage
	chunks := 0
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		if c.Usage != nil {
			usage = c.Usage
			if len(c.Choices) != 0 {
				t.Errorf("usage chunk has choices")
			}
			continue
		}
		d := c.Choices[0].Delta
		if chunks == 1 {
			role = d.Role
		}
		content += d.Content
		reasoning += d.ReasoningContent
		if c.Choices[0].FinishReason != "" {
			finish = c.Choices[0].FinishReason
		}
	}
	if role != "assistant" || content != "Hello, world!" || reasoning != "I should greet." || finish != openai.FinishReasonStop {
		t.Errorf("role %q content %q reasoning %q finish %q", role, content, reasoning, finish)
	}
	if usage == nil || usage.CompletionTokens != len(ts.tok.Encode(thoughtAndAnswer)) {
		t.Errorf("usage %+v", usage)
	}
}

func TestOpenAIStopAndMaxTokens(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\none two STOP three"))
	c := client(ts, "")
	resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "count"}},
		Stop:     []string{"STOP"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "one two" || resp.Choices[0].FinishReason != openai.FinishReasonStop {
		t.Errorf("stop: %q, %q", got, resp.Choices[0].FinishReason)
	}
	resp, err = c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Messages:            []openai.ChatCompletionMessage{{Role: "user", Content: "count"}},
		MaxCompletionTokens: 6, // </think>, two newlines, "one"
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "one" || resp.Choices[0].FinishReason != openai.FinishReasonLength || resp.Usage.CompletionTokens != 6 {
		t.Errorf("max tokens: %q, %q, %+v", got, resp.Choices[0].FinishReason, resp.Usage)
	}
}

var weatherTool = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "get_weather",
	Parameters: map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
}}

// weatherAgent calls the tool until it sees the tool's answer in the
// prompt, then answers with it.
func weatherAgent(prompt string) string {
	if i := strings.LastIndex(prompt, "<tool_response>\n"); i >= 0 {
		result := strings.TrimSuffix(prompt[i+len("<tool_response>\n"):], "\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n")
		return "Got it.</think>\n\nThe forecast: " + result
	}
	return "Calling the tool.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
}

func TestOpenAIToolRoundTrip(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, weatherAgent)
	c := client(ts, "")
	req := openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Weather in São Paulo?"}},
		Tools:    []openai.Tool{weatherTool},
	}
	resp, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	choice := resp.Choices[0]
	if choice.FinishReason != openai.FinishReasonToolCalls || len(choice.Message.ToolCalls) != 1 {
		t.Fatalf("choice %+v", choice)
	}
	call := choice.Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"São Paulo","days":3}` || call.ID == "" || call.Type != "function" {
		t.Errorf("call %+v", call)
	}

	// The same request streamed gives the same call.
	stream, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var name, args, id string
	var finish openai.FinishReason
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range ch.Choices[0].Delta.ToolCalls {
			if tc.Index == nil || *tc.Index != 0 {
				t.Fatalf("tool call delta without index 0: %+v", tc)
			}
			if tc.ID != "" {
				if id != "" {
					t.Errorf("id sent twice")
				}
				id = tc.ID
			}
			name += tc.Function.Name
			args += tc.Function.Arguments
		}
		if ch.Choices[0].FinishReason != "" {
			finish = ch.Choices[0].FinishReason
		}
	}
	stream.Close()
	if name != call.Function.Name || args != call.Function.Arguments || id == "" || finish != openai.FinishReasonToolCalls {
		t.Errorf("streamed call %q(%s) id %q finish %q", name, args, id, finish)
	}

	// The tool's result goes back; the model answers with it.
	req.Messages = append(req.Messages, choice.Message, openai.ChatCompletionMessage{
		Role: "tool", ToolCallID: call.ID, Content: "sunny, 28°C",
	})
	resp, err = c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "The forecast: sunny, 28°C" || resp.Choices[0].FinishReason != openai.FinishReasonStop {
		t.Errorf("final answer %q, %q", got, resp.Choices[0].FinishReason)
	}
	if resp.Usage.PromptTokensDetails == nil || resp.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("the second turn reused no cached tokens: %+v", resp.Usage)
	}
}

func TestOpenAICancel(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\n"+strings.Repeat("tick ", 400)))
	ts.model.SetStepDelay(5 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client(ts, "").CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "go"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	stream.Close()
	// The engine is freed at the next token: a new request runs at once.
	ts.model.SetStepDelay(0)
	start := time.Now()
	resp, err := client(ts, "").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		//lint:ignore SA1019 max_tokens is what most clients still send
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "again"}}, MaxTokens: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 5 {
		t.Errorf("usage %+v", resp.Usage)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("the next request waited %v for the cancelled one", waited)
	}
	if m := ts.svc.Metrics(); m.Failed != 1 || m.Running != 0 {
		t.Errorf("metrics %+v", m)
	}
	if live, cached := ts.model.Live(), ts.svc.Metrics().CacheEntries; live != int64(cached) {
		t.Errorf("%d sequences alive, %d cached", live, cached)
	}
}

func TestOpenAIModelsAndErrors(t *testing.T) {
	ts := newTestServer(t, service.Options{ContextLength: 100}, Options{APIKey: "sekrit"}, constant("ok"))
	models, err := client(ts, "sekrit").ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Models) != 1 || models.Models[0].ID != "qwen-test" {
		t.Errorf("models %+v", models)
	}
	_, err = client(ts, "wrong").ListModels(context.Background())
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 401 {
		t.Errorf("wrong key: %v", err)
	}
	long := strings.Repeat("long ", 30)
	_, err = client(ts, "sekrit").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: long}},
	})
	prompt := len(ts.tok.Encode("<|im_start|>user\n" + strings.TrimSpace(long) + "<|im_end|>\n<|im_start|>assistant\n<think>\n"))
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 || !strings.Contains(apiErr.Message, " 100 ") ||
		!strings.Contains(apiErr.Message, fmt.Sprintf(" %d ", prompt)) || apiErr.Code != "context_length_exceeded" {
		t.Errorf("over-long prompt: %v", err)
	}
}
