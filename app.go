package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"petal/engine"
	"petal/internal/api"
	"petal/internal/loginitem"
	"petal/internal/manage"
	"petal/internal/models"
	"petal/internal/service"
)

// runDesktop starts the desktop app; it is set only in builds with the
// desktop tag (app_wails.go). Without it, `petal` alone prints the usage.
var runDesktop func() error

// Origins and hosts of the desktop window's webview: Wails serves the UI
// from wails://wails on macOS and Linux and http://wails.localhost on
// Windows.
var (
	windowHosts   = []string{"wails", "wails.localhost"}
	windowOrigins = []string{"wails://wails", "http://wails.localhost", "https://wails.localhost"}
)

// App is the desktop app behind the window: the model service, the local
// endpoint other apps use (on the settings' port), and the handler the
// window's webview calls for the UI, /v1 and /manage.
type App struct {
	// ctx is Wails' context, needed by its runtime calls; it is set in
	// startup and confined to the desktop files.
	//lint:ignore U1000 set and read only by the desktop build (app_wails.go)
	ctx context.Context

	settings *manage.SettingsStore
	// live is the served model, which the Setup screen can replace.
	live *liveModel
	srv  *http.Server
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
	if runtime.GOOS == "darwin" {
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
	backend := desktopBackend()
	var notes strings.Builder
	req := loadRequest{Dir: dir, Backend: backend, Context: s.ContextLength, CacheBytes: service.DefaultCacheBytes}
	l, err := loadModel(req, &notes)
	if notes.Len() > 0 {
		logger.Print(notes.String())
	}
	if err != nil {
		return nil, err
	}
	a := &App{settings: store, Demo: demo, log: logger}
	a.live, err = newLiveModel(l, dir, service.Options{ContextLength: l.context, CacheBytes: l.cacheBytes}, req,
		manage.NewHubDownloader(setupPull), logger.Writer())
	if err != nil {
		return nil, err
	}
	logger.Print(describeCache(l, service.DefaultCacheBytes))
	logger.Print("decode: " + engine.DecodePath(l.model))
	a.ModelName = a.live.slot.Current().Info().Name

	host := "127.0.0.1"
	apiKey := s.APIKey
	if s.Expose {
		host = "0.0.0.0"
		if apiKey == "" {
			apiKey = s.AccessToken
		}
	}
	addr := net.JoinHostPort(host, strconv.Itoa(s.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("the local endpoint cannot listen on %s (change the port in Settings): %w", addr, err)
	}
	// onSettings keeps the login item as the settings say, at start and
	// on every change.
	onSettings := func(s manage.Settings) {
		if err := loginitem.Set(s.StartAtLogin); err != nil {
			logger.Print(err)
		}
	}
	cfg := uiConfig{live: a.live, addr: ln.Addr().String(), apiKey: apiKey,
		origins: s.AllowedOrigins, ctxLen: s.ContextLength, store: store, onSettings: onSettings, logger: logger}
	endpointUI, err := webUI(cfg)
	if err != nil {
		ln.Close()
		a.Close()
		return nil, err
	}
	a.srv = api.NewOnSlot(a.live.slot, api.Options{APIKey: apiKey, AllowedOrigins: s.AllowedOrigins, Fallback: endpointUI, Logger: logger}).HTTPServer(addr)
	a.Endpoint = "http://" + endpointHost(ln.Addr().String()) + "/v1"
	go func() {
		if err := a.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("local endpoint: %v", err)
		}
	}()

	// The window's own handler: no key (nothing outside this process can
	// reach it) and the webview's origin allowed.
	cfg.apiKey = ""
	windowUI, err := webUI(cfg)
	if err != nil {
		a.Close()
		return nil, err
	}
	win := api.NewOnSlot(a.live.slot, api.Options{AllowedHosts: windowHosts, AllowedOrigins: windowOrigins, Fallback: windowUI, Logger: logger})
	a.Window = fromWebview(win)
	onSettings(s)
	return a, nil
}

// fromWebview adapts the webview's requests: they reach the handler inside
// the process, without a network address, so they are marked as coming
// from this machine; and Wails' response writers, which hand every Write
// to the webview at once, gain the Flush that streaming responses call.
func fromWebview(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "127.0.0.1:0"
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
func (a *App) Close() error {
	var errs []error
	if a.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), appShutdownTimeout)
		defer cancel()
		if err := a.srv.Shutdown(ctx); err != nil {
			errs = append(errs, a.srv.Close())
		}
	}
	if a.live != nil {
		a.live.slot.Close()
	}
	return errors.Join(errs...)
}

// openSettings opens the user's settings file.
//
//lint:ignore U1000 used only by the desktop build (app_wails.go)
func openSettings() (*manage.SettingsStore, error) {
	path, err := manage.DefaultSettingsPath()
	if err != nil {
		return nil, err
	}
	return manage.OpenSettings(path)
}
