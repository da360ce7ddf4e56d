package manage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"petal/engine/damaged"
	"petal/internal/httpgate"
)

// Limits of a request.
const (
	// MaxBodyBytes bounds a request body; settings are the largest, well
	// under a kilobyte.
	MaxBodyBytes = 64 << 10
	// Prefix is the path every route starts with.
	Prefix = "/manage/"
)

// StateReady is the state of a loaded model that answers requests; the UI
// also knows "absent", "loading" and "failed".
const StateReady = "ready"

// Refusals of a load, which Options.Load marks its errors with (errors.Is)
// so that the UI can tell them apart by code.
var (
	ErrNotDownloaded = errors.New("the model is not downloaded and verified")
	ErrDoesNotFit    = errors.New("not enough memory")
	ErrLoadBusy      = errors.New("a load is already running")
	// ErrDoctorBusy is Options.Doctor's refusal while a check runs.
	ErrDoctorBusy = errors.New("a check is already running")
)

// CodeDamaged is the one code, for a load or a download, of an error marked
// [damaged.Err]: the model's files are bad, and the remedy is to download
// them again, which damagedMessage tells the user.
const CodeDamaged = "model_damaged"

const damagedMessage = "The model's files are damaged: delete the model and download it again."

// loadCodes names each load refusal for the UI.
var loadCodes = []struct {
	err  error
	code string
}{
	{ErrNotDownloaded, "not_downloaded"},
	{ErrDoesNotFit, "does_not_fit"},
	{ErrLoadBusy, "load_busy"},
	{damaged.Err, CodeDamaged},
}

// ModelStatus is what the server knows of its model.
type ModelStatus struct {
	// Name is the id API clients send; DisplayName is what people read.
	Name          string `json:"name"`
	DisplayName   string `json:"display_name"`
	State         string `json:"state"`
	ContextLength int    `json:"context_length"`
	Backend       string `json:"backend"`
	Dir           string `json:"dir"`
	// Demo says the model is the built-in demo, a toy; Thinks that the
	// model thinks before answering when thinking is left on (the demo
	// never does), so the chat window offers the switch only then.
	Demo   bool `json:"demo"`
	Thinks bool `json:"thinks"`
	// Running is how many requests hold the model now and Parallel how
	// many may decode together (the --parallel or parallel setting, or
	// what the memory fit left room for); both 0 while none is served.
	Running  int    `json:"requests_running"`
	Parallel int    `json:"parallel"`
	Error    string `json:"error,omitempty"`
}

// Status is the answer of GET /manage/status.
type Status struct {
	Model ModelStatus `json:"model"`
	// Endpoint is the OpenAI base URL clients should use.
	Endpoint       string `json:"endpoint"`
	APIKeyRequired bool   `json:"api_key_required"`
	// Downloads, Fit, Load and Doctor say whether those features are
	// wired in.
	Downloads bool `json:"downloads"`
	Fit       bool `json:"fit"`
	Load      bool `json:"load"`
	Doctor    bool `json:"doctor"`
}

// Action is something the UI asks of the download.
type Action string

// The download actions.
const (
	Start  Action = "start"
	Pause  Action = "pause"
	Resume Action = "resume"
	Cancel Action = "cancel"
	Verify Action = "verify"
	Delete Action = "delete"
)

var actions = map[Action]bool{Start: true, Pause: true, Resume: true, Cancel: true, Verify: true, Delete: true}

// DownloadError is a failure the UI can act on by its code.
type DownloadError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Detail is the error behind Message where Message is plain words.
	Detail string `json:"detail,omitempty"`
}

// DownloadRetry says, while a running download retries a connection, why
// (Reason: dns, no_route, refused, tls, timeout, server or network; Message
// in plain words, Detail the error) and when attempt Attempt of at most
// MaxAttempts starts. Unreachable says the Hub was not reached at all.
type DownloadRetry struct {
	Reason        string    `json:"reason"`
	Message       string    `json:"message"`
	Detail        string    `json:"detail"`
	Unreachable   bool      `json:"unreachable"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	Attempt       int       `json:"attempt"`
	MaxAttempts   int       `json:"max_attempts"`
}

// DownloadStatus is the answer of GET /manage/download. State is one of
// idle, running, paused, verifying, done, failed, cancelled.
type DownloadStatus struct {
	State      string         `json:"state"`
	Repo       string         `json:"repo"`
	Revision   string         `json:"revision"`
	Dir        string         `json:"dir"`
	BytesDone  int64          `json:"bytes_done"`
	BytesTotal int64          `json:"bytes_total"`
	Speed      float64        `json:"speed"`
	ETASeconds float64        `json:"eta_seconds"`
	Error      *DownloadError `json:"error,omitempty"`
	Retry      *DownloadRetry `json:"retry,omitempty"`
}

// Downloader drives the model download (an adapter over the download
// manager). Do returns once the action has been taken, not when the
// download ends; progress is read with Status.
type Downloader interface {
	Status() DownloadStatus
	Do(ctx context.Context, a Action) error
}

// Options wire the features in; nil ones are reported as not available.
type Options struct {
	// Model reports the served model. Required.
	Model func() ModelStatus
	// Endpoint is the OpenAI base URL, e.g. http://127.0.0.1:8080/v1.
	Endpoint string
	// APIKey, when set, is required from every caller (as on /v1), and lets
	// callers on other machines in.
	APIKey string
	// Fit returns the memory verdict at a context length (0: the default).
	Fit        func(contextLen int) (any, error)
	Downloader Downloader
	// Load loads the downloaded model and serves it in place of the
	// current one; its errors may be marked with ErrNotDownloaded,
	// ErrDoesNotFit or ErrLoadBusy.
	Load func(ctx context.Context) error
	// Doctor runs petal doctor's checks on this machine and returns the
	// report (POST /manage/doctor); it may refuse with ErrDoctorBusy.
	Doctor func(ctx context.Context) (any, error)
	// Settings are kept here; Running are the values the server applied at
	// start, which tell which saved settings wait for a restart. Where the
	// server built itself with Settings.Apply (petal serve), what Apply
	// recorded is reported instead, with each value's source; only
	// Running's port, the one the listener took, is read then.
	Settings *SettingsStore
	Running  Settings
	// OnSettings, when set, is called with the settings after each save
	// (the desktop app applies start-at-login there).
	OnSettings func(Settings)
	Logger     *log.Logger
	// PrefixCache is the prefix cache's disk tier; nil: none.
	PrefixCache PrefixCache
}

// Handler serves the routes under Prefix.
type Handler struct {
	opts Options
	mux  *http.ServeMux
	h    http.Handler
	log  *log.Logger
}

// New returns the management handler.
func New(opts Options) (*Handler, error) {
	if opts.Model == nil {
		return nil, errors.New("manage: Options.Model is required")
	}
	h := &Handler{opts: opts, mux: http.NewServeMux(), log: opts.Logger}
	if h.log == nil {
		h.log = log.New(io.Discard, "", 0)
	}
	h.mux.HandleFunc("GET /manage/status", h.status)
	h.mux.HandleFunc("GET /manage/fit", h.fit)
	h.mux.HandleFunc("GET /manage/download", h.download)
	h.mux.HandleFunc("POST /manage/download/{action}", h.downloadAction)
	h.mux.HandleFunc("POST /manage/model/load", h.load)
	h.mux.HandleFunc("POST /manage/doctor", h.doctor)
	h.mux.HandleFunc("GET /manage/settings", h.getSettings)
	h.mux.HandleFunc("PUT /manage/settings", h.putSettings)
	h.mux.HandleFunc("GET /manage/prefix-cache", h.prefixCache)
	h.mux.HandleFunc("POST /manage/prefix-cache/clear", h.clearPrefixCache)
	h.mux.HandleFunc("/manage/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no management route "+strconv.Quote(r.URL.Path))
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross_origin", "management requests from another origin are refused")
	}))
	h.h = cop.Handler(http.HandlerFunc(h.gate))
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.h.ServeHTTP(w, r)
}

// gate admits a request: from this machine or with the API key, the key
// when one is set, JSON bodies only.
func (h *Handler) gate(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	keyOK := h.opts.APIKey != "" && httpgate.KeyMatches(r, h.opts.APIKey)
	if h.opts.APIKey != "" && !keyOK {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or wrong API key: send it as \"Authorization: Bearer KEY\"")
		return
	}
	if !keyOK && !httpgate.FromLoopback(r) {
		writeError(w, http.StatusForbidden, "not_local", "management requests from another machine need the server's API key")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "the request body must be JSON, sent with \"Content-Type: application/json\"")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	httpgate.WriteJSON(w, http.StatusOK, h.statusNow())
}

func (h *Handler) statusNow() Status {
	return Status{
		Model:          h.opts.Model(),
		Endpoint:       h.opts.Endpoint,
		APIKeyRequired: h.opts.APIKey != "",
		Downloads:      h.opts.Downloader != nil,
		Fit:            h.opts.Fit != nil,
		Load:           h.opts.Load != nil,
		Doctor:         h.opts.Doctor != nil,
	}
}

func (h *Handler) fit(w http.ResponseWriter, r *http.Request) {
	if h.opts.Fit == nil {
		notAvailable(w, "the memory-fit check")
		return
	}
	n := 0
	if q := r.URL.Query().Get("context"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil || v < 0 {
			writeError(w, http.StatusBadRequest, "bad_context", fmt.Sprintf("context must be a number of tokens from 0 (the default) to %d, not %q", MaxContextLength, q))
			return
		}
		if v > MaxContextLength {
			writeError(w, http.StatusBadRequest, "bad_context", fmt.Sprintf("context %d is over the model's %d positions: ask for %d tokens at most", v, MaxContextLength, MaxContextLength))
			return
		}
		n = v
	}
	rep, err := h.opts.Fit(n)
	if err != nil {
		h.log.Printf("manage: fit at context %d: %v", n, err)
		writeError(w, http.StatusInternalServerError, "fit_failed", "the memory check failed; the server log says why")
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, rep)
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	if h.opts.Downloader == nil {
		notAvailable(w, "downloading")
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, h.opts.Downloader.Status())
}

func (h *Handler) downloadAction(w http.ResponseWriter, r *http.Request) {
	if h.opts.Downloader == nil {
		notAvailable(w, "downloading")
		return
	}
	a := Action(r.PathValue("action"))
	if !actions[a] {
		writeError(w, http.StatusNotFound, "not_found", "no download action "+strconv.Quote(string(a)))
		return
	}
	var empty struct{}
	if !decode(w, r, &empty) {
		return
	}
	if a == Delete {
		if m, d := h.opts.Model(), h.opts.Downloader.Status(); m.Dir != "" && m.Dir == d.Dir {
			writeError(w, http.StatusConflict, "model_in_use", "the downloaded model is the one being served: it cannot be deleted while Petal runs it")
			return
		}
	}
	if err := h.opts.Downloader.Do(r.Context(), a); err != nil {
		writeError(w, http.StatusConflict, "download_"+string(a)+"_refused", err.Error())
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, h.opts.Downloader.Status())
}

func (h *Handler) load(w http.ResponseWriter, r *http.Request) {
	if h.opts.Load == nil {
		notAvailable(w, "loading another model")
		return
	}
	var empty struct{}
	if !decode(w, r, &empty) {
		return
	}
	if err := h.opts.Load(r.Context()); err != nil {
		h.log.Printf("manage: load: %v", err)
		code, msg := "load_failed", err.Error()
		for _, c := range loadCodes {
			if errors.Is(err, c.err) {
				code = c.code
				break
			}
		}
		if code == CodeDamaged {
			msg = damagedMessage
		}
		writeError(w, http.StatusConflict, code, msg)
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, h.statusNow())
}

func (h *Handler) doctor(w http.ResponseWriter, r *http.Request) {
	if h.opts.Doctor == nil {
		notAvailable(w, "checking this machine")
		return
	}
	var empty struct{}
	if !decode(w, r, &empty) {
		return
	}
	rep, err := h.opts.Doctor(r.Context())
	if errors.Is(err, ErrDoctorBusy) {
		writeError(w, http.StatusConflict, "doctor_busy", err.Error())
		return
	}
	if err != nil {
		h.log.Printf("manage: doctor: %v", err)
		writeError(w, http.StatusInternalServerError, "doctor_failed", "the check could not run; the server log says why")
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, rep)
}

// settingsReply is the answer of both settings routes: the saved
// settings, the server settings in force with their sources, the saved
// ones that wait for a restart and those a command-line flag overrides.
type settingsReply struct {
	Settings         Settings           `json:"settings"`
	InForce          map[string]InForce `json:"in_force"`
	RestartRequired  []string           `json:"restart_required"`
	OverriddenByFlag []string           `json:"overridden_by_flag"`
}

func (h *Handler) settingsReply() settingsReply {
	st := h.opts.Settings
	inForce, restart, pinned := st.state(h.opts.Running)
	return settingsReply{Settings: st.Get(), InForce: inForce, RestartRequired: restart, OverriddenByFlag: pinned}
}

func (h *Handler) getSettings(w http.ResponseWriter, r *http.Request) {
	if h.opts.Settings == nil {
		notAvailable(w, "keeping settings")
		return
	}
	httpgate.WriteJSON(w, http.StatusOK, h.settingsReply())
}

func (h *Handler) putSettings(w http.ResponseWriter, r *http.Request) {
	if h.opts.Settings == nil {
		notAvailable(w, "keeping settings")
		return
	}
	// A Settings screen that does not edit the disk tier's budget leaves
	// it out: absent is auto, as in the file, where 0 would turn it off.
	s := Settings{PrefixCacheGB: AutoPrefixCacheGB}
	if !decode(w, r, &s) {
		return
	}
	if err := h.opts.Settings.Set(s); err != nil {
		if errors.Is(err, ErrBadSettings) {
			writeError(w, http.StatusBadRequest, "bad_settings", strings.TrimPrefix(err.Error(), ErrBadSettings.Error()+": "))
			return
		}
		h.log.Printf("manage: saving settings: %v", err)
		writeError(w, http.StatusInternalServerError, "settings_not_saved", "the settings could not be saved; the server log says why")
		return
	}
	if h.opts.OnSettings != nil {
		h.opts.OnSettings(h.opts.Settings.Get())
	}
	httpgate.WriteJSON(w, http.StatusOK, h.settingsReply())
}

// decode reads one JSON value strictly: unknown fields and trailing data
// are errors here, unlike on /v1, because only our own UI calls these routes.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON value")
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is over %d bytes", MaxBodyBytes))
			return false
		}
		writeError(w, http.StatusBadRequest, "bad_json", "the body is not the JSON this route takes: "+err.Error())
		return false
	}
	return true
}

func notAvailable(w http.ResponseWriter, what string) {
	writeError(w, http.StatusNotFound, "not_available", "this server is not set up for "+what)
}

type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Message, b.Error.Code = message, code
	b.Error.Type = "invalid_request_error"
	if status >= http.StatusInternalServerError {
		b.Error.Type = "server_error"
	}
	httpgate.WriteJSON(w, status, b)
}
