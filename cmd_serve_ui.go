package main

import (
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"petal/frontend"
	"petal/internal/fit"
	"petal/internal/manage"
	"petal/internal/models"
)

// uiConfig is what the web UI and its management routes need to know of
// the running server.
type uiConfig struct {
	// live is the served model, which the Setup screen can replace.
	live     *liveModel
	addr     string // the address listened on
	apiKey   string
	origins  []string
	ctxLen   int
	settings string // the settings file; "" for the user's default
	// store, when set, is used instead of opening settings.
	store *manage.SettingsStore
	// onSettings is called after each save of the settings.
	onSettings func(manage.Settings)
	logger     *log.Logger
}

// webUI serves what the API leaves over: /manage/ and the UI at every
// other path.
func webUI(c uiConfig) (http.Handler, error) {
	store := c.store
	if store == nil {
		path := c.settings
		if path == "" {
			p, err := manage.DefaultSettingsPath()
			if err != nil {
				return nil, err
			}
			path = p
		}
		var err error
		if store, err = manage.OpenSettings(path); err != nil {
			return nil, err
		}
	}
	running := store.Get()
	running.APIKey, running.AllowedOrigins, running.ContextLength = c.apiKey, c.origins, c.ctxLen
	if running.AllowedOrigins == nil {
		running.AllowedOrigins = []string{}
	}
	host, port, err := net.SplitHostPort(c.addr)
	if err == nil {
		if p, err := strconv.Atoi(port); err == nil {
			running.Port = p
		}
		running.Expose = !isLoopbackHost(host)
	}
	opts := manage.Options{
		Model:      c.live.status,
		Endpoint:   "http://" + endpointHost(c.addr) + "/v1",
		APIKey:     c.apiKey,
		Fit:        qwenFit,
		Doctor:     doctorForUI,
		Downloader: c.live.downloads,
		Settings:   store,
		Running:    running,
		OnSettings: c.onSettings,
		Logger:     c.logger,
	}
	if c.live.downloads != nil {
		opts.Load = c.live.load
	}
	m, err := manage.New(opts)
	if err != nil {
		return nil, err
	}
	ui := frontend.Handler()
	mux := http.NewServeMux()
	mux.Handle(manage.Prefix, m)
	mux.Handle("/", ui)
	return mux, nil
}

// qwenFit is the Setup screen's memory verdict: Qwen3.6-35B-A3B on this
// machine at a context length, with the sessions petal fit assumes.
func qwenFit(contextLen int) (any, error) {
	m, err := fit.Qwen36()
	if err != nil {
		return nil, err
	}
	// Once the checkpoint is installed, its own files are sized: a folder
	// that is not aligned costs copies at load.
	dir := filepath.Join(models.Root(), models.RealModelName)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		if m, err = fit.FromCheckpoint(dir); err != nil {
			return nil, err
		}
	}
	budget, err := fit.Host()
	if err != nil {
		return nil, err
	}
	return fit.Check(m, budget, fit.Request{Context: contextLen, CachedSessions: fit.DefaultCachedSessions})
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// endpointHost is the host:port clients on this machine should use: an
// address listening on every interface is reached through loopback.
func endpointHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
