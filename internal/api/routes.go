package api

import (
	"net/http"
	"strings"
)

// handler serves one route on a server bound to the request's service. An
// error it returns before writing anything is answered by the server in
// the route's error shape.
type handler func(s *Server, w http.ResponseWriter, r *http.Request) error

// errorShape is the JSON a route family answers its errors in, which its
// clients parse.
type errorShape int

const (
	// openAIErrors: {"error": {"message", "type", "param", "code"}}.
	openAIErrors errorShape = iota
	// ollamaErrors: {"error": "message"}.
	ollamaErrors
	// anthropicErrors: {"type": "error", "error": {"type", "message"}}.
	anthropicErrors
)

// route is one path with a handler per method.
type route struct {
	methods map[string]handler
	errors  errorShape
	// public routes need no API key.
	public bool
}

// table lists every route, read top to bottom.
func table() map[string]*route {
	t := map[string]*route{}
	add := func(method, path string, h handler, shape errorShape) *route {
		rt := t[path]
		if rt == nil {
			rt = &route{methods: map[string]handler{}, errors: shape}
			t[path] = rt
		}
		rt.methods[method] = h
		return rt
	}
	// OpenAI-compatible API.
	add("POST", "/v1/chat/completions", (*Server).chatCompletions, openAIErrors)
	add("POST", "/chat/completions", (*Server).chatCompletions, openAIErrors)
	add("POST", "/v1/completions", (*Server).completions, openAIErrors)
	add("POST", "/completions", (*Server).completions, openAIErrors)
	add("POST", "/v1/fim/completions", (*Server).fimCompletions, openAIErrors)
	add("POST", "/fim/completions", (*Server).fimCompletions, openAIErrors)
	// llama.cpp's fill-in-the-middle, which llama.vscode calls.
	add("POST", "/infill", (*Server).infill, openAIErrors)
	add("POST", "/v1/responses", (*Server).responses, openAIErrors)
	add("POST", "/responses", (*Server).responses, openAIErrors)
	add("POST", "/v1/embeddings", (*Server).embeddings, openAIErrors)
	add("POST", "/embeddings", (*Server).embeddings, openAIErrors)
	add("GET", "/v1/models", (*Server).listModels, openAIErrors)
	add("GET", "/models", (*Server).listModels, openAIErrors)
	add("GET", "/v1/models/{id}", (*Server).getModel, openAIErrors)
	add("POST", "/v1/tokenize", (*Server).tokenize, openAIErrors)
	add("POST", "/tokenize", (*Server).tokenize, openAIErrors)
	// Anthropic-compatible Messages API.
	add("POST", "/v1/messages", (*Server).messages, anthropicErrors)
	add("POST", "/v1/messages/count_tokens", (*Server).countTokens, anthropicErrors)
	// Operations.
	add("GET", "/health", (*Server).health, openAIErrors).public = true
	add("GET", "/metrics", (*Server).metrics, openAIErrors)
	// Ollama-compatible subset.
	add("GET", "/api/version", (*Server).ollamaVersion, ollamaErrors)
	add("GET", "/api/tags", (*Server).ollamaTags, ollamaErrors)
	add("POST", "/api/show", (*Server).ollamaShow, ollamaErrors)
	add("POST", "/api/chat", (*Server).ollamaChat, ollamaErrors)
	add("POST", "/api/generate", (*Server).ollamaGenerate, ollamaErrors)
	add("GET", "/api/ps", (*Server).ollamaPs, ollamaErrors)
	add("POST", "/api/embed", (*Server).ollamaEmbed, ollamaErrors)
	add("POST", "/api/embeddings", (*Server).ollamaEmbeddings, ollamaErrors)
	add("POST", "/api/pull", (*Server).ollamaPull, ollamaErrors)
	add("DELETE", "/api/delete", (*Server).ollamaDelete, ollamaErrors)
	add("POST", "/api/copy", (*Server).ollamaCopy, ollamaErrors)
	add("POST", "/api/create", (*Server).ollamaCreate, ollamaErrors)
	return t
}

// modelPrefix is the path of one model; anything after it is the model's id.
const modelPrefix = "/v1/models/"

// lookup finds the route of a path. A trailing "?" (an empty query that a
// client escaped into the path) and a trailing slash are ignored.
func (s *Server) lookup(path string) *route {
	path = strings.TrimSuffix(path, "?")
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	if rt, ok := s.routes[path]; ok {
		return rt
	}
	if strings.HasPrefix(path, modelPrefix) && len(path) > len(modelPrefix) {
		return s.routes[modelPrefix+"{id}"]
	}
	return nil
}
