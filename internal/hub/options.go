package hub

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/adrg/xdg"
)

// The model Petal ships for, at the revision it is tested with.
const (
	DefaultRepo     = "mlx-community/Qwen3.6-35B-A3B-4bit"
	DefaultRevision = "38740b847e4cb78f352aba30aa41c76e08e6eb46"
	DefaultEndpoint = "https://huggingface.co"
)

// Environment variables a pull honours, as the Hugging Face tools do.
const (
	EnvEndpoint = "HF_ENDPOINT"
	EnvToken    = "HF_TOKEN"
	EnvHome     = "HF_HOME"
	EnvHubCache = "HF_HUB_CACHE"
	// EnvModels overrides the folder models are stored under.
	EnvModels = "PETAL_MODELS"
)

// Defaults of [Options].
const (
	DefaultParallel     = 4
	DefaultChunkBytes   = 64 << 20
	DefaultStallTimeout = 30 * time.Second
	DefaultMaxRetries   = 10
	DefaultRetryBase    = time.Second
	// maxRetryWait caps the exponential backoff.
	maxRetryWait = time.Minute
	// MaxParallel bounds the connections of one pull.
	MaxParallel = 32
	// MinChunkBytes keeps the state file and the request count small.
	MinChunkBytes = 1 << 10
	// DiskMargin is left free beyond the files, for the file system's own
	// needs and everything else on the disk.
	DiskMargin = 1 << 30
	// progressInterval is how often progress is reported and the resume
	// state saved.
	progressInterval = 500 * time.Millisecond
	// speedWindow is how far back the speed is averaged.
	speedWindow = 5 * time.Second
)

// Errors of a pull.
var (
	ErrInput      = errors.New("hub: bad request")
	ErrBadListing = errors.New("hub: the Hub's file list cannot be trusted")
	ErrNotFound   = errors.New("hub: not found")
	ErrAuth       = errors.New("hub: access denied")
	ErrChecksum   = errors.New("hub: downloaded file does not match its hash")
	ErrNoSpace    = errors.New("hub: not enough free disk space")
	ErrExists     = errors.New("hub: the model folder exists and holds something else")
	ErrBusy       = errors.New("hub: another pull is writing this model")
	ErrStalled    = errors.New("hub: the download stalled")
	ErrPaused     = errors.New("hub: download paused")
	ErrCanceled   = errors.New("hub: download canceled")
)

// Options configure a pull. The zero value pulls [DefaultRepo] at
// [DefaultRevision] into [DefaultDir].
type Options struct {
	Endpoint string // default: $HF_ENDPOINT, else DefaultEndpoint
	Token    string // default: $HF_TOKEN; sent only to the endpoint's host
	Repo     string
	Revision string
	// Dir is the model folder; default DefaultDir(Repo).
	Dir string
	// HFCache is the Hugging Face hub cache to import from; default from
	// HF_HUB_CACHE, HF_HOME or ~/.cache/huggingface/hub. NoHFCache skips it.
	HFCache   string
	NoHFCache bool

	Parallel     int
	ChunkBytes   int64
	StallTimeout time.Duration
	MaxRetries   int
	RetryBase    time.Duration
	// QuickOffline gives up on a listing that does not reach the Hub at
	// all (its name not found, no route, refused) after one unreported
	// retry, RetryBase later, instead of MaxRetries reported ones: a
	// person at a terminal hears at once and runs the command again. A
	// timeout, an error answer and every failure once the listing is in
	// keep their retries.
	QuickOffline bool

	// MTP is where the model's multi-token-prediction head comes from,
	// fetched by range requests after the main files (see
	// [TensorFilter]); nil takes the pinned default for Repo, if any
	// ([MTPNotice] says when a missing manifest leaves it out). NoMTP
	// skips it.
	MTP   *TensorSource
	NoMTP bool

	// Progress receives events from one goroutine at a time.
	Progress func(Event)
	// Transport carries the requests; default http.DefaultTransport.
	Transport http.RoundTripper
	// FreeSpace reports the bytes free for a folder; default: the file
	// system's count.
	FreeSpace func(dir string) (int64, error)

	// beforeWrite, when set, is called before each write into a part file;
	// its error fails the write (tests inject a full disk with it).
	beforeWrite func(n int) error
}

// ModelsRoot is where models live: $PETAL_MODELS, else
// $XDG_DATA_HOME/petal/models (on a Mac ~/Library/Application
// Support/petal/models).
func ModelsRoot() string {
	if d := os.Getenv(EnvModels); d != "" {
		return d
	}
	return filepath.Join(xdg.DataHome, "petal", "models")
}

// DefaultDir is the folder a repository is pulled into: its name under
// [ModelsRoot].
func DefaultDir(repo string) string {
	return filepath.Join(ModelsRoot(), path.Base(repo))
}

// withDefaults fills the zero fields and checks the rest.
func (o Options) withDefaults() (Options, error) {
	if o.Repo == "" {
		o.Repo = DefaultRepo
	}
	if o.Revision == "" {
		o.Revision = DefaultRevision
	}
	if err := checkRepo(o.Repo); err != nil {
		return o, err
	}
	if err := checkRevision(o.Revision); err != nil {
		return o, err
	}
	if o.Endpoint == "" {
		o.Endpoint = os.Getenv(EnvEndpoint)
	}
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	o.Endpoint = strings.TrimRight(o.Endpoint, "/")
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return o, fmt.Errorf("%w: endpoint %q is not an http(s) URL", ErrInput, o.Endpoint)
	}
	if o.Token == "" {
		o.Token = os.Getenv(EnvToken)
	}
	if o.Dir == "" {
		o.Dir = DefaultDir(o.Repo)
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return o, err
	}
	if o.HFCache == "" {
		o.HFCache = hfCacheDir()
	}
	if o.Parallel == 0 {
		o.Parallel = DefaultParallel
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.RetryBase == 0 {
		o.RetryBase = DefaultRetryBase
	}
	if o.Parallel < 1 || o.Parallel > MaxParallel || o.ChunkBytes < MinChunkBytes ||
		o.StallTimeout < 0 || o.MaxRetries < 0 || o.RetryBase < 0 {
		return o, fmt.Errorf("%w: parallel %d (1..%d), chunk %d bytes (at least %d), stall timeout %v, retries %d, backoff %v",
			ErrInput, o.Parallel, MaxParallel, o.ChunkBytes, MinChunkBytes, o.StallTimeout, o.MaxRetries, o.RetryBase)
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.FreeSpace == nil {
		o.FreeSpace = freeSpace
	}
	return o, nil
}

// hfCacheDir is the Hugging Face hub cache the way huggingface_hub finds it.
func hfCacheDir() string {
	if d := os.Getenv(EnvHubCache); d != "" {
		return d
	}
	if d := os.Getenv(EnvHome); d != "" {
		return filepath.Join(d, "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// client sends the token to the endpoint's host alone: it is added per
// request by the transport, so a redirect to another host never carries it.
func (o Options) client() *http.Client {
	u, _ := url.Parse(o.Endpoint)
	return &http.Client{Transport: &tokenTransport{base: o.Transport, host: u.Host, scheme: u.Scheme, token: o.Token}}
}

type tokenTransport struct {
	base                http.RoundTripper
	host, scheme, token string
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.token != "" && req.URL.Host == t.host && req.URL.Scheme == t.scheme {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(req)
}
