package api

import (
	"net/http"
	"slices"
	"time"

	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// Fill-in-the-middle: the model writes what goes between a prefix and a
// suffix, as editors ask for completions at the cursor. The prompt is
// Qwen's FIM form, which Qwen2.5-Coder documents and Qwen3's tokenizers
// keep (the demo's and Qwen3.6's have the tokens, <|fim_prefix|> is 6128
// in both):
//
//	<|fim_prefix|>PREFIX<|fim_suffix|>SUFFIX<|fim_middle|>
//
// and, with other files for context, the repository form before it:
//
//	<|repo_name|>NAME\n<|file_sep|>PATH\nTEXT ... <|file_sep|>PATH\n<|fim_prefix|>...
//
// The reply ends at the end-of-sequence ids (<|endoftext|> among them) or
// at any FIM token, which a model that finished the middle writes next.
const (
	fimPrefix   = "<|fim_prefix|>"
	fimSuffix   = "<|fim_suffix|>"
	fimMiddle   = "<|fim_middle|>"
	fimPad      = "<|fim_pad|>"
	fimRepoName = "<|repo_name|>"
	fimFileSep  = "<|file_sep|>"
)

// fimStops end a reply: the FIM tokens the model's tokenizer has.
var fimStops = []string{fimPrefix, fimSuffix, fimMiddle, fimPad, fimRepoName, fimFileSep}

// Names in the repository form that no client sends: llama.vscode's
// chunks have file names but the request names neither the repository
// nor the file being edited.
const (
	fimRepository  = "project"
	fimCurrentFile = "current"
)

// MaxFIMExtra bounds the files of context in one request (llama.vscode
// keeps 16 by default).
const MaxFIMExtra = 256

// fimChunk is a file of context: llama.cpp's input_extra entry.
type fimChunk struct {
	Filename string `json:"filename"`
	Text     string `json:"text"`
}

// fimInput is what a fill-in-the-middle request asks for.
type fimInput struct {
	Prefix, Suffix string
	// Middle is the start of the middle, written after <|fim_middle|>
	// (llama.cpp's "prompt": the cursor's line up to it).
	Middle string
	Extra  []fimChunk
}

// fim builds the prompt of in, in token ids, and the stop strings that
// end its reply (the FIM tokens, then the client's), or says the model
// cannot. The markers are the FIM tokens; the client's text between them
// is read as plain text (tokenizer.EncodeText), so code that holds
// "<|im_end|>" or "<|fim_middle|>" reaches the model as those characters,
// never as the control tokens.
func (s *Server) fim(in fimInput, stop []string) ([]int, []string, error) {
	tok := s.svc.Tokenizer()
	for _, t := range []string{fimPrefix, fimSuffix, fimMiddle} {
		if _, ok := tok.TokenID(t); !ok {
			return nil, nil, badParam("suffix", "this model cannot fill in the middle: its tokenizer has no %s token (it needs %s, %s and %s); send the prompt alone",
				t, fimPrefix, fimSuffix, fimMiddle)
		}
	}
	if len(in.Extra) > MaxFIMExtra {
		return nil, nil, badParam("input_extra", "input_extra holds %d files, more than %d", len(in.Extra), MaxFIMExtra)
	}
	var ids []int
	marker := func(t string) {
		id, _ := tok.TokenID(t)
		ids = append(ids, id)
	}
	text := func(t string) { ids = tok.AppendEncodeText(ids, t) }
	if len(in.Extra) > 0 {
		for _, t := range []string{fimRepoName, fimFileSep} {
			if _, ok := tok.TokenID(t); !ok {
				return nil, nil, badParam("input_extra", "this model cannot take other files for context: its tokenizer has no %s token", t)
			}
		}
		marker(fimRepoName)
		text(fimRepository + "\n")
		for _, c := range in.Extra {
			name := c.Filename
			if name == "" {
				name = "untitled"
			}
			marker(fimFileSep)
			text(name + "\n" + c.Text + "\n")
		}
		marker(fimFileSep)
		text(fimCurrentFile + "\n")
	}
	marker(fimPrefix)
	text(in.Prefix)
	marker(fimSuffix)
	text(in.Suffix)
	marker(fimMiddle)
	text(in.Middle)
	var stops []string
	for _, t := range fimStops {
		if _, ok := tok.TokenID(t); ok {
			stops = append(stops, t)
		}
	}
	if len(stops)+len(stop) > sample.MaxStops {
		return nil, nil, badParam("stop", "%d stop strings are more than the %d a fill-in-the-middle request may add to its own %d", len(stop), sample.MaxStops-len(stops), len(stops))
	}
	return ids, append(stops, stop...), nil
}

// fimCompletionRequest is a /v1/fim/completions body, Mistral's shape,
// which Continue's OpenAI adapter sends.
type fimCompletionRequest struct {
	Model         string  `json:"model"`
	Prompt        string  `json:"prompt"`
	Suffix        *string `json:"suffix"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens *int `json:"max_tokens"`
	// RandomSeed is Mistral's name of the seed.
	RandomSeed *sample.Seed `json:"random_seed"`
	sample.Overrides
	Stop stopList `json:"stop"`
}

// fimCompletions answers in the chat completion shape, as Mistral does:
// the middle is the message's content.
func (s *Server) fimCompletions(w http.ResponseWriter, r *http.Request) error {
	var body fimCompletionRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	limit, err := maxTokens(body.MaxTokens)
	if err != nil {
		return err
	}
	suffix := ""
	if body.Suffix != nil {
		suffix = *body.Suffix
	}
	prompt, stop, err := s.fim(fimInput{Prefix: body.Prompt, Suffix: suffix}, body.Stop)
	if err != nil {
		return err
	}
	samp := body.Overrides
	if samp.Seed == nil {
		samp.Seed = body.RandomSeed
	}
	g, err := s.svc.Begin(r.Context(), &service.Request{PromptTokens: prompt, MaxTokens: limit, Stop: stop, Sampling: samp, Client: clientOf(r)})
	if err != nil {
		return overflow(err, overflowCode)
	}
	defer g.Close()
	head := chatCompletion{ID: newID("fim-"), Created: time.Now().Unix(), Model: s.svc.Info().Name}
	if body.Stream {
		s.streamChat(w, r, g, head, body.StreamOptions != nil && body.StreamOptions.IncludeUsage, false, false)
		return nil
	}
	var text string
	sum, err := g.Run(r.Context(), func(e reply.Event) error { text += e.Text; return nil })
	if err != nil {
		return err
	}
	finish := string(sum.Finish)
	head.Object = "chat.completion"
	head.Choices = []chatChoice{{Message: &chatMessage{Role: "assistant", Content: &text}, FinishReason: &finish}}
	head.Usage = usageOf(sum)
	httpgate.WriteJSON(w, http.StatusOK, head)
	return nil
}

// infillRequest is llama.cpp's /infill body as llama.vscode sends it.
// Its time budgets (t_max_prompt_ms, t_max_predict_ms) and sampler order
// are not taken: n_predict bounds the reply.
type infillRequest struct {
	InputPrefix string     `json:"input_prefix"`
	InputSuffix string     `json:"input_suffix"`
	InputExtra  []fimChunk `json:"input_extra"`
	Prompt      string     `json:"prompt"`
	NPredict    *int       `json:"n_predict"`
	Stream      bool       `json:"stream"`
	// RepeatPenalty is llama.cpp's name of the repetition penalty.
	RepeatPenalty *float64 `json:"repeat_penalty"`
	sample.Overrides
	Stop stopList `json:"stop"`
}

// infillTimings are llama.cpp's figures, which llama.vscode shows.
type infillTimings struct {
	PromptN            int     `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
	CacheN             int     `json:"cache_n"`
}

// infillResponse is llama.cpp's completion answer: whole, or one per
// event of a stream (the last has stop true and the figures).
type infillResponse struct {
	Content         string         `json:"content"`
	Stop            bool           `json:"stop"`
	Model           string         `json:"model,omitempty"`
	StopType        string         `json:"stop_type,omitempty"`
	StoppingWord    string         `json:"stopping_word,omitempty"`
	TokensPredicted int            `json:"tokens_predicted,omitempty"`
	TokensEvaluated int            `json:"tokens_evaluated,omitempty"`
	TokensCached    int            `json:"tokens_cached,omitempty"`
	Truncated       bool           `json:"truncated"`
	Timings         *infillTimings `json:"timings,omitempty"`
}

// perSecond is n over ns nanoseconds, 0 when no time passed.
func perSecond(n int, ns int64) float64 {
	if ns <= 0 {
		return 0
	}
	return float64(n) / (float64(ns) / 1e9)
}

func (s *Server) infill(w http.ResponseWriter, r *http.Request) error {
	clock := newOllamaClock()
	var body infillRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	samp := body.Overrides
	if body.RepeatPenalty != nil {
		samp.RepetitionPenalty = body.RepeatPenalty
	}
	req := &service.Request{Sampling: samp, Client: clientOf(r)}
	if body.NPredict != nil && *body.NPredict > 0 { // -1 means no limit
		var err error
		if req.MaxTokens, err = maxTokens(body.NPredict); err != nil {
			return err
		}
	}
	prompt, stop, err := s.fim(fimInput{Prefix: body.InputPrefix, Suffix: body.InputSuffix, Middle: body.Prompt, Extra: body.InputExtra}, body.Stop)
	if err != nil {
		return err
	}
	req.PromptTokens, req.Stop = prompt, stop
	g, err := s.svc.Begin(r.Context(), req)
	if err != nil {
		return overflow(err, overflowCode)
	}
	defer g.Close()
	final := func(sum service.Summary, content string) infillResponse {
		m := clock.metrics(sum)
		out := infillResponse{Content: content, Stop: true, Model: s.svc.Info().Name, StopType: "eos",
			TokensPredicted: sum.CompletionTokens, TokensEvaluated: sum.PromptTokens, TokensCached: sum.CachedTokens,
			Timings: &infillTimings{PromptN: sum.PromptTokens - sum.CachedTokens, PromptMS: float64(m.PromptEvalDuration) / 1e6,
				PromptPerSecond: perSecond(sum.PromptTokens-sum.CachedTokens, m.PromptEvalDuration),
				PredictedN:      sum.CompletionTokens, PredictedMS: float64(m.EvalDuration) / 1e6,
				PredictedPerSecond: perSecond(sum.CompletionTokens, m.EvalDuration), CacheN: sum.CachedTokens}}
		switch {
		case sum.Finish == service.FinishLength:
			out.StopType = "limit"
		case sum.StopSequence != "" && !slices.Contains(fimStops, sum.StopSequence):
			out.StopType, out.StoppingWord = "word", sum.StopSequence
		}
		return out
	}
	if !body.Stream {
		var text string
		sum, err := g.Run(r.Context(), func(e reply.Event) error { clock.event(); text += e.Text; return nil })
		if err != nil {
			return err
		}
		httpgate.WriteJSON(w, http.StatusOK, final(sum, text))
		return nil
	}
	st := s.startStream(w, r, true)
	defer st.close()
	sum, err := g.Run(r.Context(), func(e reply.Event) error {
		clock.event()
		return st.send(infillResponse{Content: e.Text})
	})
	if err != nil {
		s.streamFailed(st, r, err)
		return nil
	}
	st.send(final(sum, ""))
	return nil
}
