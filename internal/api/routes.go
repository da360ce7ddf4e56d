package api

import (
	"net/http"
	"strings"
)

// handler serves one route on a server bound to the request's service. An
// error it returns before writing anything is answered by the server in
// the route's error shape.
type handler func(s *Server, w http.ResponseWriter, r *http.Request) error

// route is one path with a handler per method.
type route struct {
	methods map[string]handler
	// public routes need no API key.
	public bool
	// ollama routes answer errors in Ollama's shape.
	ollama bool
	// anthropic routes answer errors in Anthropic's shape.
	anthropic bool
}

// table lists every route, read top to bottom.
func table() map[string]*route {
	t := map[string]*route{}
	add := func(method, path string, h handler, flags ...string) {
		rt := t[path]
		if rt == nil {
			rt = &route{methods: map[string]handler{}}
			t[path] = rt
		}
		rt.methods[method] = h
		for _, f := range flags {
			switch f {
			case "public":
				rt.public = true
			case "ollama":
				rt.ollama = true
			case "anthropic":
				rt.anthropic = true
			}
		}
	}
	// OpenAI-compatible API.
	add("POST", "/v1/chat/completions", (*Server).chatCompletions)
	add("POST", "/chat/completions", (*Server).chatCompletions)
	add("POST", "/v1/completions", (*Server).completions)
	add("POST", "/completions", (*Server).completions)
	add("POST", "/v1/responses", (*Server).responses)
	add("POST", "/responses", (*Server).responses)
	add("GET", "/v1/models", (*Server).listModels)
	add("GET", "/models", (*Server).listModels)
	add("GET", "/v1/models/{id}", (*Server).getModel)
	add("POST", "/v1/tokenize", (*Server).tokenize)
	add("POST", "/tokenize", (*Server).tokenize)
	// Anthropic-compatible Messages API.
	add("POST", "/v1/messages", (*Server).messages, "anthropic")
	add("POST", "/v1/messages/count_tokens", (*Server).countTokens, "anthropic")
	// Operations.
	add("GET", "/health", (*Server).health, "public")
	add("GET", "/metrics", (*Server).metrics)
	// Ollama-compatible subset.
	add("GET", "/api/version", (*Server).ollamaVersion, "ollama")
	add("GET", "/api/tags", (*Server).ollamaTags, "ollama")
	add("POST", "/api/show", (*Server).ollamaShow, "ollama")
	add("POST", "/api/chat", (*Server).ollamaChat, "ollama")
	add("POST", "/api/generate", (*Server).ollamaGenerate, "ollama")
	add("GET", "/api/ps", (*Server).ollamaPs, "ollama")
	add("POST", "/api/embed", (*Server).ollamaEmbed, "ollama")
	add("POST", "/api/embeddings", (*Server).ollamaEmbed, "ollama")
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
