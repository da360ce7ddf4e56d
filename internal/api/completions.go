package api

import (
	"encoding/json"
	"net/http"
	"time"

	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// DefaultCompletionTokens is the reply limit of /v1/completions when the
// request sets none, as in the OpenAI API.
const DefaultCompletionTokens = 16

// completionRequest is a /v1/completions body: a raw prompt, no template.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	// Suffix, when set, asks for the text between the prompt and it
	// (fill-in-the-middle).
	Suffix        *string `json:"suffix"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens *int `json:"max_tokens"`
	N         *int `json:"n"`
	Echo      bool `json:"echo"`
	// Logprobs is how many alternatives to report per token; set (0
	// too) it asks for the tokens' logprobs.
	Logprobs *int `json:"logprobs"`
	sample.Overrides
	Stop stopList `json:"stop"`
}

// prompt reads "prompt": a string, or a list holding one string.
func (c *completionRequest) prompt() (string, error) {
	var one string
	if err := json.Unmarshal(c.Prompt, &one); err == nil {
		return one, nil
	}
	var list []string
	if err := json.Unmarshal(c.Prompt, &list); err == nil && len(list) == 1 {
		return list[0], nil
	}
	return "", badParam("prompt", "prompt must be a string (or a list of exactly one string)")
}

type (
	completion struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   *usage             `json:"usage"`
	}
	completionChoice struct {
		Index        int                 `json:"index"`
		Text         string              `json:"text"`
		FinishReason *string             `json:"finish_reason"`
		Logprobs     *completionLogprobs `json:"logprobs"`
	}
)

func (s *Server) completions(w http.ResponseWriter, r *http.Request) error {
	var body completionRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	prompt, err := body.prompt()
	if err != nil {
		return err
	}
	if err := checkN(body.N); err != nil {
		return err
	}
	limit, err := maxTokens(body.MaxTokens)
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = DefaultCompletionTokens
	}
	req := &service.Request{Prompt: &prompt, MaxTokens: limit, Stop: body.Stop, Sampling: body.Overrides, Client: clientOf(r)}
	if body.Suffix != nil {
		fim, stop, err := s.fim(fimInput{Prefix: prompt, Suffix: *body.Suffix}, body.Stop)
		if err != nil {
			return err
		}
		req.Prompt, req.PromptTokens, req.Stop = nil, fim, stop
	}
	if n := body.Logprobs; n != nil {
		if *n < 0 || *n > sample.MaxTopLogprobs {
			return badParam("logprobs", "logprobs %d must be in [0, %d]", *n, sample.MaxTopLogprobs)
		}
		req.Logprobs, req.TopLogprobs = true, *n
	}
	g, err := s.svc.Begin(r.Context(), req)
	if err != nil {
		if body.Suffix != nil {
			return overflow(err, overflowCode)
		}
		return overflow(err, overflowPrompt)
	}
	defer g.Close()
	head := completion{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: s.svc.Info().Name}
	echo := ""
	if body.Echo {
		echo = prompt
	}
	if !body.Stream {
		text := echo
		sum, err := g.Run(r.Context(), func(e reply.Event) error { text += e.Text; return nil })
		if err != nil {
			return err
		}
		finish := string(sum.Finish)
		offset := len(echo)
		head.Choices = []completionChoice{{Text: text, FinishReason: &finish, Logprobs: completionLogprobsOf(req.Logprobs, sum.Logprobs, &offset)}}
		head.Usage = usageOf(sum)
		httpgate.WriteJSON(w, http.StatusOK, head)
		return nil
	}
	st := s.startStream(w, r, true)
	defer st.close()
	chunk := func(text string, finish *string, lp *completionLogprobs) error {
		c := head
		c.Choices = []completionChoice{{Text: text, FinishReason: finish, Logprobs: lp}}
		return st.send(c)
	}
	if echo != "" && chunk(echo, nil, nil) != nil {
		return nil
	}
	// Each chunk carries its tokens' logprobs, offsets counted over the
	// whole text; the last one those of tokens held back.
	offset := len(echo)
	taken := func() *completionLogprobs {
		if lps := g.TakeLogprobs(); len(lps) > 0 {
			return completionLogprobsOf(req.Logprobs, lps, &offset)
		}
		return nil
	}
	sum, err := g.Run(r.Context(), func(e reply.Event) error { return chunk(e.Text, nil, taken()) })
	if err != nil {
		s.streamFailed(st, r, err)
		return nil
	}
	finish := string(sum.Finish)
	if chunk("", &finish, taken()) != nil {
		return nil
	}
	if body.StreamOptions != nil && body.StreamOptions.IncludeUsage {
		c := head
		c.Choices = []completionChoice{}
		c.Usage = usageOf(sum)
		if st.send(c) != nil {
			return nil
		}
	}
	st.write("data: [DONE]\n\n")
	return nil
}
