package api

import (
	"encoding/json"
	"net/http"

	"petal/engine/chattemplate"
	"petal/internal/httpgate"
	"petal/internal/service"
)

// tokenizeRequest counts the tokens of a raw text ("text", "prompt" or
// llama.cpp's "content") or of a conversation as the chat endpoint would
// render it ("messages", "tools", "chat_template_kwargs").
type tokenizeRequest struct {
	Text               *string                    `json:"text"`
	Prompt             *string                    `json:"prompt"`
	Content            *string                    `json:"content"`
	Messages           []chattemplate.Message     `json:"messages"`
	Tools              []chattemplate.Tool        `json:"tools"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	ReasoningEffort    *string                    `json:"reasoning_effort"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) error {
	var body tokenizeRequest
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	var tokens []int
	switch text := firstSet(body.Text, body.Prompt, body.Content); {
	case text != nil:
		tokens = s.svc.Tokenizer().Encode(*text)
	case len(body.Messages) > 0:
		if len(body.Messages) > MaxMessages {
			return badParam("messages", "%d messages are more than the %d allowed", len(body.Messages), MaxMessages)
		}
		req := &service.Request{Messages: body.Messages, Tools: body.Tools,
			Kwargs: thinkingKwargs(body.ChatTemplateKwargs, nil, body.ReasoningEffort)}
		// Images count as the chat endpoint places them.
		var images imageSet
		if err := images.fromParts(req.Messages); err != nil {
			return err
		}
		if err := s.countImages(req, &images); err != nil {
			return err
		}
		var err error
		if tokens, err = s.svc.Tokens(r.Context(), req); err != nil {
			return err
		}
	default:
		return badRequest("send \"text\" (or \"prompt\", \"content\") or \"messages\" to count")
	}
	httpgate.WriteJSON(w, http.StatusOK, struct {
		Tokens        []int `json:"tokens"`
		Count         int   `json:"count"`
		ContextLength int   `json:"context_length"`
	}{tokens, len(tokens), s.svc.Info().ContextLength})
	return nil
}

func firstSet(ss ...*string) *string {
	for _, s := range ss {
		if s != nil {
			return s
		}
	}
	return nil
}
