package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"petal/engine/chattemplate"
	"petal/engine/reply"
	"petal/engine/sample"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// Ollama's API as the editors that list models only through it use it.
const (
	// OllamaVersion is the Ollama release whose API this subset follows;
	// clients check it against their minimum (Codex's is 0.13.4).
	OllamaVersion = "0.13.4"
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
	// Images are base64 pictures, which the message shows before its
	// text, as Ollama renders them.
	Images []string `json:"images,omitempty"`
}

type ollamaToolCall struct {
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type ollamaOptions struct {
	sample.Overrides
	// RepeatPenalty is Ollama's name of the repetition penalty.
	RepeatPenalty *float64 `json:"repeat_penalty"`
	NumPredict    *int     `json:"num_predict"`
	// NumCtx bounds prompt and reply together; the context the model was
	// loaded with (what fits in memory) stays the most.
	NumCtx *int     `json:"num_ctx"`
	Stop   stopList `json:"stop"`
}

type ollamaChatRequest struct {
	Model     string              `json:"model"`
	Messages  []ollamaMessage     `json:"messages"`
	Stream    *bool               `json:"stream"`
	Think     json.RawMessage     `json:"think"`
	Tools     []chattemplate.Tool `json:"tools"`
	Format    json.RawMessage     `json:"format"`
	Options   ollamaOptions       `json:"options"`
	KeepAlive ollamaKeepAlive     `json:"keep_alive"`

	Logprobs    bool `json:"logprobs"`
	TopLogprobs *int `json:"top_logprobs"`

	// images are the messages' images read by toService.
	imgs imageSet
}

// ollamaContent is a message's content with its images (Ollama's base64,
// which may also come as a data: URL), each as the template's image part
// before the text.
func (s *imageSet) ollamaContent(param string, images []string, text string) (*chattemplate.Content, error) {
	if len(images) == 0 {
		return chattemplate.TextContent(text), nil
	}
	parts := make([]chattemplate.ContentPart, 0, len(images)+1)
	for k, img := range images {
		where := fmt.Sprintf("%s[%d]", param, k)
		var part chattemplate.ContentPart
		var err error
		if strings.HasPrefix(img, "data:") {
			part, err = s.addURL(where, img)
		} else {
			part, err = s.addBase64(where, "", img)
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, part)
	}
	return &chattemplate.Content{Parts: append(parts, chattemplate.ContentPart{Type: "text", Text: text})}, nil
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
		content, err := o.imgs.ollamaContent(fmt.Sprintf("messages[%d].images", i), m.Images, m.Content)
		if err != nil {
			return nil, err
		}
		msgs[i] = chattemplate.Message{Role: m.Role, Content: content, Name: m.ToolName}
		if m.Thinking != "" {
			msgs[i].ReasoningContent = &m.Thinking
		}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, chattemplate.ToolCall{Type: "function",
				Function: chattemplate.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
	}
	req, err := o.Options.request()
	if err != nil {
		return nil, err
	}
	req.Messages, req.Tools = msgs, o.Tools
	if req.Logprobs, req.TopLogprobs, err = logprobsParams(o.Logprobs, o.TopLogprobs); err != nil {
		return nil, err
	}
	if req.Grammar, err = ollamaFormat(o.Format); err != nil {
		return nil, err
	}
	req.Kwargs = ollamaThink(o.Think)
	return req, nil
}

// request maps the options to a request's sampling, stop and length.
func (opt ollamaOptions) request() (*service.Request, error) {
	samp := opt.Overrides
	if opt.RepeatPenalty != nil {
		samp.RepetitionPenalty = opt.RepeatPenalty
	}
	req := &service.Request{Stop: opt.Stop, Sampling: samp}
	if opt.NumPredict != nil && *opt.NumPredict > MaxReplyTokens {
		return nil, badParam("num_predict", "num_predict must be at most %d, not %d", MaxReplyTokens, *opt.NumPredict)
	}
	if opt.NumPredict != nil && *opt.NumPredict > 0 { // -1 and -2 mean no limit
		req.MaxTokens = *opt.NumPredict
	}
	if opt.NumCtx != nil {
		if *opt.NumCtx < 1 {
			return nil, badParam("num_ctx", "num_ctx must be at least 1, not %d", *opt.NumCtx)
		}
		req.ContextLimit = *opt.NumCtx
	}
	return req, nil
}

// ollamaKeepAlive is keep_alive as Ollama reads it: a number of seconds
// or a duration ("5m", "0s", "0"), 0 asking to unload the model and a
// negative one to keep it loaded for good. Anything else is refused, as
// Ollama refuses it, rather than taken as a load.
type ollamaKeepAlive struct{ unload bool }

// maxEchoedBytes bounds how much of a bad value an error quotes back.
const maxEchoedBytes = 40

func (k *ollamaKeepAlive) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as if absent, which null would otherwise read as 0
	}
	var secs float64
	if json.Unmarshal(b, &secs) == nil {
		k.unload = secs == 0
		return nil
	}
	var text string
	if json.Unmarshal(b, &text) == nil {
		if d, err := time.ParseDuration(text); err == nil {
			k.unload = d == 0
			return nil
		}
	}
	shown := string(b)
	if len(shown) > maxEchoedBytes {
		shown = shown[:maxEchoedBytes] + "..."
	}
	return badParam("keep_alive", "keep_alive %s is no duration: send a number of seconds or a duration such as \"5m\", \"1h\" or \"0\" (0 unloads the model)", shown)
}

// ollamaLoadReason is the done_reason of a request that only loads or
// unloads the model. Petal's one model stays loaded while it serves, so
// both are answered at once, as Ollama answers them once done.
func ollamaLoadReason(keepAlive ollamaKeepAlive) string {
	if keepAlive.unload {
		return "unload"
	}
	return "load"
}

// ollamaThink maps "think", a boolean or an effort name, to the template's
// switch.
func ollamaThink(think json.RawMessage) map[string]json.RawMessage {
	var enable *bool
	var effort *string
	if json.Unmarshal(think, &enable) != nil {
		json.Unmarshal(think, &effort)
	}
	return thinkingKwargs(nil, enable, effort)
}

// ollamaMetrics are the timings of Ollama's last chunk, in nanoseconds.
// The prompt's evaluation is timed up to the first reply text (queue wait
// included); the model is always loaded, so loading takes no time.
// They are left out of the other chunks, as Ollama does.
type ollamaMetrics struct {
	TotalDuration      int64  `json:"total_duration,omitempty"`
	LoadDuration       *int64 `json:"load_duration,omitempty"`
	PromptEvalCount    int    `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64  `json:"prompt_eval_duration,omitempty"`
	EvalCount          int    `json:"eval_count,omitempty"`
	EvalDuration       int64  `json:"eval_duration,omitempty"`
}

// ollamaClock times a request for its metrics.
type ollamaClock struct{ start, first time.Time }

func newOllamaClock() *ollamaClock { return &ollamaClock{start: time.Now()} }

// event notes that reply text arrived.
func (c *ollamaClock) event() {
	if c.first.IsZero() {
		c.first = time.Now()
	}
}

func (c *ollamaClock) metrics(sum service.Summary) ollamaMetrics {
	end := time.Now()
	c.event()
	return ollamaMetrics{TotalDuration: int64(end.Sub(c.start)), LoadDuration: new(int64), PromptEvalCount: sum.PromptTokens,
		PromptEvalDuration: int64(c.first.Sub(c.start)), EvalCount: sum.CompletionTokens, EvalDuration: int64(end.Sub(c.first))}
}

// ollamaDoneReason is the finish in Ollama's words: a reply that called
// tools stopped.
func ollamaDoneReason(sum service.Summary) string {
	if sum.Finish == service.FinishToolCalls {
		return string(service.FinishStop)
	}
	return string(sum.Finish)
}

type ollamaChatResponse struct {
	Model      string        `json:"model"`
	CreatedAt  string        `json:"created_at"`
	Message    ollamaMessage `json:"message"`
	Done       bool          `json:"done"`
	DoneReason string        `json:"done_reason,omitempty"`
	// Logprobs are those of the message's tokens: all of them in a reply
	// not streamed.
	Logprobs []chatTokenLogprob `json:"logprobs,omitempty"`
	ollamaMetrics
}

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) error {
	clock := newOllamaClock()
	var body ollamaChatRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	name := s.svc.Info().Name
	msg := func(m ollamaMessage) ollamaChatResponse {
		m.Role = "assistant"
		return ollamaChatResponse{Model: name, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Message: m}
	}
	if len(body.Messages) == 0 {
		// No messages is how clients load (or, with keep_alive 0,
		// unload) a model.
		done := msg(ollamaMessage{})
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
	g, err := s.svc.Begin(r.Context(), req)
	if err != nil {
		return err
	}
	defer g.Close()
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
		resp.Done, resp.DoneReason = true, ollamaDoneReason(sum)
		resp.ollamaMetrics = clock.metrics(sum)
		resp.Logprobs = ollamaLogprobs(body.Logprobs, g.TakeLogprobs())
		return resp
	}
	if body.Stream != nil && !*body.Stream {
		var res reply.Result
		sum, err := g.Run(r.Context(), func(e reply.Event) error { clock.event(); res.Add(e); return nil })
		if err != nil {
			return err
		}
		m := ollamaMessage{Content: res.Content, Thinking: res.Reasoning}
		for i, c := range res.ToolCalls {
			names[i], args[i] = c.Name, c.Arguments
			m.ToolCalls = append(m.ToolCalls, call(i))
		}
		httpgate.WriteJSON(w, http.StatusOK, final(sum, m))
		return nil
	}
	st := s.startStream(w, r, false)
	defer st.close()
	sum, err := g.Run(r.Context(), func(e reply.Event) error {
		clock.event()
		// Each message carries its tokens' logprobs, as Ollama's do.
		send := func(m ollamaMessage) error {
			resp := msg(m)
			resp.Logprobs = ollamaLogprobs(body.Logprobs, g.TakeLogprobs())
			return st.send(resp)
		}
		switch e.Kind {
		case reply.KindReasoning:
			return send(ollamaMessage{Thinking: e.Text})
		case reply.KindContent:
			return send(ollamaMessage{Content: e.Text})
		case reply.KindToolStart:
			names[e.Index] = e.Name
		case reply.KindToolArgs:
			args[e.Index] += e.Text
		case reply.KindToolEnd:
			return send(ollamaMessage{ToolCalls: []ollamaToolCall{call(e.Index)}})
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
	httpgate.WriteJSON(w, http.StatusOK, map[string]string{"version": OllamaVersion})
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

// ollamaModel is a model as /api/tags and /api/ps list it.
type ollamaModel struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt string        `json:"modified_at,omitempty"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
	// For /api/ps: the model stays loaded while the server runs.
	ExpiresAt     string `json:"expires_at,omitempty"`
	SizeVRAM      *int64 `json:"size_vram,omitempty"`
	ContextLength int    `json:"context_length,omitempty"`
}

func (s *Server) ollamaModel() (ollamaModel, error) {
	info := s.svc.Info()
	size, digest, err := folderIdentity(info.Dir)
	if err != nil {
		return ollamaModel{}, err
	}
	return ollamaModel{Name: info.Name, Model: info.Name, ModifiedAt: info.Created.UTC().Format(time.RFC3339),
		Size: size, Digest: digest, Details: s.ollamaDetails()}, nil
}

// folderIdentity is the size of a checkpoint folder's files and a digest
// that names them: SHA-256 over each file's name and size and the bytes of
// its config.json, which is cheap where hashing 19 GB of weights per
// listing is not, and changes when the checkpoint does.
func folderIdentity(dir string) (int64, string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	var size int64
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		size += fi.Size()
		fmt.Fprintf(h, "%s %d\n", e.Name(), fi.Size())
	}
	if cfg, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		h.Write(cfg)
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) error {
	m, err := s.ollamaModel()
	if err != nil {
		return err
	}
	httpgate.WriteJSON(w, http.StatusOK, map[string][]ollamaModel{"models": {m}})
	return nil
}

// ollamaLoadedFor is how far ahead /api/ps says the model expires: it
// stays loaded while the server runs.
const ollamaLoadedFor = 100 * 365 * 24 * time.Hour

// ollamaProcess is the loaded model as /api/ps lists it: Ollama's fields
// and, Petal's own, how many requests run on it now and how many may
// decode together, which Ollama's clients ignore.
type ollamaProcess struct {
	ollamaModel
	RequestsRunning int `json:"requests_running"`
	Parallel        int `json:"parallel"`
}

// ollamaPs lists the loaded model, as Open WebUI asks.
func (s *Server) ollamaPs(w http.ResponseWriter, r *http.Request) error {
	m, err := s.ollamaModel()
	if err != nil {
		return err
	}
	m.ModifiedAt = ""
	m.ExpiresAt = time.Now().Add(ollamaLoadedFor).UTC().Format(time.RFC3339)
	m.SizeVRAM = &m.Size
	m.ContextLength = s.svc.Info().ContextLength
	run := s.svc.Metrics()
	httpgate.WriteJSON(w, http.StatusOK, map[string][]ollamaProcess{"models": {{ollamaModel: m, RequestsRunning: run.Running, Parallel: run.Parallel}}})
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
	if info.Vision {
		// Ollama's word for a model that takes images, which clients
		// check before they offer to attach one.
		caps = append(caps, "vision")
	}
	if _, _, err := s.fim(fimInput{}, nil); err == nil {
		// Ollama's word for a suffix taken (fill-in-the-middle), which
		// Continue checks before it sends one.
		caps = append(caps, "insert")
	}
	httpgate.WriteJSON(w, http.StatusOK, map[string]any{
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
