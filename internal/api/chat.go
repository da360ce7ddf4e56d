package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// chatRequest is a /v1/chat/completions body. Fields that clients send but
// that change nothing here (user, parallel_tool_calls, prompt_cache_key,
// ...) are accepted and ignored.
type chatRequest struct {
	Model    string         `json:"model"`
	Messages []chatInputMsg `json:"messages"`
	Stream   bool           `json:"stream"`

	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	N                   *int `json:"n"`
	sample.Overrides
	Stop stopList `json:"stop"`

	Tools      []chattemplate.Tool `json:"tools"`
	ToolChoice json.RawMessage     `json:"tool_choice"`
	// Functions and FunctionCall are the legacy forms of tools and
	// tool_choice, which older clients still send.
	Functions    []chattemplate.FunctionDef `json:"functions"`
	FunctionCall json.RawMessage            `json:"function_call"`

	ResponseFormat     json.RawMessage            `json:"response_format"`
	ReasoningEffort    *string                    `json:"reasoning_effort"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	// EnableThinking is the switch some clients send at the top level.
	EnableThinking *bool `json:"enable_thinking"`

	Logprobs    *bool `json:"logprobs"`
	TopLogprobs *int  `json:"top_logprobs"`

	// images are the image_url parts read by toService.
	imgs imageSet
}

// chatInputMsg is a message of the request: the template's, with the
// legacy functions API's function_call of an assistant.
type chatInputMsg struct {
	chattemplate.Message
	FunctionCall *chattemplate.FunctionCall `json:"function_call"`
}

// legacy reports a request in the legacy functions API, which is answered
// in it: a function_call, not tool_calls.
func (c *chatRequest) legacy() bool { return len(c.Functions) > 0 && len(c.Tools) == 0 }

// templateMessages maps the messages for the template: a legacy
// function_call becomes the assistant's tool call, and a message of role
// function the tool's result.
func (c *chatRequest) templateMessages() []chattemplate.Message {
	msgs := make([]chattemplate.Message, len(c.Messages))
	for i, in := range c.Messages {
		m := in.Message
		if in.FunctionCall != nil && len(m.ToolCalls) == 0 {
			m.ToolCalls = []chattemplate.ToolCall{{Type: "function", Function: *in.FunctionCall}}
		}
		if m.Role == "function" {
			m.Role = "tool"
		}
		msgs[i] = m
	}
	return msgs
}

// toService checks the request and maps it to the service's.
func (c *chatRequest) toService() (*service.Request, error) {
	switch {
	case len(c.Messages) == 0:
		return nil, badParam("messages", "messages must hold at least one message")
	case len(c.Messages) > MaxMessages:
		return nil, badParam("messages", "%d messages are more than the %d allowed", len(c.Messages), MaxMessages)
	case len(c.Tools) > MaxTools:
		return nil, badParam("tools", "%d tools are more than the %d allowed", len(c.Tools), MaxTools)
	}
	if err := checkN(c.N); err != nil {
		return nil, err
	}
	msgs := c.templateMessages()
	if err := c.imgs.fromParts(msgs); err != nil {
		return nil, err
	}
	tools := c.Tools
	for i, f := range c.Functions {
		if f.Name == "" {
			return nil, badParam("functions", "function %d needs a name", i)
		}
		tools = append(tools, chattemplate.Tool{Type: "function", Function: f})
	}
	if len(tools) > MaxTools {
		return nil, badParam("tools", "%d tools are more than the %d allowed", len(tools), MaxTools)
	}
	limit, err := maxTokens(c.MaxCompletionTokens, c.MaxTokens)
	if err != nil {
		return nil, err
	}
	req := &service.Request{Messages: msgs, Tools: tools, MaxTokens: limit, Stop: c.Stop, Sampling: c.Overrides}
	if req.Logprobs, req.TopLogprobs, err = logprobsParams(c.Logprobs != nil && *c.Logprobs, c.TopLogprobs); err != nil {
		return nil, err
	}
	if req.Grammar, err = responseFormat(c.ResponseFormat); err != nil {
		return nil, err
	}
	choice := c.ToolChoice
	read := openAIToolChoice
	if len(choice) == 0 {
		choice, read = c.FunctionCall, functionCall
	}
	if req.ToolChoice, err = read(choice); err != nil {
		return nil, err
	}
	if req.ToolChoice.Mode == service.ToolsNone {
		req.Tools = nil
	}
	req.Kwargs = thinkingKwargs(c.ChatTemplateKwargs, c.EnableThinking, c.ReasoningEffort)
	return req, nil
}

// imageURL is an image_url part's image_url: an object with url (and
// detail, which changes nothing: the processor sizes every image alike), or
// the URL string itself, as a few clients send it.
type imageURL struct {
	URL string
	// object is set when it came as an object.
	object bool
}

func (u *imageURL) UnmarshalJSON(b []byte) error {
	if firstNonSpace(b) == '"' {
		return json.Unmarshal(b, &u.URL)
	}
	var o struct {
		URL string `json:"url"`
	}
	err := json.Unmarshal(b, &o)
	*u = imageURL{URL: o.URL, object: true}
	return err
}

// fromParts takes the image_url parts of msgs into s, each replaced by
// the template's image part, and refuses the other parts that are not text
// (input_audio, file), which the model cannot read, rather than dropping
// them.
func (s *imageSet) fromParts(msgs []chattemplate.Message) error {
	for i, m := range msgs {
		if m.Content == nil || m.Content.Parts == nil {
			continue
		}
		parts := slices.Clone(m.Content.Parts)
		for j, p := range parts {
			if chattemplate.TextPart(p.Type) {
				continue
			}
			where := fmt.Sprintf("messages[%d].content[%d]", i, j)
			if p.Type != "image_url" {
				return notText(where, p.Type)
			}
			raw, err := p.MarshalJSON()
			if err != nil {
				return err
			}
			var f struct {
				ImageURL imageURL `json:"image_url"`
			}
			where += ".image_url"
			if err := json.Unmarshal(raw, &f); err != nil || f.ImageURL.URL == "" {
				return errImage(where, "an image_url part needs image_url.url, a data: URL such as data:image/png;base64,...")
			}
			if f.ImageURL.object {
				where += ".url"
			}
			if parts[j], err = s.addURL(where, f.ImageURL.URL); err != nil {
				return err
			}
		}
		msgs[i].Content = &chattemplate.Content{Parts: parts}
	}
	return nil
}

// thinkingKwargs returns the template variables with enable_thinking set
// from the switches clients use, in order of precedence:
// chat_template_kwargs.enable_thinking, a top-level enable_thinking, and
// reasoning_effort ("none" means off, any other effort on).
func thinkingKwargs(kwargs map[string]json.RawMessage, enable *bool, effort *string) map[string]json.RawMessage {
	out := maps.Clone(kwargs)
	if out == nil {
		out = map[string]json.RawMessage{}
	}
	if _, ok := out["enable_thinking"]; ok {
		return out
	}
	switch {
	case enable != nil:
		out["enable_thinking"], _ = json.Marshal(*enable)
	case effort != nil:
		out["enable_thinking"], _ = json.Marshal(*effort != "none")
	}
	return out
}

// The shapes of chat completion responses.
type (
	chatCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		// Usage is null in stream chunks until the last, as OpenAI sends.
		Usage *usage `json:"usage"`
	}
	chatChoice struct {
		Index        int           `json:"index"`
		Message      *chatMessage  `json:"message,omitempty"`
		Delta        *chatMessage  `json:"delta,omitempty"`
		FinishReason *string       `json:"finish_reason"`
		Logprobs     *chatLogprobs `json:"logprobs"`
	}
	// chatLogprobs is a choice's logprobs: one entry per reply token.
	chatLogprobs struct {
		Content []chatTokenLogprob `json:"content"`
	}
	chatTokenLogprob struct {
		Token       string           `json:"token"`
		Logprob     float64          `json:"logprob"`
		Bytes       []int            `json:"bytes"`
		TopLogprobs []chatTopLogprob `json:"top_logprobs"`
	}
	chatTopLogprob struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	chatMessage struct {
		Role             string     `json:"role,omitempty"`
		Content          *string    `json:"content,omitempty"`
		ReasoningContent *string    `json:"reasoning_content,omitempty"`
		Reasoning        *string    `json:"reasoning,omitempty"`
		ToolCalls        []toolCall `json:"tool_calls,omitempty"`
		// FunctionCall answers a request in the legacy functions API.
		FunctionCall *toolFunction `json:"function_call,omitempty"`
	}
	toolCall struct {
		Index    *int         `json:"index,omitempty"`
		ID       string       `json:"id,omitempty"`
		Type     string       `json:"type,omitempty"`
		Function toolFunction `json:"function"`
	}
	toolFunction struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

func usageOf(sum service.Summary) *usage {
	u := &usage{PromptTokens: sum.PromptTokens, CompletionTokens: sum.CompletionTokens,
		TotalTokens: sum.PromptTokens + sum.CompletionTokens}
	u.PromptTokensDetails.CachedTokens = sum.CachedTokens
	return u
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) error {
	var body chatRequest
	g, err := s.begin(r, &body)
	if err != nil {
		return err
	}
	defer g.Close()
	head := chatCompletion{ID: newID("chatcmpl-"), Created: time.Now().Unix(), Model: s.svc.Info().Name}
	if body.Stream {
		s.streamChat(w, r, g, head, body.StreamOptions != nil && body.StreamOptions.IncludeUsage, body.Logprobs != nil && *body.Logprobs, body.legacy())
		return nil
	}
	var res reply.Result
	sum, err := g.Run(r.Context(), func(e reply.Event) error { res.Add(e); return nil })
	if err != nil {
		return err
	}
	msg := &chatMessage{Role: "assistant", Content: &res.Content}
	if res.Reasoning != "" {
		msg.ReasoningContent, msg.Reasoning = &res.Reasoning, &res.Reasoning
	}
	for _, c := range res.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: c.ID, Type: "function", Function: toolFunction{Name: c.Name, Arguments: c.Arguments}})
	}
	if len(msg.ToolCalls) > 0 && res.Content == "" {
		msg.Content = nil // as OpenAI answers a reply that only calls tools
	}
	finish := string(sum.Finish)
	if body.legacy() && len(msg.ToolCalls) > 0 {
		// The legacy API has one call per reply.
		msg.FunctionCall, msg.ToolCalls, finish = &msg.ToolCalls[0].Function, nil, legacyFinish
	}
	head.Object = "chat.completion"
	head.Choices = []chatChoice{{Message: msg, FinishReason: &finish, Logprobs: chatLogprobsOf(body.Logprobs != nil && *body.Logprobs, sum.Logprobs)}}
	head.Usage = usageOf(sum)
	httpgate.WriteJSON(w, http.StatusOK, head)
	return nil
}

// streamChat sends the reply as chat.completion.chunk events.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, g *service.Generation, head chatCompletion, includeUsage, logprobs, legacy bool) {
	head.Object = "chat.completion.chunk"
	st := s.startStream(w, r, true)
	defer st.close()
	chunk := func(delta *chatMessage, finish *string, lp *chatLogprobs) error {
		c := head
		c.Choices = []chatChoice{{Delta: delta, FinishReason: finish, Logprobs: lp}}
		return st.send(c)
	}
	empty := ""
	if chunk(&chatMessage{Role: "assistant", Content: &empty}, nil, nil) != nil {
		return
	}
	// Each chunk carries its tokens' logprobs (clients append each
	// chunk's content list), the last one those of tokens held back.
	taken := func() *chatLogprobs {
		if lps := g.TakeLogprobs(); len(lps) > 0 {
			return chatLogprobsOf(logprobs, lps)
		}
		return nil
	}
	sum, err := g.Run(r.Context(), func(e reply.Event) error {
		d := chatDelta(e)
		if legacy {
			d = legacyDelta(d)
		}
		if d != nil {
			return chunk(d, nil, taken())
		}
		return nil
	})
	if err != nil {
		s.streamFailed(st, r, err)
		return
	}
	finish := string(sum.Finish)
	if legacy && sum.Finish == service.FinishToolCalls {
		finish = legacyFinish
	}
	if chunk(&chatMessage{}, &finish, taken()) != nil {
		return
	}
	if includeUsage {
		c := head
		c.Choices = []chatChoice{}
		c.Usage = usageOf(sum)
		if st.send(c) != nil {
			return
		}
	}
	st.write("data: [DONE]\n\n")
}

// streamFailed ends a stream that broke after its headers were sent: the
// error goes out as an event, unless the client is gone.
func (s *Server) streamFailed(st *stream, r *http.Request, err error) {
	if r.Context().Err() != nil || st.failed() != nil {
		return
	}
	e := errorFor(err, s.logger)
	if st.send(struct {
		Error *apiError `json:"error"`
	}{e}) == nil {
		st.write("data: [DONE]\n\n")
	}
}

// chatDelta is the delta of one reply event; nil for events that carry
// nothing to send (the end of a tool call).
func chatDelta(e reply.Event) *chatMessage {
	text := e.Text
	switch e.Kind {
	case reply.KindReasoning:
		return &chatMessage{ReasoningContent: &text, Reasoning: &text}
	case reply.KindContent:
		return &chatMessage{Content: &text}
	case reply.KindToolStart:
		i := e.Index
		return &chatMessage{ToolCalls: []toolCall{{Index: &i, ID: e.ID, Type: "function", Function: toolFunction{Name: e.Name}}}}
	case reply.KindToolArgs:
		i := e.Index
		return &chatMessage{ToolCalls: []toolCall{{Index: &i, Function: toolFunction{Arguments: text}}}}
	}
	return nil
}

// legacyFinish is the finish reason of a reply that calls a function in the
// legacy functions API.
const legacyFinish = "function_call"

// legacyDelta is a delta in the legacy functions API: the first tool
// call's name and arguments as function_call; later calls, which the
// legacy API cannot express, are dropped.
func legacyDelta(d *chatMessage) *chatMessage {
	if d == nil || d.ToolCalls == nil {
		return d
	}
	c := d.ToolCalls[0]
	if c.Index != nil && *c.Index > 0 {
		return nil
	}
	return &chatMessage{FunctionCall: &toolFunction{Name: c.Function.Name, Arguments: c.Function.Arguments}}
}

func (c *chatRequest) images() *imageSet { return &c.imgs }
