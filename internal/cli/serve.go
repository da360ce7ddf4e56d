package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"petal/internal/fit"
	"petal/internal/hub"
	"petal/internal/manage"
	"petal/internal/models"
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
	fs.String("addr", "", "address to listen on (default: the saved settings' port, on every interface when they expose the server, else "+DefaultAddr+")")
	fs.String("api-key", "", "API key clients must send as a Bearer token (default: $"+envAPIKey+", else the saved settings')")
	fs.String("allow-origin", "", "comma-separated browser origins allowed to call the API (default: the saved settings')")
	hosts := fs.String("allow-host", "", "comma-separated host names the Host header may carry without the API key, besides loopback and the address a request arrives at")
	ctxLen := fs.Int("context", 0, "context length in tokens (default: the saved settings', else the model's); lowered to the largest that fits the memory")
	queue := fs.Int("queue", service.DefaultQueueLimit, "requests that may wait for the model")
	cacheMB := fs.Int64("cache-mb", service.DefaultCacheBytes>>20, "prefix cache size in MiB (0 turns it off); at most the memory the fit check leaves beside the model")
	memGB := fs.Float64("memory-gb", 0, "check the memory fit as on a Mac with this much memory (GB as Apple counts them) instead of what this machine reports")
	prefixDiskFlags(fs)
	parallelFlag(fs)
	fs.String("speculative", "", "decode with the model's MTP draft head: 'auto' drafts while it pays, 'off' never, 'on' at every step (default: the saved settings', else auto)")
	accessLog := fs.Bool("access-log", true, "log one line per API request to stderr: client, route, status, tokens and time, never what was sent")
	settingsFile := fs.String("settings", "", "the web UI's settings file, whose server settings apply where no flag sets them (default: petal/settings.json in the user's config folder)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *queue < 1 || *ctxLen < 0 || *cacheMB < 0 {
		return errors.New("--queue must be at least 1, --context and --cache-mb at least 0")
	}
	store, over, err := serveSettings(fs, *settingsFile)
	if err != nil {
		return err
	}
	applied, err := store.Apply(over)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	mode, err := parseSpeculative(applied.Speculative)
	if err != nil {
		return err
	}
	if saved := applied.FromSettings(); len(saved) > 0 {
		fmt.Fprintf(stdout, "using the saved settings in %s for %s (a flag wins over each)\n", store.Path(), strings.Join(saved, ", "))
	}
	if *dir, err = resolveModel(*dir, stdout); err != nil {
		return err
	}
	logger := log.New(os.Stderr, "petal: ", log.LstdFlags)
	disk, diskNote, err := openPrefixDisk(applied.PrefixCacheDir, applied.PrefixCacheGB, logger.Printf)
	if err != nil {
		return err
	}
	if disk != nil {
		defer disk.Close() // after the runtime's, which ends the writes
	}
	rt, err := runtime.Open(runtime.Config{
		Load: runtime.LoadRequest{Dir: *dir, Backend: *backend, Context: applied.ContextLength, CacheBytes: *cacheMB << 20, MemoryGB: *memGB,
			Parallel: applied.Parallel},
		QueueLimit: *queue, Addr: applied.Addr, APIKey: applied.APIKey, AllowedOrigins: applied.AllowedOrigins, AllowedHosts: splitList(*hosts),
		Settings: store, Pull: setupPull, Log: logger, Notes: stdout, PrefixDisk: disk, NoAccessLog: !*accessLog, Speculate: mode,
	})
	if err != nil {
		return err
	}
	info := rt.Info()
	fmt.Fprintf(stdout, "serving %s (context %d tokens, %s) on %s\n", info.Name, info.ContextLength, runtime.DescribeParallel(rt.Metrics().Parallel), rt.Endpoint())
	if err := printWebUI(stdout, rt.Endpoint(), models.DisplayName(*dir, info.Name) == models.DemoDisplayName); err != nil {
		rt.Close()
		return err
	}
	for _, line := range rt.Startup() {
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintln(stdout, diskNote)
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

// printWebUI tells where the web UI is, from the API's endpoint (its
// root, /v1 off), and, when the demo model is served, that it is a toy and
// how to get the real one, with its size as the download counts it.
func printWebUI(w io.Writer, endpoint string, demo bool) error {
	fmt.Fprintf(w, "web UI: %s (chat, the Model screen, settings)\n", strings.TrimSuffix(endpoint, "v1"))
	if !demo {
		return nil
	}
	m, err := fit.Qwen36()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "the demo model is a toy: get the real one (%.1f GB) with `petal pull`, or the Download button on the web UI's Model screen\n",
		float64(m.WeightsBytes)/1e9)
	return nil
}

// envAPIKey names the environment variable --api-key defaults to; set, it
// overrides the saved settings' key as the flag does.
const envAPIKey = "PETAL_API_KEY"

// serveSettings opens the settings file (the user's when path is "") and
// reads which server settings the command line gives: a flag given, or
// $PETAL_API_KEY, wins over the saved setting. Keys and origins are
// checked as the Settings screen checks them.
func serveSettings(fs *flag.FlagSet, path string) (*manage.SettingsStore, manage.Overrides, error) {
	var over manage.Overrides
	if path == "" {
		p, err := manage.DefaultSettingsPath()
		if err != nil {
			return nil, over, fmt.Errorf("no settings file: %w (name one with --settings)", err)
		}
		path = p
	}
	store, err := manage.OpenSettings(path)
	if err != nil {
		return nil, over, err
	}
	if key := os.Getenv(envAPIKey); key != "" {
		over.APIKey = &key
	}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		switch f.Name {
		case "addr":
			over.Addr = &v
		case "api-key":
			over.APIKey = &v
		case "allow-origin":
			list := splitList(v)
			over.AllowedOrigins = &list
		case "context":
			n := f.Value.(flag.Getter).Get().(int)
			over.ContextLength = &n
		case "prefix-cache-dir":
			// A folder named on the command line is relative to where
			// serve starts; the settings hold it whole.
			if v != "" {
				abs, err := filepath.Abs(v)
				if err != nil {
					flagErr = fmt.Errorf("--prefix-cache-dir: %w", err)
					return
				}
				v = abs
			}
			over.PrefixCacheDir = &v
		case "prefix-cache-gb":
			gb, err := parsePrefixCacheGB(v)
			if err != nil {
				flagErr = err
				return
			}
			over.PrefixCacheGB = &gb
		case "parallel":
			n, err := parseParallel(v)
			if err != nil {
				flagErr = err
				return
			}
			over.Parallel = &n
		case "speculative":
			if _, err := parseSpeculative(v); err != nil {
				flagErr = err
				return
			}
			over.Speculative = &v
		}
	})
	if flagErr != nil {
		return nil, over, flagErr
	}
	if over.APIKey != nil {
		if err := manage.CheckKey(*over.APIKey); err != nil {
			return nil, over, fmt.Errorf("--api-key (or $%s): %w", envAPIKey, err)
		}
	}
	if over.AllowedOrigins != nil {
		for _, o := range *over.AllowedOrigins {
			if err := manage.CheckOrigin(o); err != nil {
				return nil, over, fmt.Errorf("--allow-origin: %w", err)
			}
		}
	}
	return store, over, nil
}

// parallelFlag defines --parallel, which has no value of its own: left
// out, the saved setting (else the memory fit's count) applies.
func parallelFlag(fs *flag.FlagSet) {
	fs.String("parallel", "", fmt.Sprintf("decode up to `N` requests together, 1 to %d, each with its own cache (default: the saved settings', else as many as the memory fit leaves room for, at most %d)",
		manage.MaxParallel, fit.MaxAutoParallel))
}

// parseParallel reads --parallel: 1 to manage.MaxParallel requests.
func parseParallel(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > manage.MaxParallel {
		return 0, fmt.Errorf("--parallel %q: want a number of requests from 1 to %d (leave it out for the saved setting or the memory fit's)", v, manage.MaxParallel)
	}
	return n, nil
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
