package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"time"

	"petal/engine"
	"petal/engine/spec"
	"petal/internal/api"
	"petal/internal/hub"
	"petal/internal/manage"
	"petal/internal/prefixdisk"
	"petal/internal/service"
)

// DefaultShutdownTimeout is how long Close lets running requests finish
// when Config names no other.
const DefaultShutdownTimeout = 10 * time.Second

// Config is what a server is built from: the model to load, where to
// listen and who may call.
type Config struct {
	// Load is the model and how to load it; a download the Setup screen
	// loads later goes through the same request with its own folder.
	// Load.Context is also the context the settings report as running.
	Load LoadRequest
	// QueueLimit is how many requests may wait for the model (0: the
	// service's default).
	QueueLimit int
	// Addr is the address to listen on.
	Addr string
	// APIKey, when set, is required from every caller.
	APIKey string
	// AllowedOrigins are browser origins allowed to call; AllowedHosts are
	// host names besides loopback the Host header may carry (api.Options).
	AllowedOrigins, AllowedHosts []string
	// Settings is the web UI's settings store; when nil, the file at
	// SettingsPath (the user's default file when "") is opened.
	Settings     *manage.SettingsStore
	SettingsPath string
	// OnSettings, when set, is called after each save of the settings.
	OnSettings func(manage.Settings)
	// Pull is the Setup screen's download: the real model from the Hugging
	// Face Hub into its folder under the models root (tests point it at a
	// fake Hub).
	Pull hub.Options
	// Log receives the servers' errors and, unless NoAccessLog, a line
	// per API request; nil discards them.
	Log         *log.Logger
	NoAccessLog bool
	// Notes receives what the loads and the listen say (a lowered context,
	// a model loaded from the Setup screen); nil discards it.
	Notes io.Writer
	// ShutdownTimeout bounds how long Close waits for running requests (0:
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// PrefixDisk is the prefix cache's disk tier, which every model loaded
	// uses; nil: none. Its owner closes it after Close.
	PrefixDisk *prefixdisk.Store
	// Speculate says whether replies draft with the model's MTP head
	// (service.Options.Speculate).
	Speculate spec.Mode
}

// Runtime is a loaded model served over HTTP with the web UI: the
// composition petal serve and the desktop app share.
type Runtime struct {
	live     *liveModel
	first    Loaded
	cache    int64 // the prefix cache asked for, for Startup
	ln       net.Listener
	srv      *http.Server
	handler  http.Handler
	shutdown time.Duration
}

// ListenError says the address could not be listened on; its text is the
// network's own.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string { return e.Err.Error() }
func (e *ListenError) Unwrap() error { return e.Err }

// Open loads cfg's model through the memory-fit check, listens on
// cfg.Addr and builds the API server with the web UI behind it. It does
// not serve yet: Serve does.
func Open(cfg Config) (*Runtime, error) {
	notes := cfg.Notes
	if notes == nil {
		notes = io.Discard
	}
	logger := cfg.Log
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	cfg.Load.NoDrafts = cfg.Speculate == spec.Off
	l, err := Load(cfg.Load, notes)
	if err != nil {
		return nil, err
	}
	downloads := manage.NewHubDownloader(cfg.Pull)
	live, err := newLiveModel(l, cfg.Load.Dir, service.Options{ContextLength: l.Context, QueueLimit: cfg.QueueLimit, CacheBytes: l.CacheBytes, Parallel: l.Parallel, PrefixDisk: cfg.PrefixDisk, Speculate: cfg.Speculate},
		cfg.Load, downloads, notes)
	if err != nil {
		return nil, err
	}
	r := &Runtime{live: live, first: l, cache: cfg.Load.CacheBytes, shutdown: cfg.ShutdownTimeout}
	if r.shutdown <= 0 {
		r.shutdown = DefaultShutdownTimeout
	}
	if r.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		live.slot.Close()
		return nil, &ListenError{Addr: cfg.Addr, Err: err}
	}
	// Ollama's /api/pull runs the Setup screen's download: one download,
	// which either may start and both see.
	opts := api.Options{APIKey: cfg.APIKey, AllowedOrigins: cfg.AllowedOrigins, AllowedHosts: slices.Clone(cfg.AllowedHosts), Logger: logger,
		NoAccessLog: cfg.NoAccessLog, Pull: downloads}
	if host, _, err := net.SplitHostPort(r.ln.Addr().String()); err == nil {
		switch ip := net.ParseIP(host); {
		case ip != nil && ip.IsUnspecified():
			fmt.Fprintln(notes, "note: listening on every interface; other machines name this one by its address, or by any name with the API key (a name without the key must be given to --allow-host)")
		case ip != nil:
			opts.AllowedHosts = append(opts.AllowedHosts, host)
		}
	}
	if opts.Fallback, err = webUI(uiConfig{live: live, addr: r.ln.Addr().String(), apiKey: cfg.APIKey, origins: cfg.AllowedOrigins,
		ctxLen: cfg.Load.Context, settings: cfg.SettingsPath, store: cfg.Settings, onSettings: cfg.OnSettings, logger: logger,
		budget: l.budget(), backend: cfg.Load.Backend, cpu: newCPUSpeed()}); err != nil {
		r.ln.Close()
		live.slot.Close()
		return nil, err
	}
	apiServer := api.NewOnSlot(live.slot, opts)
	r.handler = apiServer
	r.srv = apiServer.HTTPServer(cfg.Addr)
	return r, nil
}

// Handler answers what the listener does: the API, /manage/ and the web
// UI. The desktop window's webview calls it in process.
func (r *Runtime) Handler() http.Handler { return r.handler }

// Endpoint is the OpenAI base URL clients on this machine use.
func (r *Runtime) Endpoint() string { return "http://" + endpointHost(r.ln.Addr().String()) + "/v1" }

// Info describes the model served now.
func (r *Runtime) Info() service.Info { return r.live.slot.Current().Info() }

// Metrics are the served model's counters now.
func (r *Runtime) Metrics() service.Metrics { return r.live.slot.Current().Metrics() }

// Startup are the lines that say what the first load gave: the prefix
// cache and the decode path.
func (r *Runtime) Startup() []string {
	path := engine.DecodePath(r.first.Model)
	if r.first.Parallel > 1 {
		path += "; several requests at once: batched steps, each weight read once for all their rows, each token picked on the host"
	}
	return []string{DescribeCache(r.first, r.cache), "decode: " + path}
}

// Serve answers on the listener until Close; it returns nil then.
func (r *Runtime) Serve() error {
	if err := r.srv.Serve(r.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the server, letting running requests finish for the
// shutdown timeout, then frees the model.
func (r *Runtime) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.shutdown)
	defer cancel()
	var err error
	if r.srv.Shutdown(ctx) != nil {
		err = r.srv.Close()
	}
	r.ln.Close() // Shutdown closes it only under a running Serve
	r.live.slot.Close()
	return err
}
