package service

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"petal/engine/chattemplate"
	"petal/engine/grammar"
	"petal/engine/reply"
	"petal/engine/sample"
)

// Request is one generation: a conversation for the chat template, or a raw
// prompt.
type Request struct {
	Messages []chattemplate.Message
	// Tools are offered to the model through the template, and their schemas
	// convert the arguments of its calls.
	Tools []chattemplate.Tool
	// Kwargs are extra template variables, enable_thinking among them.
	Kwargs map[string]json.RawMessage
	// Prompt, when set, is sent to the model as is instead of a rendered
	// conversation (the completions API); the reply is all content.
	Prompt *string
	// PromptTokens, when set, is a raw prompt already in token ids, taken
	// in place of Prompt: a fill-in-the-middle prompt, whose client code
	// is read as plain text between the markers, where tokenizing it as
	// one string would read "<|im_end|>" in the code as the control token.
	PromptTokens []int
	// Sampling overrides the checkpoint's defaults field by field.
	Sampling sample.Overrides
	// MaxTokens bounds the reply; 0, or more than the room the prompt
	// leaves, means up to the end of the context.
	MaxTokens int
	// ContextLimit, when above 0 and below the service's context, bounds
	// prompt and reply together as a smaller context would (Ollama's
	// num_ctx); the context the service was loaded with is the most.
	ContextLimit int
	// Stop strings end the reply and are not part of it.
	Stop []string
	// Grammar, when set, constrains the reply's content (after any
	// reasoning) to its JSON texts: structured outputs.
	Grammar *grammar.Grammar
	// ToolChoice says whether the reply may, must or must not call one of
	// Tools.
	ToolChoice ToolChoice
	// Logprobs asks for each reply token's log probability (Summary.Logprobs)
	// and TopLogprobs (0..sample.MaxTopLogprobs) most likely alternatives.
	Logprobs    bool
	TopLogprobs int
	// Client names who asks, for the queue's fairness: requests of
	// different clients take turns. "" is a client like any other.
	Client string
	// Images are the pictures of Messages, in the order of their markers
	// in the rendered prompt.
	Images []Image
}

// ToolChoice is OpenAI's tool_choice and Anthropic's, in one.
type ToolChoice struct {
	Mode ToolMode
	// Name, with ToolsRequired, is the one tool the reply must call; ""
	// lets it call any of them.
	Name string
}

// ToolMode is what a request lets the reply do with its tools.
type ToolMode uint8

const (
	// ToolsAuto lets the model choose between text and a call.
	ToolsAuto ToolMode = iota
	// ToolsNone takes any call the model writes as text.
	ToolsNone
	// ToolsRequired holds the reply, after any reasoning, to one call in
	// the template's form, of the named tool or any, whose arguments obey
	// the tool's schema.
	ToolsRequired
)

// Thinking reports whether the request leaves thinking on: the template's
// enable_thinking variable, true unless set to false.
func (r *Request) Thinking() bool {
	raw, ok := r.Kwargs["enable_thinking"]
	if !ok {
		return true
	}
	var on bool
	if json.Unmarshal(raw, &on) != nil {
		return true
	}
	return on
}

// prepared is a request rendered, tokenized and checked.
type prepared struct {
	tokens    []int
	maxTokens int
	params    sample.Params
	bias      sample.LogitBias
	stopper   *sample.Stopper
	parser    *reply.Parser // nil for a raw prompt
	grammar   *grammar.Grammar
	// forced: the grammar is a forced tool call's, not a response format.
	forced bool
	// thinking: the reply starts inside the reasoning, which the grammar
	// does not constrain.
	thinking bool
	logprobs bool
	top      int
	// images are the request's images where their pads are in tokens.
	images []ImageSpan
	// cached is set by run once the prefix cache was read.
	cached int
	// logprobs of the reply tokens so far, as run adds them; the first
	// taken were handed out by TakeLogprobs.
	lps   []TokenLogprob
	taken int
}

// thinkOpen is the tag a prompt ends with when the reply starts inside the
// reasoning.
const thinkOpen = "<think>"

// MaxPreparing bounds the requests rendered and tokenized at once. That
// work comes before a request holds a place in the queue, and a 16 MB body
// takes several times its size while it runs: eight at once reached 5.9 GB.
const MaxPreparing = 2

// normalizeShrink bounds how much the tokenizer's normalization may shorten
// a text: NFC composes three Hangul jamo (9 bytes) into one syllable (3).
const normalizeShrink = 3

func (s *Service) prepare(ctx context.Context, req *Request) (*prepared, error) {
	select {
	case s.preparing <- struct{}{}:
		defer func() { <-s.preparing }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p := &prepared{grammar: req.Grammar}
	ctxLen := s.ctxLen
	if req.ContextLimit > 0 && req.ContextLimit < ctxLen {
		ctxLen = req.ContextLimit
	}
	raw := req.Prompt != nil || req.PromptTokens != nil
	var text string
	var err error
	if req.PromptTokens == nil {
		if text, err = s.promptText(ctx, req); err != nil {
			return nil, err
		}
	}
	if !raw {
		tools := make([]reply.Tool, len(req.Tools))
		for i, t := range req.Tools {
			tools[i] = reply.Tool{Name: t.Function.Name, Parameters: t.Function.Parameters}
		}
		p.thinking = strings.HasSuffix(strings.TrimRight(text, " \t\r\n"), thinkOpen)
		opts := reply.Options{Thinking: p.thinking, Tools: tools, CallsAsText: req.ToolChoice.Mode == ToolsNone}
		if p.parser, err = reply.New(opts); err != nil {
			return nil, &badRequest{err}
		}
		if req.ToolChoice.Mode == ToolsRequired {
			if p.grammar, err = forcedCall(req); err != nil {
				return nil, err
			}
			p.forced = true
		}
	}
	if req.PromptTokens != nil {
		if p.tokens, err = s.checkTokens(req.PromptTokens); err != nil {
			return nil, err
		}
	} else {
		if text == "" {
			return nil, badRequestf("the prompt is empty")
		}
		// No token is longer than maxTokenBytes, so a text this long cannot
		// fit: refused without tokenizing it (PromptTokens is then that bound).
		if least := len(text) / (normalizeShrink * s.maxTokenBytes); least >= ctxLen {
			return nil, &ContextError{PromptTokens: least, ContextLength: ctxLen}
		}
		p.tokens = s.tok.Encode(text)
	}
	if p.tokens, p.images, err = s.placeImages(p.tokens, req.Images); err != nil {
		return nil, err
	}
	if len(p.tokens) >= ctxLen {
		return nil, &ContextError{PromptTokens: len(p.tokens), ContextLength: ctxLen}
	}
	p.maxTokens = ctxLen - len(p.tokens)
	if req.MaxTokens < 0 {
		return nil, badRequestf("max_tokens %d must be positive", req.MaxTokens)
	}
	// A limit past the room left is lowered to it, as llama-server, Ollama
	// and LM Studio do: clients send their defaults (qwen-code 8,000,
	// Claude Code 32,000) whatever the context, and a reply cut there
	// finishes "length", which says it had no room to go on.
	if req.MaxTokens > 0 && req.MaxTokens < p.maxTokens {
		p.maxTokens = req.MaxTokens
	}
	if p.stopper, err = sample.NewStopper(req.Stop); err != nil {
		return nil, &badRequest{err}
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > sample.MaxTopLogprobs {
		return nil, badRequestf("top_logprobs %d must be in [0, %d]", req.TopLogprobs, sample.MaxTopLogprobs)
	}
	if req.TopLogprobs > 0 && !req.Logprobs {
		return nil, badRequestf("top_logprobs needs logprobs")
	}
	p.logprobs, p.top = req.Logprobs, req.TopLogprobs
	p.params = s.params(req)
	if err := p.params.Validate(); err != nil {
		return nil, &badRequest{err}
	}
	if err := req.Sampling.LogitBias.Validate(s.vocab); err != nil {
		return nil, &badRequest{err}
	}
	p.bias = req.Sampling.LogitBias
	return p, nil
}

// checkTokens copies a prompt given in token ids, refusing an empty one
// and ids the tokenizer does not know.
func (s *Service) checkTokens(ids []int) ([]int, error) {
	if len(ids) == 0 {
		return nil, badRequestf("the prompt is empty")
	}
	for _, id := range ids {
		if !s.tok.Has(id) {
			return nil, badRequestf("the prompt holds %d, which is no token of this model", id)
		}
	}
	return slices.Clone(ids), nil
}

// promptText is the raw prompt or the rendered conversation.
func (s *Service) promptText(ctx context.Context, req *Request) (string, error) {
	if req.Prompt != nil {
		return *req.Prompt, nil
	}
	return s.render(ctx, req)
}

// render applies the chat template to the messages normalised as OpenAI's
// API takes them (developer and late system messages, text parts).
func (s *Service) render(ctx context.Context, req *Request) (string, error) {
	if s.tmpl == nil {
		return "", badRequestf("the model has no chat template: use the completions API with a raw prompt")
	}
	if len(req.Messages) == 0 {
		return "", badRequestf("messages must not be empty")
	}
	in := chattemplate.Input{Messages: req.Messages, Tools: req.Tools, AddGenerationPrompt: true, Kwargs: req.Kwargs}
	text, err := s.tmpl.RenderRequest(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", &badRequest{err}
	}
	return text, nil
}

// params starts from the checkpoint's defaults for the request's mode and
// applies the request's settings.
func (s *Service) params(req *Request) sample.Params {
	preset := sample.PresetThinking
	if req.Prompt == nil && req.PromptTokens == nil && !req.Thinking() {
		preset = sample.PresetNonThinking
	}
	return req.Sampling.Apply(sample.Defaults(s.gen, preset))
}
