package api

import (
	"net/http"
	"strconv"
	"strings"
)

// Ollama's model management. Petal serves the one checkpoint folder it
// was started on: pulling that model is done at once, pulling the model
// Petal ships for downloads it (ollama_pull.go), and what would change
// the models on disk is refused with the reason, in Ollama's error shape,
// which ollama-js shows as the error's message.

// ollamaServes reports whether name is the served model as an Ollama client
// names it: its name, in any case, with or without the ":latest" tag.
func (s *Server) ollamaServes(name string) bool {
	return strings.EqualFold(strings.TrimSuffix(name, ":latest"), s.svc.Info().Name)
}

// ollamaModelName is the model a management request names: "model", or
// the older "name".
type ollamaModelName struct {
	Model string `json:"model"`
	Name  string `json:"name"`
}

func (n ollamaModelName) get() string {
	if n.Model != "" {
		return n.Model
	}
	return n.Name
}

// ollamaNotFound is Ollama's answer for a model it does not have.
func ollamaNotFound(name string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "not_found_error", Code: "model_not_found",
		Message: "model " + strconv.Quote(name) + " not found"}
}

// ollamaRefused is the answer for an operation Petal does not do.
func ollamaRefused(format string, args ...any) *apiError {
	e := badRequest(format, args...)
	e.Code = "unsupported_operation"
	return e
}

// ollamaDelete refuses to delete the served model, and answers Ollama's
// not-found for any other.
func (s *Server) ollamaDelete(w http.ResponseWriter, r *http.Request) error {
	var body ollamaModelName
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if name := body.get(); !s.ollamaServes(name) {
		return ollamaNotFound(name)
	}
	return ollamaRefused("Petal cannot delete %s while it serves it: stop the server, then delete the model's folder", strconv.Quote(body.get()))
}

// ollamaCopy refuses: the served model has one name, its folder's.
func (s *Server) ollamaCopy(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if !s.ollamaServes(body.Source) {
		return ollamaNotFound(body.Source)
	}
	return ollamaRefused("Petal cannot copy %s to %s: it serves one model under one name; any name in a request reaches it", strconv.Quote(body.Source), strconv.Quote(body.Destination))
}

// ollamaCreate refuses: Petal builds no models from Modelfiles.
func (s *Server) ollamaCreate(w http.ResponseWriter, r *http.Request) error {
	var body ollamaModelName
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	return ollamaRefused("Petal cannot create %s: it serves a downloaded checkpoint folder as it is, with no Modelfile; set sampling and the system prompt in each request", strconv.Quote(body.get()))
}
