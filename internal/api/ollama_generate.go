package api

import (
	"encoding/json"
	"net/http"
	"time"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// MaxOllamaContext bounds the token ids of /api/generate's "context".
const MaxOllamaContext = 1 << 20

// ollamaGenerateRequest is an /api/generate body: one prompt, through the
// template unless raw.
type ollamaGenerateRequest struct {
	Model    string          `json:"model"`
	Prompt   string          `json:"prompt"`
	Suffix   string          `json:"suffix"`
	System   string          `json:"system"`
	Template string          `json:"template"`
	Context  []int           `json:"context"`
	Raw      bool            `json:"raw"`
	Images   []string        `json:"images"`
	Stream   *bool           `json:"stream"`
	Think    json.RawMessage `json:"think"`
	Format   json.RawMessage `json:"format"`
	Options  ollamaOptions   `json:"options"`
	// KeepAlive is as in ollamaChatRequest.
	KeepAlive ollamaKeepAlive `json:"keep_alive"`

	Logprobs    bool `json:"logprobs"`
	TopLogprobs *int `json:"top_logprobs"`

	// images are Images read by toService.
	imgs imageSet
}

// toService maps the request; the prompt of a request with a suffix or
// that continues a "context" is completed by the caller.
func (o *ollamaGenerateRequest) toService() (*service.Request, error) {
	switch {
	case len(o.Images) > 0 && (o.Raw || o.Suffix != "" || len(o.Context) > 0):
		// Those prompts reach the model as token ids without the
		// template, which is what places an image in the prompt.
		return nil, badParam("images", "images go through the chat template: send them without raw, suffix or context")
	case o.Template != "":
		return nil, badParam("template", "template overrides are not supported: the model's own chat template is used (send raw:true with a prompt you formatted)")
	case len(o.Context) > MaxOllamaContext:
		return nil, badParam("context", "context holds %d tokens, more than %d", len(o.Context), MaxOllamaContext)
	}
	req, err := o.Options.request()
	if err != nil {
		return nil, err
	}
	if req.Grammar, err = ollamaFormat(o.Format); err != nil {
		return nil, err
	}
	if req.Logprobs, req.TopLogprobs, err = logprobsParams(o.Logprobs, o.TopLogprobs); err != nil {
		return nil, err
	}
	if o.Raw {
		p := o.Prompt
		req.Prompt = &p
		return req, nil
	}
	if o.System != "" {
		req.Messages = append(req.Messages, chattemplate.Message{Role: "system", Content: chattemplate.TextContent(o.System)})
	}
	content, err := o.imgs.ollamaContent("images", o.Images, o.Prompt)
	if err != nil {
		return nil, err
	}
	req.Messages = append(req.Messages, chattemplate.Message{Role: "user", Content: content})
	req.Kwargs = ollamaThink(o.Think)
	return req, nil
}

type ollamaGenerateResponse struct {
	Model      string `json:"model"`
	CreatedAt  string `json:"created_at"`
	Response   string `json:"response"`
	Thinking   string `json:"thinking,omitempty"`
	Done       bool   `json:"done"`
	DoneReason string `json:"done_reason,omitempty"`
	// Context is the prompt's and reply's token ids, which a client may send
	// back to continue from them.
	Context []int `json:"context,omitempty"`
	// Logprobs are those of the chunk's tokens: all of them in a reply not
	// streamed.
	Logprobs []chatTokenLogprob `json:"logprobs,omitempty"`
	ollamaMetrics
}

func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request) error {
	clock := newOllamaClock()
	var body ollamaGenerateRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	name := s.svc.Info().Name
	chunk := func() ollamaGenerateResponse {
		return ollamaGenerateResponse{Model: name, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	}
	if body.Prompt == "" && len(body.Context) == 0 {
		// An empty prompt is how clients load (or, with keep_alive 0,
		// unload) a model.
		done := chunk()
		done.Done, done.DoneReason = true, ollamaLoadReason(body.KeepAlive)
		httpgate.WriteJSON(w, http.StatusOK, done)
		return nil
	}
	req, err := body.toService()
	if err != nil {
		return err
	}
	if err := s.readImages(r.Context(), req, &body.imgs); err != nil {
		return err
	}
	req.Client = clientOf(r)
	if body.Suffix != "" {
		// Fill-in-the-middle, which Ollama renders through the
		// template's suffix form: the system prompt has no place in it.
		fim, stop, err := s.fim(fimInput{Prefix: body.Prompt, Suffix: body.Suffix}, req.Stop)
		if err != nil {
			return err
		}
		req.PromptTokens, req.Stop, req.Messages, req.Kwargs = fim, stop, nil, nil
	}
	prompt, err := s.svc.Tokens(r.Context(), req)
	if err != nil {
		return err
	}
	if len(body.Context) > 0 {
		// The reply continues the earlier exchange: its tokens, then this
		// prompt as the model would have read it.
		tok := s.svc.Tokenizer()
		for _, id := range body.Context {
			if !tok.Has(id) {
				return badParam("context", "context holds %d, which is no token of this model", id)
			}
		}
		// In ids: decoded and read again, text the exchange held as
		// plain characters would come back as control tokens.
		prompt = append(append([]int(nil), body.Context...), prompt...)
		req.Prompt, req.PromptTokens, req.Messages = nil, prompt, nil
	}
	g, err := s.svc.Begin(r.Context(), req)
	if err != nil {
		if body.Suffix != "" {
			return overflow(err, overflowCode)
		}
		return overflow(err, overflowPrompt)
	}
	defer g.Close()
	var content string
	final := func(sum service.Summary) ollamaGenerateResponse {
		done := chunk()
		done.Done, done.DoneReason = true, ollamaDoneReason(sum)
		done.Context = append(prompt, s.svc.Tokenizer().Encode(content)...)
		done.ollamaMetrics = clock.metrics(sum)
		done.Logprobs = ollamaLogprobs(body.Logprobs, g.TakeLogprobs())
		return done
	}
	if body.Stream != nil && !*body.Stream {
		var res reply.Result
		sum, err := g.Run(r.Context(), func(e reply.Event) error { clock.event(); res.Add(e); return nil })
		if err != nil {
			return err
		}
		content = res.Content
		out := final(sum)
		out.Response, out.Thinking = res.Content, res.Reasoning
		httpgate.WriteJSON(w, http.StatusOK, out)
		return nil
	}
	st := s.startStream(w, r, false)
	defer st.close()
	sum, err := g.Run(r.Context(), func(e reply.Event) error {
		clock.event()
		c := chunk()
		switch e.Kind {
		case reply.KindReasoning:
			c.Thinking = e.Text
		case reply.KindContent:
			c.Response = e.Text
			content += e.Text
		default:
			return nil
		}
		c.Logprobs = ollamaLogprobs(body.Logprobs, g.TakeLogprobs())
		return st.send(c)
	})
	if err != nil {
		if r.Context().Err() == nil && st.failed() == nil {
			st.send(map[string]string{"error": errorFor(err, s.logger).Message})
		}
		return nil
	}
	st.send(final(sum))
	return nil
}
