package main

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	goruntime "runtime"
	"time"

	"petal/engine/spec"
	"petal/internal/loginitem"
	"petal/internal/manage"
	"petal/internal/models"
	"petal/internal/prefixdisk"
	"petal/internal/runtime"
	"petal/internal/service"
)

// runDesktop starts the desktop app; it is set only in builds with the
// desktop tag (app_wails.go). Without it, `petal` alone prints the usage.
var runDesktop func() error

// App is the desktop app behind the window: the model service, the local
// endpoint other apps use (on the settings' port), and the handler the
// window's webview calls for the UI, /v1 and /manage. The model loads in
// the background, so the window can open at once: until the load is done
// the window's handler answers that it is loading (loading.go).
type App struct {
	// Endpoint is the OpenAI base URL of the local endpoint, which
	// listens once the model is loaded.
	Endpoint string
	// Window serves the webview's requests.
	Window http.Handler
	// Demo says the demo model is the one loading (no real one is
	// installed).
	Demo bool
	log  *log.Logger

	dir, backend string
	// ready is closed when the load has ended; then rt is the runtime
	// and window its handler for the webview, or rt is nil and loadErr
	// says why; modelName is the first model's name.
	ready     chan struct{}
	rt        *runtime.Runtime
	window    http.Handler
	loadErr   error
	modelName string
	// disk is the prefix cache's disk tier, nil when off.
	disk *prefixdisk.Store
}

// desktopBackend is the backend the app runs: the GPU on a Mac, the CPU
// elsewhere.
func desktopBackend() string {
	if goruntime.GOOS == "darwin" {
		return "metal"
	}
	return "cpu"
}

// openRuntime loads the model and listens; tests hold it back to see the
// app while it loads.
var openRuntime = runtime.Open

// startApp starts loading the default model (the installed Qwen3.6, else
// the demo model) in the background and returns at once; the local
// endpoint starts, as the settings say, when the model is loaded.
func startApp(store *manage.SettingsStore, logger *log.Logger) (*App, error) {
	dir, demo, err := models.DefaultModelDir()
	if err != nil {
		return nil, err
	}
	// The rule petal serve applies, without its flags: where to listen,
	// the one key (the API key, else the access token when exposed), and
	// what the Settings screen reports in force and from where.
	applied, err := store.Apply(manage.Overrides{})
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(applied.Addr)
	if err != nil {
		return nil, err
	}
	// onSettings keeps the login item as the settings say, at start and
	// on every change.
	onSettings := func(s manage.Settings) {
		if err := loginitem.Set(s.StartAtLogin); err != nil {
			logger.Print(err)
		}
	}
	a := &App{
		// The endpoint's address as Runtime.Endpoint gives it: loopback
		// for a listener on every interface.
		Endpoint: "http://" + net.JoinHostPort("127.0.0.1", port) + "/v1",
		Demo:     demo, log: logger, dir: dir, backend: desktopBackend(), ready: make(chan struct{}),
	}
	a.Window = http.HandlerFunc(a.serveWindow)
	a.disk = openPrefixDisk(applied.PrefixCacheDir, applied.PrefixCacheGB, logger)
	cfg := runtime.Config{
		Load: runtime.LoadRequest{Dir: dir, Backend: a.backend, Context: applied.ContextLength, CacheBytes: service.DefaultCacheBytes,
			Parallel: applied.Parallel},
		Addr: applied.Addr, APIKey: applied.APIKey, AllowedOrigins: applied.AllowedOrigins,
		Settings: store, OnSettings: onSettings, Log: logger, Notes: logLines{logger},
		ShutdownTimeout: appShutdownTimeout, PrefixDisk: a.disk,
	}
	// A valid saved setting, as Apply read it (Validate refused others).
	cfg.Speculate, _ = spec.ParseMode(applied.Speculative)
	go a.load(cfg, applied.APIKey)
	onSettings(store.Get())
	return a, nil
}

// load opens the runtime, starts the endpoint and ends the loading state.
func (a *App) load(cfg runtime.Config, apiKey string) {
	defer close(a.ready)
	start := time.Now()
	rt, err := openRuntime(cfg)
	if le := (*runtime.ListenError)(nil); errors.As(err, &le) {
		err = fmt.Errorf("the local endpoint cannot listen on %s (change the port in Settings): %w", le.Addr, le.Err)
	}
	if err != nil {
		a.loadErr = err
		a.log.Printf("loading the model: %v", err)
		return
	}
	for _, line := range rt.Startup() {
		a.log.Print(line)
	}
	a.rt, a.modelName, a.window = rt, rt.Info().Name, fromWebview(rt.Handler(), apiKey)
	a.log.Printf("local endpoint on %s (model %s, %s, loaded in %.1f s)", rt.Endpoint(), a.modelName,
		runtime.DescribeParallel(rt.Metrics().Parallel), time.Since(start).Seconds())
	go func() {
		if err := rt.Serve(); err != nil {
			a.log.Printf("local endpoint: %v", err)
		}
	}()
}

// Wait blocks until the load has ended and returns its error.
func (a *App) Wait() error {
	<-a.ready
	return a.loadErr
}

// loaded is the runtime, or nil while loading or after a failed load.
func (a *App) loaded() *runtime.Runtime {
	select {
	case <-a.ready:
		return a.rt
	default:
		return nil
	}
}

// logLines writes each write to a logger as one entry.
type logLines struct{ *log.Logger }

func (l logLines) Write(p []byte) (int, error) {
	l.Print(string(p))
	return len(p), nil
}

// fromWebview adapts the webview's requests to the endpoint's handler.
// They reach it inside the process, from the app's own page, so they are
// made what a request of this machine's to the endpoint is: from loopback,
// to a loopback host, same-origin, with the endpoint's key (when it has
// one) in place of any the page sent. And Wails' response writers, which
// hand every Write to the webview at once, gain the Flush that streaming
// responses call.
func fromWebview(h http.Handler, apiKey string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "127.0.0.1:0"
		r.Host = "127.0.0.1"
		r.Header.Del("Origin")
		r.Header.Del("Sec-Fetch-Site")
		if apiKey != "" {
			r.Header.Set("Authorization", "Bearer "+apiKey)
			r.Header.Del("X-Api-Key")
		}
		if _, ok := w.(http.Flusher); !ok {
			w = writeThrough{w}
		}
		h.ServeHTTP(w, r)
	})
}

// writeThrough is a ResponseWriter whose writes are not buffered, so
// flushing has nothing to do.
type writeThrough struct{ http.ResponseWriter }

func (writeThrough) Flush() {}

func (w writeThrough) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// gigabyte is the unit of the settings' prefix_cache_gb, as disks are sold.
const gigabyte = 1e9

// appShutdownTimeout bounds how long quitting waits for running requests.
const appShutdownTimeout = 5 * time.Second

// Close waits for a load under way to end, then stops the endpoint and
// frees the model.
func (a *App) Close() error {
	var err error
	if a.Wait() == nil {
		err = a.rt.Close()
	}
	if a.disk != nil {
		err = errors.Join(err, a.disk.Close())
	}
	return err
}

// openPrefixDisk gives the app the prefix cache's disk tier as the
// settings say, as petal serve does: in dir ("" for the user's cache
// folder) with gb GB (manage.AutoPrefixCacheGB: 10% of the free disk at
// most 20 GB; 0: off), so an agent's long system prompt survives the app's
// restart too. Without a cache folder, or when it cannot be opened, the
// app keeps the memory tier alone and its log says why.
func openPrefixDisk(dir string, gb float64, logger *log.Logger) *prefixdisk.Store {
	if gb == 0 {
		logger.Print("prefix cache on disk: off (the settings' prefix_cache_gb is 0)")
		return nil
	}
	if dir == "" {
		dir = prefixdisk.DefaultDir()
	}
	if dir == "" {
		logger.Print("prefix cache on disk: off (no cache folder)")
		return nil
	}
	budget := int64(gb * gigabyte)
	if gb == manage.AutoPrefixCacheGB {
		budget = prefixdisk.DefaultBudget(dir)
	}
	s, err := prefixdisk.Open(dir, budget, logger.Printf)
	if err != nil {
		logger.Printf("prefix cache on disk: off: %v", err)
		return nil
	}
	return s
}
