package runtime

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"petal/engine/gpumodel"
	"petal/frontend"
	"petal/internal/doctor"
	"petal/internal/fit"
	"petal/internal/httpgate"
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
	// budget is this machine's memory for the Setup screen's verdict: the
	// served GPU's own working set, else the host's.
	budget func() (fit.Budget, error)
	// backend is the one the served model runs on.
	backend string
	// cpu is this machine's measured CPU decode rate, for the verdict
	// where the CPU backend would run the 35B model.
	cpu *cpuSpeed
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
		running.Expose = !httpgate.LoopbackHost(host)
	}
	opts := manage.Options{
		Model:      c.live.status,
		Endpoint:   "http://" + endpointHost(c.addr) + "/v1",
		APIKey:     c.apiKey,
		Fit:        func(n int) (any, error) { return qwenFit(n, c.budget, setupBackend(c.backend), c.cpu) },
		Doctor:     doctorForUI,
		Downloader: c.live.downloads,
		Settings:   store,
		Running:    running,
		OnSettings: c.onSettings,
		Logger:     c.logger,
	}
	opts.PrefixCache = managedPrefixCache(c.live.disk)
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

// setupFit is the Setup screen's memory verdict with what the screen says
// beside it: which backend would run the model here and how fast, and how
// much a download is before it starts.
type setupFit struct {
	fit.Report
	// Backend is what would run the model on this machine: "cuda" where the
	// server runs on an NVIDIA GPU, "metal" on an Apple silicon Mac, "cpu"
	// anywhere else.
	Backend string `json:"backend"`
	// DecodeBytesPerToken is what one decode step reads (weights, KV rows,
	// DeltaNet state) at the asked context, as petal bench --dry-run counts it.
	DecodeBytesPerToken int64 `json:"decode_bytes_per_token"`
	// CPUDecode is the CPU backend's rate at this model's shape, measured
	// on this machine, given where Backend is "cpu"; CPUDecodeError says
	// why there is none where the measurement failed.
	CPUDecode      *cpuDecodeFigure `json:"cpu_decode,omitempty"`
	CPUDecodeError string           `json:"cpu_decode_error,omitempty"`
	// DownloadBytes is about what a download fetches: the weights as the
	// shards hold them (the other files are kilobytes).
	DownloadBytes int64 `json:"download_bytes"`
}

// cpuDecodeFigure is the CPU decode rate measured on this machine and how
// it was measured.
type cpuDecodeFigure struct {
	// ReadBytesPerSecond is the rate the CPU backend's decode product read
	// weights at here.
	ReadBytesPerSecond float64 `json:"read_bytes_per_second"`
	// TokensPerSecond is ReadBytesPerSecond over the bytes one token reads:
	// the most a decode step bound by those reads can reach (a token also
	// runs smaller products and the attention).
	TokensPerSecond float64 `json:"tokens_per_second"`
	// Machine is the CPU measured and the cores used; Measured is when.
	Machine  string    `json:"machine"`
	Measured time.Time `json:"measured"`
	// How says what was timed and where the figure is kept.
	How string `json:"how"`
}

// qwenFit is the Setup screen's memory verdict: Qwen3.6-35B-A3B at a
// context length on budget, with the sessions petal fit assumes, run by
// backend (setupBackend's); for the CPU backend, with the speed cpu
// measured on this machine, or why there is none.
func qwenFit(contextLen int, budget func() (fit.Budget, error), backend string, cpu *cpuSpeed) (any, error) {
	m, err := fit.Qwen36()
	if err != nil {
		return nil, err
	}
	download := m.WeightsBytes
	// Once the checkpoint is installed, its own files are sized: a folder
	// that is not aligned costs copies at load.
	dir := filepath.Join(models.Root(), models.RealModelName)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		if m, err = fit.FromCheckpoint(dir); err != nil {
			return nil, err
		}
	}
	b, err := budget()
	if err != nil {
		return nil, err
	}
	rep, err := fit.Check(m, b, fit.Request{Context: contextLen, CachedSessions: fit.DefaultCachedSessions})
	if err != nil {
		return nil, err
	}
	// The costliest decode step of a context is its last, at position
	// Context-1: position Context lies past the model's last one when the
	// whole context is asked for (a 500 at context=262144 before).
	last := rep.Context - 1
	step, err := gpumodel.DryRun(m.Config, last)
	if err != nil {
		return nil, err
	}
	out := setupFit{Report: rep, Backend: backend, DownloadBytes: download,
		DecodeBytesPerToken: step.WeightBytes + gpumodel.DecodeCacheBytes(m.Config, last)}
	if backend == "cpu" {
		// The screen waits for the first measurement, a second or so: a
		// figure from another machine would mislead.
		if c, err := cpu.get(context.Background()); err != nil {
			out.CPUDecodeError = err.Error()
		} else {
			out.CPUDecode = &cpuDecodeFigure{ReadBytesPerSecond: c.ReadBytesPerSecond,
				TokensPerSecond: c.ReadBytesPerSecond / float64(out.DecodeBytesPerToken),
				Machine:         fmt.Sprintf("%s, %d cores", c.CPU, c.Cores), Measured: c.Measured,
				How: fmt.Sprintf("The CPU backend's 4-bit decode product at this model's largest shape, timed for %g s on every core "+
					"the first time this screen asked, with this build of Petal%s; %s.", c.Seconds, loadWords(c), cpu.where())}
		}
	}
	return out, nil
}

// busyLoad is the load average per core above which other programs were
// busy enough to slow a measurement noticeably.
const busyLoad = 0.5

// loadWords says how busy the machine was while c was measured, where
// that is known.
func loadWords(c cpuMeasurement) string {
	switch {
	case c.Load == nil:
		return ""
	case *c.Load > busyLoad*float64(c.Cores):
		return fmt.Sprintf(", at load average %.1f: other programs were busy, so the figure is low (measure again when the machine is quiet)", *c.Load)
	}
	return fmt.Sprintf(", at load average %.1f", *c.Load)
}

// setupBackend is what would run the 35B model here, given the backend the
// server runs on: an NVIDIA GPU it already uses, else this Mac's GPU, else
// the CPU.
func setupBackend(served string) string {
	switch {
	case served == "cuda":
		return "cuda"
	case appleGPU():
		return "metal"
	}
	return "cpu"
}

// appleGPU reports whether this machine has the GPU Petal's Metal backend
// runs on.
func appleGPU() bool { return runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" }

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

// doctorReply is what the Setup screen's "Check this Mac" gets: the
// checks, and the text petal doctor prints, for its copy button.
type doctorReply struct {
	Report *doctor.Report `json:"report"`
	Text   string         `json:"text"`
}

// doctorRunning lets one UI-started check run at a time: each one
// compiles and runs every kernel on the device the server serves from.
var doctorRunning sync.Mutex

// doctorForUI runs the checks on this machine's default backend for
// POST /manage/doctor.
func doctorForUI(ctx context.Context) (any, error) {
	if !doctorRunning.TryLock() {
		return nil, manage.ErrDoctorBusy
	}
	defer doctorRunning.Unlock()
	r, err := doctor.Run(doctor.Options{Context: ctx})
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		return nil, err
	}
	return doctorReply{Report: r, Text: b.String()}, nil
}
