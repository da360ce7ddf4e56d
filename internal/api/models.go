package api

import (
	"net/http"
	"time"

	"petal/internal/httpgate"
)

// modelEntry is a model in /v1/models. Besides OpenAI's fields it carries
// the context length under the names that clients read: OpenRouter's and
// llama.cpp's context_length, vLLM's max_model_len, LM Studio's
// max_context_length and loaded_context_length, and what it can do as LM
// Studio says it: capabilities.vision, and type "vlm" for a model that
// reads images, "llm" for one that reads text only (its v0 API's word).
type modelEntry struct {
	ID                  string `json:"id"`
	Object              string `json:"object"`
	Created             int64  `json:"created"`
	OwnedBy             string `json:"owned_by"`
	ContextLength       int    `json:"context_length"`
	MaxModelLen         int    `json:"max_model_len"`
	MaxContextLength    int    `json:"max_context_length"`
	LoadedContextLength int    `json:"loaded_context_length"`
	Type                string `json:"type"`
	Capabilities        struct {
		Vision            bool `json:"vision"`
		TrainedForToolUse bool `json:"trained_for_tool_use"`
	} `json:"capabilities"`
}

func (s *Server) model() modelEntry {
	info := s.svc.Info()
	m := modelEntry{ID: info.Name, Object: "model", Created: info.Created.Unix(), OwnedBy: "petal",
		ContextLength: info.ContextLength, MaxModelLen: info.ContextLength, MaxContextLength: info.ContextLength,
		LoadedContextLength: info.ContextLength, Type: "llm"}
	if info.Vision {
		m.Type = "vlm"
	}
	m.Capabilities.Vision, m.Capabilities.TrainedForToolUse = info.Vision, info.Chat
	return m
}

// anthropicModel is a model in Anthropic's Models API.
type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// fromAnthropic reports a request from Anthropic's SDK, which lists models
// in Anthropic's shape: it sends anthropic-version on every request, and
// its key as x-api-key.
func fromAnthropic(r *http.Request) bool {
	return r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != ""
}

func (s *Server) anthropicModel() anthropicModel {
	info := s.svc.Info()
	return anthropicModel{Type: "model", ID: info.Name, DisplayName: info.Name, CreatedAt: info.Created.UTC().Format(time.RFC3339)}
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	if fromAnthropic(r) {
		m := s.anthropicModel()
		httpgate.WriteJSON(w, http.StatusOK, struct {
			Data    []anthropicModel `json:"data"`
			FirstID string           `json:"first_id"`
			LastID  string           `json:"last_id"`
			HasMore bool             `json:"has_more"`
		}{[]anthropicModel{m}, m.ID, m.ID, false})
		return nil
	}
	httpgate.WriteJSON(w, http.StatusOK, struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{"list", []modelEntry{s.model()}})
	return nil
}

// getModel answers for any id with the served model: clients often name a
// model the server does not know, and there is only one.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request) error {
	if fromAnthropic(r) {
		httpgate.WriteJSON(w, http.StatusOK, s.anthropicModel())
		return nil
	}
	httpgate.WriteJSON(w, http.StatusOK, s.model())
	return nil
}

// health answers at once, whatever the engine is doing.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	m := s.svc.Metrics()
	httpgate.WriteJSON(w, http.StatusOK, struct {
		Status  string `json:"status"`
		Model   string `json:"model"`
		Waiting int    `json:"waiting"`
		Busy    bool   `json:"busy"`
	}{"ok", s.svc.Info().Name, m.Waiting, m.Running > 0})
	return nil
}
