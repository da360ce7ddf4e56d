package api

import (
	"errors"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"petal/internal/httpgate"
	"petal/internal/service"
)

// Limits and timeouts of the server.
const (
	// MaxBodyBytes bounds a request body; a long agent conversation with
	// tool results is a few megabytes.
	MaxBodyBytes = 16 << 20
	// MaxMessages bounds the messages of one request.
	MaxMessages = 4096
	// MaxTools bounds the tools of one request.
	MaxTools = 512
	// DefaultPingInterval is how long a stream may stay silent (while the
	// request waits in the queue or its prompt is processed) before an SSE
	// comment is sent, so that clients do not time out.
	DefaultPingInterval = 5 * time.Second
	// StreamWriteTimeout bounds one write to a client; a stream whose
	// client stops reading is ended.
	StreamWriteTimeout = 60 * time.Second
	// DefaultBodyReadTimeout bounds the time to read a request's body: a
	// full 16 MB body at 300 KB/s.
	DefaultBodyReadTimeout = 60 * time.Second
	// ReadHeaderTimeout bounds the time to read a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout = 120 * time.Second
)

// Options configure a Server.
type Options struct {
	// APIKey, when set, must be sent as "Authorization: Bearer KEY" on
	// every route but /health.
	APIKey string
	// AllowedOrigins are the browser origins (such as
	// "http://localhost:3000") that may call the API; same-origin requests
	// are always allowed.
	AllowedOrigins []string
	// AllowedHosts are host names, besides loopback ones and the address
	// a request arrived at, that the Host header may carry without the
	// API key (the address the server listens on, for one; see
	// hostAllowed).
	AllowedHosts []string
	// PingInterval overrides DefaultPingInterval.
	PingInterval time.Duration
	// BodyReadTimeout overrides DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration
	// Logger receives internal errors; nil discards them.
	Logger *log.Logger
	// NoAccessLog turns off the line per API request that Logger gets
	// (accesslog.go).
	NoAccessLog bool
	// Fallback, when set, serves the paths that are no route of the API
	// (the web UI and its management routes), once the Host header has
	// passed the gate. Paths under /v1 and /api (in any case) never reach it: clients
	// probing for a route must get a JSON 404, not the UI's page.
	Fallback http.Handler
	// Pull, when set, downloads the model Petal ships for when Ollama's
	// /api/pull asks for it (ollama_pull.go); nil refuses such pulls.
	Pull Puller
}

// Server is the HTTP API over the generation service a slot holds.
type Server struct {
	slot *service.Slot
	// svc is the service of the request being served: ServeHTTP hands each
	// request a copy of the server bound to the service it acquired, so a
	// request keeps its service when the slot's is replaced.
	svc    *service.Service
	opts   Options
	logger *log.Logger
	routes map[string]*route // by path
	hosts  map[string]bool
	// stored is the Responses API's store, shared by every copy.
	stored *responseStore
}

// New returns the API over svc, which stays the caller's to close.
func New(svc *service.Service, opts Options) *Server {
	return NewOnSlot(service.NewSlot(svc, nil), opts)
}

// NewOnSlot returns the API over the service slot holds at each request,
// which another model's service can replace while the server runs.
func NewOnSlot(slot *service.Slot, opts Options) *Server {
	s := &Server{slot: slot, opts: opts, logger: opts.Logger, hosts: map[string]bool{}, stored: newResponseStore()}
	if s.logger == nil {
		s.logger = log.New(io.Discard, "", 0)
	}
	if s.opts.PingInterval <= 0 {
		s.opts.PingInterval = DefaultPingInterval
	}
	if s.opts.BodyReadTimeout <= 0 {
		s.opts.BodyReadTimeout = DefaultBodyReadTimeout
	}
	for _, h := range opts.AllowedHosts {
		s.hosts[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	s.routes = table()
	return s
}

// HTTPServer returns an http.Server for s on addr with the server's
// timeouts. There is no write timeout: streams last as long as generation,
// and each write has its own deadline instead.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          s.logger,
		// Streams tune their connection's socket (stream.go).
		ConnContext: withConn,
	}
}

// ServeHTTP passes the request through the gate, then to its route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := s.lookup(r.URL.Path)
	// OpenAI's SDK reads x-request-id and Anthropic's request-id, to quote
	// in bug reports and logs.
	id := newID("req_")
	w.Header().Set("X-Request-Id", id)
	w.Header().Set("Request-Id", id)
	// Every answer, streams and the UI's files included, not only JSON.
	httpgate.NoSniff(w.Header())
	if rt == nil && s.opts.Fallback != nil && s.hostAllowed(r) && !apiPath(r.URL.Path) {
		s.opts.Fallback.ServeHTTP(w, r)
		return
	}
	a, w, r := s.startAccess(w, r)
	defer a.log(s.logger)
	if err := s.gate(w, r, rt); err != nil {
		shape := openAIErrors
		switch {
		case rt != nil:
			shape = rt.errors
		case hasPathPrefix(r.URL.Path, "/api"):
			shape = ollamaErrors // ollama-js shows any other shape as "[object Object]"
		}
		s.fail(w, shape, err)
		return
	}
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent) // an allowed preflight
		return
	}
	h := rt.methods[r.Method]
	if r.Method == http.MethodHead {
		h = rt.methods[http.MethodGet]
	}
	svc, done := s.slot.Acquire()
	defer done()
	bound := *s
	bound.svc = svc
	if err := h(&bound, w, r); err != nil {
		s.fail(w, rt.errors, err)
	}
}

// apiPath reports whether path is in the API's namespaces, /v1 and /api
// themselves included and in any case: a client probing "/V1/models" must
// get a JSON 404, not the UI's page with 200.
func apiPath(path string) bool {
	return hasPathPrefix(path, "/v1") || hasPathPrefix(path, "/api")
}

// hasPathPrefix reports whether path is dir or under it, ignoring case.
func hasPathPrefix(path, dir string) bool {
	return len(path) >= len(dir) && strings.EqualFold(path[:len(dir)], dir) &&
		(len(path) == len(dir) || path[len(dir)] == '/')
}

// fail writes err in the route family's error shape.
func (s *Server) fail(w http.ResponseWriter, shape errorShape, err error) {
	switch shape {
	case ollamaErrors:
		e := errorFor(err, s.logger)
		if e.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		}
		httpgate.WriteJSON(w, e.Status, map[string]string{"error": e.Message})
	case anthropicErrors:
		e := errorFor(err, s.logger)
		var ce *service.ContextError
		if errors.As(err, &ce) {
			e.Message = anthropicContextMessage(ce)
		}
		if e.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		}
		httpgate.WriteJSON(w, e.Status, anthropicErrorBody(e))
	default:
		writeError(w, err, s.logger)
	}
}
