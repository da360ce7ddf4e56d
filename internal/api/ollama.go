package api

import (
	"encoding/json"
	"net/http"
	"time"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/internal/service"
)

// Ollama's API as the editors that list models only through it use it.
const (
	// OllamaVersion is the Ollama release whose API this subset follows;
	// clients check it against their minimum.
	OllamaVersion = "0.12.6"
	// ollamaArch is the architecture name under which /api/show gives the
	// context length ("<arch>.context_length").
	ollamaArch = "qwen35moe"
)

type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
	ToolName  string           `json:"tool_name,omitempty"`
}

type ollamaToolCall struct {
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type ollamaOptions struct {
	Temperature      *float64     `json:"temperature"`
	TopP             *float64     `json:"top_p"`
	TopK             *int         `json:"top_k"`
	MinP             *float64     `json:"min_p"`
	RepeatPenalty    *float64     `json:"repeat_penalty"`
	PresencePenalty  *float64     `json:"presence_penalty"`
	FrequencyPenalty *float64     `json:"frequency_penalty"`
	Seed             *json.Number `json:"seed"`
	NumPredict       *int         `json:"num_predict"`
	Stop             stopList     `json:"stop"`
}

type ollamaChatRequest struct {
	Model    string              `json:"model"`
	Messages []ollamaMessage     `json:"messages"`
	Stream   *bool               `json:"stream"`
	Think    json.RawMessage     `json:"think"`
	Tools    []chattemplate.Tool `json:"tools"`
	Options  ollamaOptions       `json:"options"`
}

// toService maps the request. "think" is a boolean or an effort name.
func (o *ollamaChatRequest) toService() (*service.Request, error) {
	if len(o.Messages) == 0 || len(o.Messages) > MaxMessages {
		return nil, badParam("messages", "send between 1 and %d messages", MaxMessages)
	}
	if len(o.Tools) > MaxTools {
		return nil, badParam("tools", "%d tools are more than the %d allowed", len(o.Tools), MaxTools)
	}
	msgs := make([]chattemplate.Message, len(o.Messages))
	for i, m := range o.Messages {
		msgs[i] = chattemplate.Message{Role: m.Role, Content: chattemplate.TextContent(m.Content), Name: m.ToolName}
		if m.Thinking != "" {
			msgs[i].ReasoningContent = &m.Thinking
		}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, chattemplate.ToolCall{Type: "function",
				Function: chattemplate.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
	}
	opt := o.Options
	samp, err := sampling{Temperature: opt.Temperature, TopP: opt.TopP, TopK: opt.TopK, MinP: opt.MinP,
		PresencePenalty: opt.PresencePenalty, FrequencyPenalty: opt.FrequencyPenalty,
		RepetitionPenalty: opt.RepeatPenalty, Seed: opt.Seed}.toService()
	if err != nil {
		return nil, err
	}
	req := &service.Request{Messages: msgs, Tools: o.Tools, Stop: opt.Stop, Sampling: samp}
	if opt.NumPredict != nil && *opt.NumPredict > 0 { // -1 and -2 mean no limit
		req.MaxTokens = *opt.NumPredict
	}
	var enable *bool
	var effort *string
	if json.Unmarshal(o.Think, &enable) != nil {
		json.Unmarshal(o.Think, &effort)
	}
	req.Kwargs = thinkingKwargs(nil, enable, effort)
	return req, nil
}

type ollamaChatResponse struct {
	Model      string        `json:"model"`
	CreatedAt  string        `json:"created_at"`
	Message    ollamaMessage `json:"message"`
	Done       bool          `json:"done"`
	DoneReason string        `json:"done_reason,omitempty"`
	// Durations are in nanoseconds, as Ollama reports them.
	TotalDuration   int64 `json:"total_duration,omitempty"`
	PromptEvalCount int   `json:"prompt_eval_count,omitempty"`
	EvalCount       int   `json:"eval_count,omitempty"`
}

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	var body ollamaChatRequest
	g, err := s.begin(r, &body)
	if err != nil {
		return err
	}
	defer g.Close()
	name := s.svc.Info().Name
	msg := func(m ollamaMessage) ollamaChatResponse {
		m.Role = "assistant"
		return ollamaChatResponse{Model: name, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Message: m}
	}
	args := map[int]string{}
	names := map[int]string{}
	// call turns a finished tool call into Ollama's form, arguments as an
	// object.
	call := func(i int) ollamaToolCall {
		var c ollamaToolCall
		c.Function.Name = names[i]
		c.Function.Arguments = json.RawMessage(args[i])
		return c
	}
	final := func(sum service.Summary, m ollamaMessage) ollamaChatResponse {
		resp := msg(m)
		resp.Done, resp.DoneReason = true, string(sum.Finish)
		if sum.Finish == service.FinishToolCalls {
			resp.DoneReason = string(service.FinishStop)
		}
		resp.TotalDuration = int64(time.Since(start))
		resp.PromptEvalCount, resp.EvalCount = sum.PromptTokens, sum.CompletionTokens
		return resp
	}
	if body.Stream != nil && !*body.Stream {
		var res reply.Result
		sum, err := g.Run(r.Context(), func(e reply.Event) error { res.Add(e); return nil })
		if err != nil {
			return err
		}
		m := ollamaMessage{Content: res.Content, Thinking: res.Reasoning}
		for i, c := range res.ToolCalls {
			names[i], args[i] = c.Name, c.Arguments
			m.ToolCalls = append(m.ToolCalls, call(i))
		}
		writeJSON(w, http.StatusOK, final(sum, m))
		return nil
	}
	st := startStream(w, false)
	sum, err := g.Run(r.Context(), func(e reply.Event) error {
		switch e.Kind {
		case reply.KindReasoning:
			return st.send(msg(ollamaMessage{Thinking: e.Text}))
		case reply.KindContent:
			return st.send(msg(ollamaMessage{Content: e.Text}))
		case reply.KindToolStart:
			names[e.Index] = e.Name
		case reply.KindToolArgs:
			args[e.Index] += e.Text
		case reply.KindToolEnd:
			return st.send(msg(ollamaMessage{ToolCalls: []ollamaToolCall{call(e.Index)}}))
		}
		return nil
	})
	if err != nil {
		if r.Context().Err() == nil && st.failed() == nil {
			st.send(map[string]string{"error": errorFor(err, s.logger).Message})
		}
		return nil
	}
	st.send(final(sum, ollamaMessage{}))
	return nil
}

func (s *Server) ollamaVersion(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"version": OllamaVersion})
	return nil
}

type ollamaDetails struct {
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

func (s *Server) ollamaDetails() ollamaDetails {
	return ollamaDetails{Format: "safetensors", Family: ollamaArch, Families: []string{ollamaArch}}
}

func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) error {
	info := s.svc.Info()
	type model struct {
		Name       string        `json:"name"`
		Model      string        `json:"model"`
		ModifiedAt string        `json:"modified_at"`
		Size       int64         `json:"size"`
		Digest     string        `json:"digest"`
		Details    ollamaDetails `json:"details"`
	}
	writeJSON(w, http.StatusOK, map[string][]model{"models": {{
		Name: info.Name, Model: info.Name, ModifiedAt: info.Created.UTC().Format(time.RFC3339), Details: s.ollamaDetails(),
	}}})
	return nil
}

// ollamaShow describes the model, whatever name the request gives.
func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	info := s.svc.Info()
	caps := []string{"completion"}
	if info.Chat {
		caps = append(caps, "tools", "thinking")
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile": "", "parameters": "", "template": "",
		"details": s.ollamaDetails(),
		"model_info": map[string]any{
			"general.architecture":         ollamaArch,
			"general.basename":             info.Name,
			ollamaArch + ".context_length": info.ContextLength,
			ollamaArch + ".vocab_size":     info.Vocab,
		},
		"capabilities": caps,
		"modified_at":  info.Created.UTC().Format(time.RFC3339),
	})
	return nil
}
