package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// responsesRequest is a POST /v1/responses body in OpenAI's Responses API,
// as the openai SDK, the AI SDK and Codex send it. A stored response
// (store, true unless false) is kept in memory (see responseStore) for
// previous_response_id and item_reference; prompt_cache_key needs nothing,
// as the prefix cache finds the shared start of the prompt by itself.
// Fields that change nothing here (include, metadata, client_metadata,
// truncation, user, ...) are accepted and ignored.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []responsesTool `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	PromptCacheKey     string          `json:"prompt_cache_key"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Reasoning          *struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Text *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	sample.Overrides
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`

	// store resolves previous_response_id and item references; the
	// handler sets it before the body is read.
	store *responseStore
	// conversation is every input item, the previous response's first and
	// references resolved, and own the items this request added, once read.
	conversation, own []json.RawMessage
	// modelTools tell what each tool offered to the model stands for.
	modelTools map[string]modelTool
	// images are the input_image parts read by toService.
	imgs imageSet
}

// stored reports whether the response is to be stored: OpenAI's default.
func (q *responsesRequest) stored() bool { return q.Store == nil || *q.Store }

// responsesItem is one input item of any type; which fields are set
// depends on Type.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Namespace string          `json:"namespace"`
	Output    json.RawMessage `json:"output"`
	// Input is a custom tool call's; ID and Action a local shell call's.
	Input   string          `json:"input"`
	ID      string          `json:"id"`
	Action  json.RawMessage `json:"action"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// responsesPart is a content part of a message, function output or
// reasoning item.
type responsesPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// ImageURL and FileID are an input_image's.
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
}

func (q *responsesRequest) toService() (*service.Request, error) {
	q.modelTools = map[string]modelTool{}
	msgs, err := q.messages()
	if err != nil {
		return nil, err
	}
	switch {
	case len(msgs) == 0:
		return nil, badParam("input", "input must hold at least one message")
	case len(msgs) > MaxMessages:
		return nil, badParam("input", "%d messages are more than the %d allowed", len(msgs), MaxMessages)
	case len(q.Tools) > MaxTools:
		return nil, badParam("tools", "%d tools are more than the %d allowed", len(q.Tools), MaxTools)
	}
	limit, err := maxTokens(q.MaxOutputTokens)
	if err != nil {
		return nil, badParam("max_output_tokens", "max_output_tokens must be 1 to %d, not %d", MaxReplyTokens, *q.MaxOutputTokens)
	}
	req := &service.Request{Messages: msgs, MaxTokens: limit, Sampling: q.Overrides}
	if q.Text != nil {
		if req.Grammar, err = textFormat(q.Text.Format); err != nil {
			return nil, err
		}
	}
	if req.ToolChoice, err = openAIToolChoice(q.ToolChoice); err != nil {
		return nil, err
	}
	if req.ToolChoice.Mode != service.ToolsNone {
		if req.Tools, err = offerTools(q.Tools, "", nil, q.modelTools); err != nil {
			return nil, err
		}
	}
	var effort *string
	if q.Reasoning != nil {
		effort = q.Reasoning.Effort
	}
	req.Kwargs = thinkingKwargs(q.ChatTemplateKwargs, nil, effort)
	return req, nil
}

// messages maps instructions and input to chat messages: an assistant's
// reasoning, text and function calls, which come as separate items, join
// into one assistant message as the chat template takes it.
func (q *responsesRequest) messages() ([]chattemplate.Message, error) {
	var msgs []chattemplate.Message
	if q.Instructions != nil && *q.Instructions != "" {
		msgs = append(msgs, chattemplate.Message{Role: "system", Content: chattemplate.TextContent(*q.Instructions)})
	}
	if err := q.resolve(); err != nil {
		return nil, err
	}
	items := make([]responsesItem, len(q.conversation))
	for i, raw := range q.conversation {
		if err := json.Unmarshal(raw, &items[i]); err != nil {
			return nil, badParam("input", "input item %d is malformed: %v", i, err)
		}
	}
	var reasoning *string
	// assistant is the assistant message the next items join, or nil.
	assistant := func() *chattemplate.Message {
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			return &msgs[n-1]
		}
		msgs = append(msgs, chattemplate.Message{Role: "assistant", ReasoningContent: reasoning})
		reasoning = nil
		return &msgs[len(msgs)-1]
	}
	for i, it := range items {
		where := fmt.Sprintf("input item %d", i)
		switch it.Type {
		case "message", "":
			switch it.Role {
			case "user", "system", "developer":
				content, err := q.imgs.itemContent(where, fmt.Sprintf("input[%d].content", i), it.Content)
				if err != nil {
					return nil, err
				}
				msgs = append(msgs, chattemplate.Message{Role: it.Role, Content: content})
				continue
			}
			text, err := itemText(where, it.Content)
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "assistant":
				m := assistant()
				if m.Content != nil && m.Content.Text != nil {
					text = *m.Content.Text + text
				}
				m.Content = chattemplate.TextContent(text)
			default:
				return nil, badParam("input", "%s has role %q; roles are user, assistant, system and developer", where, it.Role)
			}
		case "reasoning":
			var text string
			var parts []responsesPart
			if len(it.Content) > 0 && json.Unmarshal(it.Content, &parts) == nil {
				for _, p := range parts {
					text += p.Text
				}
			}
			if text == "" {
				for _, s := range it.Summary {
					text += s.Text
				}
			}
			if text != "" {
				reasoning = &text
			}
		case "function_call":
			if it.Name == "" || it.CallID == "" {
				return nil, badParam("input", "%s: a function_call needs a name and a call_id", where)
			}
			// Arguments that are not a JSON object go to the template as
			// text (see chattemplate.RenderRequest), not refused: a
			// history the client got wrong would fail every later turn.
			raw, _ := json.Marshal(it.Arguments)
			m := assistant()
			m.ToolCalls = append(m.ToolCalls, chattemplate.ToolCall{ID: it.CallID, Type: "function",
				Function: chattemplate.FunctionCall{Name: modelName(it.Namespace, it.Name), Arguments: raw}})
		case "custom_tool_call":
			if it.Name == "" || it.CallID == "" {
				return nil, badParam("input", "%s: a custom_tool_call needs a name and a call_id", where)
			}
			m := assistant()
			m.ToolCalls = append(m.ToolCalls, chattemplate.ToolCall{ID: it.CallID, Type: "function",
				Function: chattemplate.FunctionCall{Name: modelName(it.Namespace, it.Name), Arguments: customArguments(it.Input)}})
		case "local_shell_call":
			// Codex's local shell: the call's action (the command, its
			// directory and timeout) is what the model gave.
			id := it.CallID
			if id == "" {
				id = it.ID
			}
			args := it.Action
			if firstNonSpace(args) != '{' {
				args = json.RawMessage("{}")
			}
			m := assistant()
			m.ToolCalls = append(m.ToolCalls, chattemplate.ToolCall{ID: id, Type: "function",
				Function: chattemplate.FunctionCall{Name: "local_shell", Arguments: args}})
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			if it.CallID == "" && it.Type == "local_shell_call_output" {
				it.CallID = it.ID // OpenAI names the call by id here
			}
			if it.CallID == "" {
				return nil, badParam("input", "%s: a %s needs the call_id of its call", where, it.Type)
			}
			content, err := q.imgs.itemContent(where, fmt.Sprintf("input[%d].output", i), it.Output)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, chattemplate.Message{Role: "tool", ToolCallID: it.CallID, Content: content})
		default:
			return nil, badParam("input", "%s has type %q, which this server cannot take (it takes message, reasoning, function_call, custom_tool_call, local_shell_call, their outputs and item_reference)", where, it.Type)
		}
	}
	return msgs, nil
}

// resolve reads input into q.conversation: the items of the previous
// response, if any, then those of input with each item_reference replaced
// by the stored item it names.
func (q *responsesRequest) resolve() error {
	var one string
	var input []json.RawMessage
	if err := json.Unmarshal(q.Input, &one); err == nil {
		raw, _ := json.Marshal(struct {
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content string `json:"content"`
		}{"message", "user", one})
		input = []json.RawMessage{raw}
	} else if err := json.Unmarshal(q.Input, &input); err != nil {
		return badParam("input", "input must be a string or a list of items")
	}
	q.conversation = nil
	if id := q.PreviousResponseID; id != nil && *id != "" {
		prev, ok := q.store.conversation(*id)
		if !ok {
			e := badParam("previous_response_id", "previous response %q was not found: this server keeps the last %d stored responses in memory, not across restarts, and stores none sent with store false; send the whole conversation in input", *id, MaxStoredResponses)
			e.Code = "previous_response_not_found"
			return e
		}
		q.conversation = append(q.conversation, prev...)
	}
	referenced := 0
	for i, raw := range input {
		var ref struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		}
		if json.Unmarshal(raw, &ref) == nil && ref.Type == "item_reference" {
			item, ok := q.store.item(ref.ID)
			if !ok {
				return badParam("input", "input item %d refers to item %q, which was not found: this server keeps the items of the last %d stored responses in memory, not across restarts; send the item itself", i, ref.ID, MaxStoredResponses)
			}
			if referenced += len(item); referenced > MaxReferencedBytes {
				return badParam("input", "the items that input refers to hold more than %d MiB in all, as much as one request may send: send the later items themselves, or continue with previous_response_id", MaxReferencedBytes>>20)
			}
			raw = item
		}
		q.conversation = append(q.conversation, raw)
		q.own = append(q.own, raw)
	}
	return nil
}

// itemContent reads content given as a string or as parts of text and
// input_image; param is its path in the request, for the images' errors.
// Content without images is one string, as itemText reads it.
func (s *imageSet) itemContent(where, param string, raw json.RawMessage) (*chattemplate.Content, error) {
	var parts []responsesPart
	if firstNonSpace(raw) != '[' || json.Unmarshal(raw, &parts) != nil ||
		!slices.ContainsFunc(parts, func(p responsesPart) bool { return p.Type == "input_image" }) {
		text, err := itemText(where, raw)
		return chattemplate.TextContent(text), err
	}
	out := make([]chattemplate.ContentPart, 0, len(parts))
	for k, p := range parts {
		switch {
		case p.Type == "input_image" && p.ImageURL != "":
			part, err := s.addURL(fmt.Sprintf("%s[%d].image_url", param, k), p.ImageURL)
			if err != nil {
				return nil, err
			}
			out = append(out, part)
		case p.Type == "input_image":
			// A file_id names an upload to OpenAI's Files API, which
			// this server does not keep.
			return nil, errImage(fmt.Sprintf("%s[%d]", param, k), "an input_image needs image_url as a data: URL (data:image/png;base64,...); file_id names an upload this server does not have")
		case chattemplate.TextPart(p.Type) || p.Type == "refusal":
			out = append(out, chattemplate.ContentPart{Type: "text", Text: p.Text})
		default:
			return nil, notText(where, p.Type)
		}
	}
	return &chattemplate.Content{Parts: out}, nil
}

// itemText reads content given as a string or as text parts.
func itemText(where string, raw json.RawMessage) (string, error) {
	var one string
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if err := json.Unmarshal(raw, &one); err == nil {
		return one, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam("input", "%s: content must be a string or a list of parts", where)
	}
	text := ""
	for _, p := range parts {
		if !chattemplate.TextPart(p.Type) && p.Type != "refusal" {
			return "", notText(where, p.Type)
		}
		text += p.Text
	}
	return text, nil
}

// The shapes of a Responses API response.
type (
	responseObject struct {
		ID                 string            `json:"id"`
		Object             string            `json:"object"`
		CreatedAt          int64             `json:"created_at"`
		Status             string            `json:"status"`
		Model              string            `json:"model"`
		Output             []*outputItem     `json:"output"`
		Usage              *responsesUsage   `json:"usage"`
		Error              *responseError    `json:"error"`
		IncompleteDetails  *incompleteReason `json:"incomplete_details"`
		Instructions       *string           `json:"instructions"`
		MaxOutputTokens    *int              `json:"max_output_tokens"`
		ParallelToolCalls  bool              `json:"parallel_tool_calls"`
		PreviousResponseID *string           `json:"previous_response_id"`
		Store              bool              `json:"store"`
		Temperature        *float64          `json:"temperature"`
		TopP               *float64          `json:"top_p"`
		ToolChoice         json.RawMessage   `json:"tool_choice"`
		Tools              []responsesTool   `json:"tools"`
		Text               json.RawMessage   `json:"text"`
		Truncation         string            `json:"truncation"`
		Metadata           struct{}          `json:"metadata"`
	}
	// outputItem is a message, reasoning or function_call item; pointers
	// and omitempty keep the fields of its type.
	outputItem struct {
		Type      string         `json:"type"`
		ID        string         `json:"id"`
		Status    string         `json:"status"`
		Role      string         `json:"role,omitempty"`
		Content   *[]*outputPart `json:"content,omitempty"`
		Summary   *[]outputPart  `json:"summary,omitempty"`
		CallID    string         `json:"call_id,omitempty"`
		Name      string         `json:"name,omitempty"`
		Namespace string         `json:"namespace,omitempty"`
		Arguments *string        `json:"arguments,omitempty"`
		// Input is a custom_tool_call's, taken from the arguments the
		// model gave (args) once they are whole.
		Input *string `json:"input,omitempty"`
		args  string
	}
	outputPart struct {
		Type        string    `json:"type"`
		Text        string    `json:"text"`
		Annotations *[]string `json:"annotations,omitempty"`
		Logprobs    *[]string `json:"logprobs,omitempty"`
	}
	responsesUsage struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int `json:"total_tokens"`
	}
	responseError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	incompleteReason struct {
		Reason string `json:"reason"`
	}
)

// responseBuilder builds the output items from the reply's events and,
// when streaming, sends the events that announce each item, part and
// delta, with the indices the SDKs accumulate by.
type responseBuilder struct {
	resp *responseObject
	// tools tell the tool each name the model calls stands for.
	tools map[string]modelTool
	open  bool // the last item still takes deltas
	seq   int
	send  func(event string, v map[string]any) error
}

func (b *responseBuilder) emit(event string, v map[string]any) error {
	if b.send == nil {
		return nil
	}
	v["type"] = event
	v["sequence_number"] = b.seq
	b.seq++
	return b.send(event, v)
}

func (b *responseBuilder) last() (*outputItem, int) {
	n := len(b.resp.Output) - 1
	return b.resp.Output[n], n
}

func (b *responseBuilder) add(e reply.Event) error {
	switch e.Kind {
	case reply.KindReasoning:
		return b.text("reasoning", "reasoning_text", e.Text)
	case reply.KindContent:
		return b.text("message", "output_text", e.Text)
	case reply.KindToolStart:
		empty := ""
		t, ok := b.tools[e.Name]
		if !ok {
			t = modelTool{name: e.Name}
		}
		if t.custom {
			return b.start(&outputItem{Type: "custom_tool_call", ID: newID("ctc_"), Status: "in_progress", CallID: e.ID, Name: t.name, Namespace: t.namespace, Input: &empty})
		}
		return b.start(&outputItem{Type: "function_call", ID: newID("fc_"), Status: "in_progress", CallID: e.ID, Name: t.name, Namespace: t.namespace, Arguments: &empty})
	case reply.KindToolArgs:
		if !b.open || e.Text == "" {
			return nil
		}
		it, n := b.last()
		if it.Type == "custom_tool_call" {
			// Its input is known once the arguments are whole.
			it.args += e.Text
			return nil
		}
		if it.Type != "function_call" {
			return nil
		}
		*it.Arguments += e.Text
		return b.emit("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": n, "delta": e.Text})
	case reply.KindToolEnd:
		return b.stop()
	}
	return nil
}

// text appends to the open item of typ, or opens one with a content part
// of partType.
func (b *responseBuilder) text(typ, partType, text string) error {
	if text == "" {
		return nil
	}
	if it, _ := b.lastOpen(); it == nil || it.Type != typ {
		item := &outputItem{Type: typ, ID: newID("msg_"), Status: "in_progress", Content: &[]*outputPart{}}
		if typ == "reasoning" {
			item.ID, item.Summary = newID("rs_"), &[]outputPart{}
		} else {
			item.Role = "assistant"
		}
		if err := b.start(item); err != nil {
			return err
		}
		part := &outputPart{Type: partType}
		if typ == "message" {
			part.Annotations, part.Logprobs = &[]string{}, &[]string{}
		}
		*item.Content = append(*item.Content, part)
		if err := b.emit("response.content_part.added", map[string]any{"item_id": item.ID, "output_index": len(b.resp.Output) - 1,
			"content_index": 0, "part": part}); err != nil {
			return err
		}
	}
	it, n := b.last()
	(*it.Content)[0].Text += text
	ev := map[string]any{"item_id": it.ID, "output_index": n, "content_index": 0, "delta": text}
	if typ == "message" {
		ev["logprobs"] = []string{}
		return b.emit("response.output_text.delta", ev)
	}
	return b.emit("response.reasoning_text.delta", ev)
}

func (b *responseBuilder) lastOpen() (*outputItem, int) {
	if !b.open {
		return nil, -1
	}
	return b.last()
}

func (b *responseBuilder) start(it *outputItem) error {
	if err := b.stop(); err != nil {
		return err
	}
	b.resp.Output = append(b.resp.Output, it)
	b.open = true
	return b.emit("response.output_item.added", map[string]any{"output_index": len(b.resp.Output) - 1, "item": it})
}

// stop closes the open item with its done events.
func (b *responseBuilder) stop() error {
	if !b.open {
		return nil
	}
	b.open = false
	it, n := b.last()
	switch it.Type {
	case "custom_tool_call":
		*it.Input = customInputOf(it.args)
		ev := map[string]any{"item_id": it.ID, "output_index": n}
		if *it.Input != "" {
			ev["delta"] = *it.Input
			if err := b.emit("response.custom_tool_call_input.delta", ev); err != nil {
				return err
			}
		}
		if err := b.emit("response.custom_tool_call_input.done", map[string]any{"item_id": it.ID, "output_index": n, "input": *it.Input}); err != nil {
			return err
		}
	case "function_call":
		if !json.Valid([]byte(*it.Arguments)) {
			return fmt.Errorf("api: function call %q has arguments that are not JSON: %q", it.Name, *it.Arguments)
		}
		if err := b.emit("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": n,
			"name": it.Name, "arguments": *it.Arguments}); err != nil {
			return err
		}
	default:
		part := (*it.Content)[0]
		done := "response.output_text.done"
		ev := map[string]any{"item_id": it.ID, "output_index": n, "content_index": 0, "text": part.Text}
		if it.Type == "reasoning" {
			done = "response.reasoning_text.done"
		} else {
			ev["logprobs"] = []string{}
		}
		if err := b.emit(done, ev); err != nil {
			return err
		}
		if err := b.emit("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": n,
			"content_index": 0, "part": part}); err != nil {
			return err
		}
	}
	it.Status = "completed"
	return b.emit("response.output_item.done", map[string]any{"output_index": n, "item": it})
}

// finish records the summary: status, usage and why it is incomplete.
func (b *responseBuilder) finish(sum service.Summary) {
	r := b.resp
	r.Status = "completed"
	if sum.Finish == service.FinishLength {
		r.Status = "incomplete"
		r.IncompleteDetails = &incompleteReason{Reason: "max_output_tokens"}
	}
	u := &responsesUsage{InputTokens: sum.PromptTokens, OutputTokens: sum.CompletionTokens,
		TotalTokens: sum.PromptTokens + sum.CompletionTokens}
	u.InputTokensDetails.CachedTokens = sum.CachedTokens
	r.Usage = u
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) error {
	body := responsesRequest{store: s.stored}
	g, err := s.begin(r, &body)
	if err != nil {
		return err
	}
	defer g.Close()
	resp := &responseObject{ID: newID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Model: s.svc.Info().Name, Output: []*outputItem{}, Instructions: body.Instructions, MaxOutputTokens: body.MaxOutputTokens,
		ParallelToolCalls: body.ParallelToolCalls == nil || *body.ParallelToolCalls, Temperature: body.Temperature, TopP: body.TopP,
		ToolChoice: body.ToolChoice, Tools: body.Tools, Text: json.RawMessage(`{"format":{"type":"text"}}`), Truncation: "disabled",
		PreviousResponseID: body.PreviousResponseID, Store: body.stored()}
	if len(resp.ToolChoice) == 0 {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if resp.Tools == nil {
		resp.Tools = []responsesTool{}
	}
	if body.Text != nil && len(body.Text.Format) > 0 {
		resp.Text, _ = json.Marshal(body.Text)
	}
	b := &responseBuilder{resp: resp, tools: body.modelTools}
	if !body.Stream {
		sum, err := g.Run(r.Context(), b.add)
		if err == nil {
			err = b.stop()
		}
		if err != nil {
			return err
		}
		b.finish(sum)
		s.keep(&body, resp)
		httpgate.WriteJSON(w, http.StatusOK, resp)
		return nil
	}
	st := s.startStream(w, r, true)
	defer st.close()
	b.send = func(event string, v map[string]any) error { return st.sendEvent(event, v) }
	if b.emit("response.created", map[string]any{"response": resp}) != nil ||
		b.emit("response.in_progress", map[string]any{"response": resp}) != nil {
		return nil
	}
	sum, err := g.Run(r.Context(), b.add)
	if err == nil {
		err = b.stop()
	}
	if err != nil {
		if r.Context().Err() == nil && st.failed() == nil {
			e := errorFor(err, s.logger)
			resp.Status = "failed"
			code, _ := e.Code.(string)
			if code == "" {
				code = e.Type
			}
			resp.Error = &responseError{Code: code, Message: e.Message}
			b.emit("response.failed", map[string]any{"response": resp})
		}
		return nil
	}
	b.finish(sum)
	s.keep(&body, resp)
	event := "response.completed"
	if resp.Status == "incomplete" {
		event = "response.incomplete"
	}
	b.emit(event, map[string]any{"response": resp})
	return nil
}

// keep stores a finished response that asked to be stored.
func (s *Server) keep(q *responsesRequest, resp *responseObject) {
	if !q.stored() {
		return
	}
	own := append([]json.RawMessage(nil), q.own...)
	conversation := append([]json.RawMessage(nil), q.conversation...)
	for _, it := range resp.Output {
		raw, err := json.Marshal(it)
		if err != nil {
			continue
		}
		conversation = append(conversation, raw)
		own = append(own, raw)
	}
	s.stored.put(resp.ID, conversation, own)
}

func (q *responsesRequest) images() *imageSet { return &q.imgs }
