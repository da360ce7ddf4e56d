package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// messagesRequest is a POST /v1/messages body in Anthropic's Messages API.
// Fields that change nothing here (metadata, service_tier, cache_control on
// blocks, ...) are accepted and ignored.
type messagesRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	System        anthropicContent   `json:"system"`
	Messages      []anthropicMessage `json:"messages"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	TopK          *int               `json:"top_k"`
	StopSequences []string           `json:"stop_sequences"`
	Stream        bool               `json:"stream"`
	Tools         []anthropicTool    `json:"tools"`
	ToolChoice    *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	// Thinking switches reasoning: "enabled" or "adaptive" on, "disabled"
	// off; absent leaves the model's default (on). The budget cannot be
	// enforced apart from max_tokens and is ignored.
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	// OutputFormat (the structured-outputs beta) or OutputConfig's format
	// constrain the reply to a JSON schema.
	OutputFormat json.RawMessage `json:"output_format"`
	OutputConfig json.RawMessage `json:"output_config"`

	// images are the image blocks read by toService.
	imgs imageSet
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content anthropicContent `json:"content"`
}

// anthropicBlock is one content block of any type; which fields are set
// depends on Type.
type anthropicBlock struct {
	Type      string           `json:"type"`
	Text      string           `json:"text"`
	Thinking  string           `json:"thinking"`
	ID        string           `json:"id"`
	Name      string           `json:"name"`
	Input     json.RawMessage  `json:"input"`
	ToolUseID string           `json:"tool_use_id"`
	Content   anthropicContent `json:"content"`
	// ToolName is a tool_reference's; Tool a tool_addition's or
	// tool_removal's (see toolSet).
	ToolName string      `json:"tool_name"`
	Tool     *toolChange `json:"tool"`
	// Source is an image's.
	Source *anthropicSource `json:"source"`
}

// anthropicSource is where an image block's picture is: inline as base64
// (the only kind read), or by url or file_id.
type anthropicSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// addBlock takes an image block's picture; where names the block.
func (s *imageSet) addBlock(where string, b anthropicBlock) (chattemplate.ContentPart, error) {
	where += ".source"
	switch {
	case b.Source == nil:
		return chattemplate.ContentPart{}, errImage(where, "an image block needs a source")
	case b.Source.Type == "url":
		return chattemplate.ContentPart{}, errRemoteImage(where)
	case b.Source.Type != "base64":
		return chattemplate.ContentPart{}, errImage(where, "source.type %q cannot be read; send {\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":...}", b.Source.Type)
	}
	return s.addBase64(where, b.Source.MediaType, b.Source.Data)
}

// anthropicContent is content as clients send it: a string (one text
// block) or a list of blocks.
type anthropicContent []anthropicBlock

func (c *anthropicContent) UnmarshalJSON(b []byte) error {
	*c = nil
	switch firstNonSpace(b) {
	case 'n':
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = anthropicContent{{Type: "text", Text: s}}
		return nil
	case '[':
		var blocks []anthropicBlock
		err := json.Unmarshal(b, &blocks)
		var ae *apiError
		switch {
		case errors.As(err, &ae):
			return err
		case err != nil:
			return badParam("content", "a content block is malformed: %v", err)
		}
		*c = blocks
		return nil
	}
	return badParam("content", "content must be a string or a list of content blocks")
}

type anthropicTool struct {
	// Type is "custom" or empty for a tool the client runs; Anthropic's
	// server tools (web search, code execution, ...) have other types.
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// DeferLoading keeps the tool from the model until tool search loads
	// it (see toolSet).
	DeferLoading bool `json:"defer_loading"`
}

// emptySchema stands for a tool sent without input_schema.
const emptySchema = `{"type":"object","properties":{}}`

// toService checks the request and maps it to the service's: the system
// prompt becomes a system message, tool_result blocks tool messages, and an
// assistant's tool_use and thinking blocks its tool calls and reasoning.
func (m *messagesRequest) toService() (*service.Request, error) {
	switch {
	case len(m.Messages) == 0:
		return nil, badParam("messages", "messages must hold at least one message")
	case len(m.Messages) > MaxMessages:
		return nil, badParam("messages", "%d messages are more than the %d allowed", len(m.Messages), MaxMessages)
	case len(m.Tools) > MaxTools:
		return nil, badParam("tools", "%d tools are more than the %d allowed", len(m.Tools), MaxTools)
	}
	limit, err := maxTokens(m.MaxTokens)
	if err != nil {
		return nil, err
	}
	req := &service.Request{MaxTokens: limit, Stop: m.StopSequences, Sampling: sample.Overrides{Temperature: m.Temperature, TopP: m.TopP, TopK: m.TopK}}
	if req.Grammar, err = anthropicFormat(m.OutputFormat, m.OutputConfig); err != nil {
		return nil, err
	}
	system, err := textParts(m.System, "system")
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(system, func(p chattemplate.ContentPart) bool { return p.Text != "" }) {
		req.Messages = append(req.Messages, chattemplate.Message{Role: "system", Content: &chattemplate.Content{Parts: system}})
	}
	if _, err := toolsOf(m.Tools); err != nil {
		return nil, err
	}
	tools := newToolSet(m.Tools)
	for i, msg := range m.Messages {
		var out []chattemplate.Message
		switch msg.Role {
		case "user":
			out, err = userMessages(i, msg.Content, tools, &m.imgs)
		case "assistant":
			out, err = assistantMessage(i, msg.Content)
		case "system":
			// Claude Code's mid-conversation-system beta puts system
			// messages among the turns; the template normalisation places
			// them where the model takes them.
			out, err = systemMessage(i, msg.Content, tools)
		default:
			err = badParam("messages", "message %d has role %q; roles are user, assistant and system", i, msg.Role)
		}
		if err != nil {
			return nil, err
		}
		req.Messages = append(req.Messages, out...)
	}
	if req.Tools, err = toolsOf(tools.offered()); err != nil {
		return nil, err
	}
	if m.ToolChoice != nil {
		if req.ToolChoice, err = anthropicToolChoice(m.ToolChoice.Type, m.ToolChoice.Name); err != nil {
			return nil, err
		}
	}
	if req.ToolChoice.Mode == service.ToolsNone {
		req.Tools = nil
	}
	var enable *bool
	if m.Thinking != nil {
		on := true
		switch m.Thinking.Type {
		case "enabled", "adaptive":
		case "disabled":
			on = false
		default:
			return nil, badParam("thinking", "thinking.type must be \"enabled\", \"adaptive\" or \"disabled\", not %q", m.Thinking.Type)
		}
		enable = &on
	}
	req.Kwargs = thinkingKwargs(nil, enable, nil)
	return req, nil
}

// textParts are the text blocks of content (the system prompt's); anything
// else is refused, images because the template takes none there.
func textParts(content anthropicContent, where string) ([]chattemplate.ContentPart, error) {
	parts := make([]chattemplate.ContentPart, 0, len(content))
	for _, b := range content {
		if b.Type != "text" {
			return nil, blockError(where, b.Type)
		}
		parts = append(parts, chattemplate.ContentPart{Type: "text", Text: b.Text})
	}
	return parts, nil
}

func blockError(where, typ string) error {
	switch typ {
	case "image":
		return badParam("messages", "%s holds an image, which may only come in a user turn or a tool_result", where)
	case "document":
		return notText(where, typ)
	}
	return badParam("messages", "%s holds a block of type %q, which is not allowed there", where, typ)
}

// systemMessage maps a system message among the turns: its text, and the
// tool list changes it makes.
func systemMessage(i int, content anthropicContent, tools *toolSet) ([]chattemplate.Message, error) {
	where := fmt.Sprintf("message %d", i)
	var parts []chattemplate.ContentPart
	for _, b := range content {
		switch b.Type {
		case "text":
			parts = append(parts, chattemplate.ContentPart{Type: "text", Text: b.Text})
		case "tool_addition", "tool_removal":
			if err := tools.change(where, b); err != nil {
				return nil, err
			}
		default:
			return nil, blockError(where, b.Type)
		}
	}
	if len(content) > 0 && len(parts) == 0 {
		return nil, nil // only tool changes: nothing to render here
	}
	return []chattemplate.Message{{Role: "system", Content: &chattemplate.Content{Parts: parts}}}, nil
}

// userMessages maps a user turn: its text and images as a user message,
// each tool_result as a tool message, in the order they come.
func userMessages(i int, content anthropicContent, tools *toolSet, images *imageSet) ([]chattemplate.Message, error) {
	where := fmt.Sprintf("message %d", i)
	var out []chattemplate.Message
	var text []chattemplate.ContentPart
	flush := func() {
		if len(text) > 0 {
			out = append(out, chattemplate.Message{Role: "user", Content: &chattemplate.Content{Parts: text}})
			text = nil
		}
	}
	for j, b := range content {
		switch b.Type {
		case "text":
			text = append(text, chattemplate.ContentPart{Type: "text", Text: b.Text})
		case "image":
			part, err := images.addBlock(fmt.Sprintf("messages[%d].content[%d]", i, j), b)
			if err != nil {
				return nil, err
			}
			text = append(text, part)
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, badParam("messages", "%s: a tool_result needs the tool_use_id of its call", where)
			}
			parts, err := tools.toolResultParts(where+"'s tool_result", fmt.Sprintf("messages[%d].content[%d].content", i, j), b.Content, images)
			if err != nil {
				return nil, err
			}
			flush()
			out = append(out, chattemplate.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: &chattemplate.Content{Parts: parts}})
		default:
			return nil, blockError(where, b.Type)
		}
	}
	flush()
	if len(out) == 0 {
		// An empty turn is still a turn; the template renders it empty.
		out = append(out, chattemplate.Message{Role: "user", Content: chattemplate.TextContent("")})
	}
	return out, nil
}

// assistantMessage maps an assistant turn: text, reasoning and tool calls.
func assistantMessage(i int, content anthropicContent) ([]chattemplate.Message, error) {
	where := fmt.Sprintf("message %d", i)
	msg := chattemplate.Message{Role: "assistant"}
	var text []chattemplate.ContentPart
	var reasoning strings.Builder
	for _, b := range content {
		switch b.Type {
		case "text":
			text = append(text, chattemplate.ContentPart{Type: "text", Text: b.Text})
		case "thinking":
			reasoning.WriteString(b.Thinking)
		case "redacted_thinking":
			// Encrypted by another server: nothing to read.
		case "tool_use":
			// An input that is not an object goes to the template as it
			// is (see chattemplate.RenderRequest), not refused.
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			if b.Name == "" {
				return nil, badParam("messages", "%s: a tool_use needs a name", where)
			}
			msg.ToolCalls = append(msg.ToolCalls, chattemplate.ToolCall{ID: b.ID, Type: "function",
				Function: chattemplate.FunctionCall{Name: b.Name, Arguments: input}})
		default:
			return nil, blockError(where, b.Type)
		}
	}
	if len(text) > 0 || len(msg.ToolCalls) == 0 {
		msg.Content = &chattemplate.Content{Parts: text}
		if text == nil {
			msg.Content = chattemplate.TextContent("")
		}
	}
	if reasoning.Len() > 0 {
		r := reasoning.String()
		msg.ReasoningContent = &r
	}
	return []chattemplate.Message{msg}, nil
}

// toolsOf maps the tools to the template's function tools.
func toolsOf(tools []anthropicTool) ([]chattemplate.Tool, error) {
	var out []chattemplate.Tool
	for i, t := range tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, badParam("tools", "tool %d (%s) is one of Anthropic's server tools, which this server cannot run", i, t.Type)
		}
		if t.Name == "" {
			return nil, badParam("tools", "tool %d needs a name", i)
		}
		schema := t.InputSchema
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(emptySchema)
		}
		if firstNonSpace(schema) != '{' {
			return nil, badParam("tools", "the input_schema of tool %q must be a JSON object", t.Name)
		}
		out = append(out, chattemplate.Tool{Type: "function",
			Function: chattemplate.FunctionDef{Name: t.Name, Description: t.Description, Parameters: schema}})
	}
	return out, nil
}

func firstNonSpace(b []byte) byte {
	// Bytes, not a string: b may be a whole image's base64.
	s := bytes.TrimLeft(b, " \t\r\n")
	if len(s) == 0 {
		return 0
	}
	return s[0]
}

// The shapes of a Messages API response.
type (
	anthropicResponse struct {
		ID           string          `json:"id"`
		Type         string          `json:"type"`
		Role         string          `json:"role"`
		Model        string          `json:"model"`
		Content      []responseBlock `json:"content"`
		StopReason   *string         `json:"stop_reason"`
		StopSequence *string         `json:"stop_sequence"`
		Usage        anthropicUsage  `json:"usage"`
	}
	// responseBlock is a text, thinking or tool_use block; pointers keep
	// the fields of its type, empty ones included, and drop the others.
	responseBlock struct {
		Type      string          `json:"type"`
		Text      *string         `json:"text,omitempty"`
		Thinking  *string         `json:"thinking,omitempty"`
		Signature *string         `json:"signature,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
	}
	// anthropicUsage counts as Anthropic does: input_tokens are the prompt
	// tokens that were not read from the cache.
	anthropicUsage struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	}
)

func anthropicUsageOf(sum service.Summary) anthropicUsage {
	return anthropicUsage{InputTokens: sum.PromptTokens - sum.CachedTokens, OutputTokens: sum.CompletionTokens,
		CacheReadInputTokens: sum.CachedTokens}
}

// stopReason is the summary's finish in Anthropic's words, with the stop
// sequence that ended the reply (nil for the other reasons).
func stopReason(sum service.Summary) (reason string, sequence *string) {
	switch {
	case sum.Finish == service.FinishToolCalls:
		return "tool_use", nil
	case sum.Finish == service.FinishLength:
		return "max_tokens", nil
	case sum.StopSequence != "":
		seq := sum.StopSequence
		return "stop_sequence", &seq
	}
	return "end_turn", nil
}

// blockStream builds the reply's content blocks from its events, in the
// order they come, and tells send (when streaming) as each block starts,
// grows and stops.
type blockStream struct {
	blocks []responseBlock
	args   []string // per block, a tool_use's arguments so far
	open   bool     // the last block still takes deltas
	send   func(event string, v any) error
}

func (b *blockStream) emit(event string, v any) error {
	if b.send == nil {
		return nil
	}
	return b.send(event, v)
}

func (b *blockStream) add(e reply.Event) error {
	switch e.Kind {
	case reply.KindReasoning:
		return b.text("thinking", e.Text)
	case reply.KindContent:
		return b.text("text", e.Text)
	case reply.KindToolStart:
		return b.start(responseBlock{Type: "tool_use", ID: e.ID, Name: e.Name, Input: json.RawMessage("{}")})
	case reply.KindToolArgs:
		if !b.open || b.blocks[len(b.blocks)-1].Type != "tool_use" || e.Text == "" {
			return nil
		}
		b.args[len(b.args)-1] += e.Text
		return b.emit("content_block_delta", blockDelta{Type: "content_block_delta", Index: len(b.blocks) - 1,
			Delta: deltaBody{Type: "input_json_delta", PartialJSON: &e.Text}})
	case reply.KindToolEnd:
		return b.stop()
	}
	return nil
}

// text appends to the open text or thinking block, or opens one.
func (b *blockStream) text(typ, text string) error {
	if text == "" {
		return nil
	}
	if !b.open || b.blocks[len(b.blocks)-1].Type != typ {
		empty := ""
		blk := responseBlock{Type: typ, Text: &empty}
		if typ == "thinking" {
			// Thinking blocks carry a signature that Anthropic's servers
			// check on the way back; this server checks none.
			sig := ""
			blk = responseBlock{Type: typ, Thinking: &empty, Signature: &sig}
		}
		if err := b.start(blk); err != nil {
			return err
		}
	}
	i := len(b.blocks) - 1
	d := deltaBody{Type: "text_delta", Text: &text}
	if typ == "thinking" {
		*b.blocks[i].Thinking += text
		d = deltaBody{Type: "thinking_delta", Thinking: &text}
	} else {
		*b.blocks[i].Text += text
	}
	return b.emit("content_block_delta", blockDelta{Type: "content_block_delta", Index: i, Delta: d})
}

func (b *blockStream) start(blk responseBlock) error {
	if err := b.stop(); err != nil {
		return err
	}
	b.blocks = append(b.blocks, blk)
	b.args = append(b.args, "")
	b.open = true
	return b.emit("content_block_start", struct {
		Type         string        `json:"type"`
		Index        int           `json:"index"`
		ContentBlock responseBlock `json:"content_block"`
	}{"content_block_start", len(b.blocks) - 1, blk})
}

// stop closes the open block; a tool_use gets its whole input.
func (b *blockStream) stop() error {
	if !b.open {
		return nil
	}
	b.open = false
	i := len(b.blocks) - 1
	if b.blocks[i].Type == "tool_use" && b.args[i] != "" {
		if !json.Valid([]byte(b.args[i])) {
			return fmt.Errorf("api: tool call %q has arguments that are not JSON: %q", b.blocks[i].Name, b.args[i])
		}
		b.blocks[i].Input = json.RawMessage(b.args[i])
	}
	return b.emit("content_block_stop", struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{"content_block_stop", i})
}

type (
	blockDelta struct {
		Type  string    `json:"type"`
		Index int       `json:"index"`
		Delta deltaBody `json:"delta"`
	}
	deltaBody struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		Thinking    *string `json:"thinking,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
)

func (s *Server) messages(w http.ResponseWriter, r *http.Request) error {
	var body messagesRequest
	g, err := s.begin(r, &body)
	if err != nil {
		return err
	}
	defer g.Close()
	head := anthropicResponse{ID: newID("msg_"), Type: "message", Role: "assistant", Model: s.svc.Info().Name,
		Content: []responseBlock{}}
	if body.Stream {
		s.streamMessage(w, r, g, head)
		return nil
	}
	var blocks blockStream
	sum, err := g.Run(r.Context(), blocks.add)
	if err == nil {
		err = blocks.stop()
	}
	if err != nil {
		return err
	}
	if blocks.blocks != nil {
		head.Content = blocks.blocks
	}
	reason, seq := stopReason(sum)
	head.StopReason, head.StopSequence = &reason, seq
	head.Usage = anthropicUsageOf(sum)
	httpgate.WriteJSON(w, http.StatusOK, head)
	return nil
}

// streamMessage sends the reply as Anthropic's server-sent events.
func (s *Server) streamMessage(w http.ResponseWriter, r *http.Request, g *service.Generation, head anthropicResponse) {
	st := s.startStream(w, r, true)
	defer st.close()
	// message_start goes out with the reply's first event, once the prefix
	// cache was read, so that its usage says what message_delta's will
	// (pings keep the stream alive meanwhile).
	started := false
	start := func() error {
		if started {
			return nil
		}
		started = true
		head.Usage = anthropicUsage{InputTokens: g.PromptTokens() - g.CachedTokens(), CacheReadInputTokens: g.CachedTokens()}
		return st.sendEvent("message_start", struct {
			Type    string            `json:"type"`
			Message anthropicResponse `json:"message"`
		}{"message_start", head})
	}
	blocks := blockStream{send: func(event string, v any) error {
		if err := start(); err != nil {
			return err
		}
		return st.sendEvent(event, v)
	}}
	sum, err := g.Run(r.Context(), blocks.add)
	if err == nil {
		err = blocks.stop()
	}
	if err == nil {
		err = start()
	}
	if err != nil {
		if r.Context().Err() == nil && st.failed() == nil {
			st.sendEvent("error", anthropicErrorBody(errorFor(err, s.logger)))
		}
		return
	}
	reason, seq := stopReason(sum)
	delta := struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage anthropicUsage `json:"usage"`
	}{Type: "message_delta", Usage: anthropicUsageOf(sum)}
	delta.Delta.StopReason, delta.Delta.StopSequence = reason, seq
	if st.sendEvent("message_delta", delta) != nil {
		return
	}
	st.sendEvent("message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
}

// countTokens answers /v1/messages/count_tokens: the prompt's tokens as
// /v1/messages would render them.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) error {
	var body messagesRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	req, err := body.toService()
	if err != nil {
		return err
	}
	if err := s.countImages(req, &body.imgs); err != nil {
		return err
	}
	tokens, err := s.svc.Tokens(r.Context(), req)
	if err != nil {
		return err
	}
	httpgate.WriteJSON(w, http.StatusOK, struct {
		InputTokens int `json:"input_tokens"`
	}{len(tokens)})
	return nil
}

// anthropicContextMessage is a context overflow in Anthropic's words,
// which Claude Code reads: it compacts the conversation when the prompt
// alone is too long.
func anthropicContextMessage(ce *service.ContextError) string {
	return fmt.Sprintf("prompt is too long: %d tokens > %d maximum", ce.PromptTokens, ce.ContextLength)
}

// anthropicErrorTypes name an error status in Anthropic's words; other
// statuses are invalid_request_error below 500 and api_error from 500.
var anthropicErrorTypes = map[int]string{
	http.StatusUnauthorized:          "authentication_error",
	http.StatusForbidden:             "permission_error",
	http.StatusNotFound:              "not_found_error",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusTooManyRequests:       "rate_limit_error",
	http.StatusServiceUnavailable:    "overloaded_error",
}

type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func anthropicErrorBody(e *apiError) anthropicError {
	var out anthropicError
	out.Type = "error"
	out.Error.Message = e.Message
	out.Error.Type = anthropicErrorTypes[e.Status]
	if out.Error.Type == "" {
		out.Error.Type = "invalid_request_error"
		if e.Status >= http.StatusInternalServerError {
			out.Error.Type = "api_error"
		}
	}
	return out
}

func (m *messagesRequest) images() *imageSet { return &m.imgs }
