package main

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	goruntime "runtime"
	"strconv"
	"time"

	"petal/internal/loginitem"
	"petal/internal/manage"
	"petal/internal/models"
	"petal/internal/runtime"
	"petal/internal/service"
)

// runDesktop starts the desktop app; it is set only in builds with the
// desktop tag (app_wails.go). Without it, `petal` alone prints the usage.
var runDesktop func() error

// App is the desktop app behind the window: the model service, the local
// endpoint other apps use (on the settings' port), and the handler the
// window's webview calls for the UI, /v1 and /manage.
type App struct {
	rt *runtime.Runtime
	// Endpoint is the OpenAI base URL of the local endpoint.
	Endpoint string
	// Window serves the webview's requests.
	Window http.Handler
	// ModelName and Demo describe what is loaded, for the menu bar.
	ModelName string
	Demo      bool
	log       *log.Logger
}

// desktopBackend is the backend the app runs: the GPU on a Mac, the CPU
// elsewhere.
func desktopBackend() string {
	if goruntime.GOOS == "darwin" {
		return "metal"
	}
	return "cpu"
}

// startApp loads the default model (the installed Qwen3.6, else the demo
// model), and starts the local endpoint as the settings say.
func startApp(store *manage.SettingsStore, logger *log.Logger) (*App, error) {
	s := store.Get()
	dir, demo, err := models.DefaultModelDir()
	if err != nil {
		return nil, err
	}
	host, apiKey := "127.0.0.1", s.APIKey
	if s.Expose {
		host = "0.0.0.0"
		if apiKey == "" {
			apiKey = s.AccessToken
		}
	}
	// onSettings keeps the login item as the settings say, at start and
	// on every change.
	onSettings := func(s manage.Settings) {
		if err := loginitem.Set(s.StartAtLogin); err != nil {
			logger.Print(err)
		}
	}
	rt, err := runtime.Open(runtime.Config{
		Load: runtime.LoadRequest{Dir: dir, Backend: desktopBackend(), Context: s.ContextLength, CacheBytes: service.DefaultCacheBytes},
		Addr: net.JoinHostPort(host, strconv.Itoa(s.Port)), APIKey: apiKey, AllowedOrigins: s.AllowedOrigins,
		Settings: store, OnSettings: onSettings, Log: logger, Notes: logLines{logger},
		ShutdownTimeout: appShutdownTimeout,
	})
	if le := (*runtime.ListenError)(nil); errors.As(err, &le) {
		return nil, fmt.Errorf("the local endpoint cannot listen on %s (change the port in Settings): %w", le.Addr, le.Err)
	}
	if err != nil {
		return nil, err
	}
	for _, line := range rt.Startup() {
		logger.Print(line)
	}
	a := &App{rt: rt, Endpoint: rt.Endpoint(), Window: fromWebview(rt.Handler(), apiKey), ModelName: rt.Info().Name, Demo: demo, log: logger}
	go func() {
		if err := rt.Serve(); err != nil {
			logger.Printf("local endpoint: %v", err)
		}
	}()
	onSettings(s)
	return a, nil
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

// appShutdownTimeout bounds how long quitting waits for running requests.
const appShutdownTimeout = 5 * time.Second

// Close stops the endpoint and frees the model.
func (a *App) Close() error { return a.rt.Close() }
