package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"petal/engine"
	"petal/internal/api"
	"petal/internal/manage"
	"petal/internal/service"
)

// Defaults of petal serve.
const (
	// DefaultAddr is loopback only: other machines cannot reach the server
	// unless asked for with --addr.
	DefaultAddr = "127.0.0.1:8080"
	// ShutdownTimeout is how long running requests may take to finish
	// after an interrupt.
	ShutdownTimeout = 10 * time.Second
)

func init() {
	commands["serve"] = command{
		summary: "serve the model over an OpenAI-compatible HTTP API",
		run:     runServe,
	}
}

func runServe(args []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, args, stdout)
}

// serve runs the server until ctx ends, then shuts it down gracefully.
func serve(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("serve", os.Stderr)
	dir := fs.String("model", "", "checkpoint folder (default: the installed Qwen3.6-35B-A3B, else the built-in demo model)")
	addr := fs.String("addr", DefaultAddr, "address to listen on")
	backend := fs.String("backend", "cpu", "backend")
	apiKey := fs.String("api-key", os.Getenv("PETAL_API_KEY"), "API key clients must send as a Bearer token (default $PETAL_API_KEY)")
	origins := fs.String("allow-origin", "", "comma-separated browser origins allowed to call the API")
	hosts := fs.String("allow-host", "", "comma-separated host names the Host header may carry besides loopback")
	ctxLen := fs.Int("context", 0, "context length in tokens (default: the model's); lowered to the largest that fits the memory")
	queue := fs.Int("queue", service.DefaultQueueLimit, "requests that may wait for the model")
	cacheMB := fs.Int64("cache-mb", service.DefaultCacheBytes>>20, "prefix cache size in MiB (0 turns it off); at most the memory the fit check leaves beside the model")
	memGB := fs.Float64("memory-gb", 0, "check the memory fit as on a Mac with this much memory (GB as Apple counts them) instead of what this machine reports")
	settingsFile := fs.String("settings", "", "the web UI's settings file (default: petal/settings.json in the user's config folder)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *queue < 1 || *ctxLen < 0 || *cacheMB < 0 {
		return errors.New("--queue must be at least 1, --context and --cache-mb at least 0")
	}
	var err error
	if *dir, err = resolveModel(*dir, stdout); err != nil {
		return err
	}
	req := loadRequest{Dir: *dir, Backend: *backend, Context: *ctxLen, CacheBytes: *cacheMB << 20, MemoryGB: *memGB}
	l, err := loadModel(req, stdout)
	if err != nil {
		return err
	}
	live, err := newLiveModel(l, *dir, service.Options{ContextLength: l.context, QueueLimit: *queue, CacheBytes: l.cacheBytes},
		req, manage.NewHubDownloader(setupPull), stdout)
	if err != nil {
		return err
	}
	defer live.slot.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	opts := api.Options{APIKey: *apiKey, AllowedOrigins: splitList(*origins), AllowedHosts: splitList(*hosts),
		Logger: log.New(os.Stderr, "petal: ", log.LstdFlags)}
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		switch ip := net.ParseIP(host); {
		case ip != nil && ip.IsUnspecified():
			fmt.Fprintln(stdout, "note: listening on every interface; requests must name this machine with a host given to --allow-host (or a loopback name)")
		case ip != nil:
			opts.AllowedHosts = append(opts.AllowedHosts, host)
		}
	}
	if opts.Fallback, err = webUI(uiConfig{live: live, addr: ln.Addr().String(), apiKey: *apiKey,
		origins: opts.AllowedOrigins, ctxLen: *ctxLen, settings: *settingsFile, logger: opts.Logger}); err != nil {
		ln.Close()
		return err
	}
	srv := api.NewOnSlot(live.slot, opts).HTTPServer(*addr)
	info := live.slot.Current().Info()
	fmt.Fprintf(stdout, "serving %s (context %d tokens) on http://%s/v1\n", info.Name, info.ContextLength, endpointHost(ln.Addr().String()))
	fmt.Fprintln(stdout, describeCache(l, *cacheMB<<20))
	fmt.Fprintln(stdout, "decode: "+engine.DecodePath(l.model))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
