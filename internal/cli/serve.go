package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"petal/internal/hub"
	"petal/internal/runtime"
	"petal/internal/service"
)

// Defaults of petal serve.
const (
	// DefaultAddr is loopback only: other machines cannot reach the server
	// unless asked for with --addr.
	DefaultAddr = "127.0.0.1:8080"
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
	dir, backend := modelFlags(fs, "checkpoint folder (default: the installed Qwen3.6-35B-A3B, else the built-in demo model)")
	addr := fs.String("addr", DefaultAddr, "address to listen on")
	apiKey := fs.String("api-key", os.Getenv("PETAL_API_KEY"), "API key clients must send as a Bearer token (default $PETAL_API_KEY)")
	origins := fs.String("allow-origin", "", "comma-separated browser origins allowed to call the API")
	hosts := fs.String("allow-host", "", "comma-separated host names the Host header may carry besides loopback")
	ctxLen := fs.Int("context", 0, "context length in tokens (default: the model's); lowered to the largest that fits the memory")
	queue := fs.Int("queue", service.DefaultQueueLimit, "requests that may wait for the model")
	cacheMB := fs.Int64("cache-mb", service.DefaultCacheBytes>>20, "prefix cache size in MiB (0 turns it off); at most the memory the fit check leaves beside the model")
	memGB := fs.Float64("memory-gb", 0, "check the memory fit as on a Mac with this much memory (GB as Apple counts them) instead of what this machine reports")
	settingsFile := fs.String("settings", "", "the web UI's settings file (default: petal/settings.json in the user's config folder)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *queue < 1 || *ctxLen < 0 || *cacheMB < 0 {
		return errors.New("--queue must be at least 1, --context and --cache-mb at least 0")
	}
	var err error
	if *dir, err = resolveModel(*dir, stdout); err != nil {
		return err
	}
	rt, err := runtime.Open(runtime.Config{
		Load:       runtime.LoadRequest{Dir: *dir, Backend: *backend, Context: *ctxLen, CacheBytes: *cacheMB << 20, MemoryGB: *memGB},
		QueueLimit: *queue, Addr: *addr, APIKey: *apiKey, AllowedOrigins: splitList(*origins), AllowedHosts: splitList(*hosts),
		SettingsPath: *settingsFile, Pull: setupPull, Log: log.New(os.Stderr, "petal: ", log.LstdFlags), Notes: stdout,
	})
	if err != nil {
		return err
	}
	info := rt.Info()
	fmt.Fprintf(stdout, "serving %s (context %d tokens) on %s\n", info.Name, info.ContextLength, rt.Endpoint())
	for _, line := range rt.Startup() {
		fmt.Fprintln(stdout, line)
	}
	errc := make(chan error, 1)
	go func() { errc <- rt.Serve() }()
	select {
	case err := <-errc:
		rt.Close()
		return err
	case <-ctx.Done():
	}
	if err := rt.Close(); err != nil {
		return err
	}
	return <-errc
}

// setupPull is the pull the Setup screen runs: the real model from the
// Hugging Face Hub into its folder under the models root (tests point it
// at a fake Hub).
var setupPull = hub.Options{}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
