package manage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Limits of the settings.
const (
	// MaxContextLength is the longest context the model supports
	// (max_position_embeddings of Qwen3.6).
	MaxContextLength = 262144
	// MinTokenChars is the shortest access token or API key accepted: a
	// key a network neighbour could guess protects nothing.
	MinTokenChars = 16
	// MaxTokenChars bounds a key.
	MaxTokenChars = 256
	// MaxOrigins bounds the allowed origins.
	MaxOrigins = 64
	// maxPort is the highest TCP port.
	maxPort = math.MaxUint16
	// settingsFileMode keeps the file, which holds keys, private.
	settingsFileMode = 0o600
	// MaxPrefixCacheGB bounds prefix_cache_gb (and petal serve's
	// --prefix-cache-gb), far past any disk, so that a typo cannot
	// overflow the byte count.
	MaxPrefixCacheGB = 1e6
	// AutoPrefixCacheGB is prefix_cache_gb's default: 10% of the free
	// disk, at most 20 GB (prefixdisk.DefaultBudget).
	AutoPrefixCacheGB = -1
	// AutoParallel is parallel's default: as many requests as the memory
	// fit leaves room for (runtime.Load decides).
	AutoParallel = 0
	// MaxParallel bounds parallel (and petal serve's --parallel): the
	// service's own limit, service.MaxParallel, which this package does
	// not import.
	MaxParallel = 8
)

// Sampling presets of the model card (MODEL.md); the UI holds their values.
var presets = []string{"thinking", "coding", "instruct"}

// ErrBadSettings marks settings that fail validation.
var ErrBadSettings = errors.New("manage: bad settings")

// Settings are what the Settings screen edits. Those about the server
// (port, expose, keys, origins, context) take effect at the next start.
type Settings struct {
	// ContextLength in tokens; 0 means the model's own.
	ContextLength int `json:"context_length"`
	// Thinking is the chat window's default for thinking before answering.
	Thinking bool `json:"thinking"`
	// Preset names the model card's sampling preset the chat window uses.
	Preset string `json:"preset"`
	Port   int    `json:"port"`
	// Expose makes the server listen on every interface; other machines
	// then need AccessToken as their Bearer key.
	Expose         bool     `json:"expose"`
	AccessToken    string   `json:"access_token"`
	APIKey         string   `json:"api_key"`
	AllowedOrigins []string `json:"allowed_origins"`
	StartAtLogin   bool     `json:"start_at_login"`
	// PrefixCacheDir is the folder of the prefix cache's snapshots on
	// disk; "" means petal/prefix in the user's cache folder.
	PrefixCacheDir string `json:"prefix_cache_dir"`
	// PrefixCacheGB is the disk those snapshots may take, in GB:
	// AutoPrefixCacheGB (also when the file has none) for the default
	// budget, 0 to turn the disk tier off.
	PrefixCacheGB float64 `json:"prefix_cache_gb"`
	// Parallel is how many requests decode together: AutoParallel (also
	// when the file has none) for what the memory fit leaves room for, 1
	// for one at a time, at most MaxParallel.
	Parallel int `json:"parallel"`
	// Speculative says whether replies draft with the model's MTP head:
	// "auto" (also "" or absent) while it pays, "off" or "on".
	Speculative string `json:"speculative"`
}

// speculativeModes are the values of Settings.Speculative ("" is auto).
var speculativeModes = []string{"", "auto", "off", "on"}

// SpeculativeMode is s, a valid Settings.Speculative, with "" as "auto".
func SpeculativeMode(s string) string {
	if s == "" {
		return "auto"
	}
	return s
}

// DefaultPort is the port petal listens on unless told otherwise.
const DefaultPort = 8080

// DefaultSettings are the settings of a fresh install.
func DefaultSettings() Settings {
	return Settings{Thinking: true, Preset: "thinking", Port: DefaultPort, AllowedOrigins: []string{}, PrefixCacheGB: AutoPrefixCacheGB}
}

// Validate reports the first thing wrong with s, wrapped in ErrBadSettings.
func (s Settings) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSettings, fmt.Sprintf(format, a...))
	}
	switch {
	case s.ContextLength < 0 || s.ContextLength > MaxContextLength:
		return bad("context_length must be 0 (the model's) to %d, not %d", MaxContextLength, s.ContextLength)
	case !slices.Contains(presets, s.Preset):
		return bad("preset must be one of %v, not %q", presets, s.Preset)
	case s.Port < 1 || s.Port > maxPort:
		return bad("port must be 1 to %d, not %d", maxPort, s.Port)
	case s.Expose && len(s.AccessToken) < MinTokenChars:
		return bad("exposing the server to the network needs an API key of at least %d characters", MinTokenChars)
	case len(s.AccessToken) > MaxTokenChars || len(s.APIKey) > MaxTokenChars:
		return bad("keys are at most %d characters", MaxTokenChars)
	case s.APIKey != "" && len(s.APIKey) < MinTokenChars:
		return bad("an API key needs at least %d characters", MinTokenChars)
	case len(s.AllowedOrigins) > MaxOrigins:
		return bad("at most %d allowed origins", MaxOrigins)
	case s.PrefixCacheDir != "" && !filepath.IsAbs(s.PrefixCacheDir):
		// Relative to what: the server's working folder changes with how
		// it is started, so the snapshots would scatter.
		return bad("prefix_cache_dir must be an absolute path (or empty for the default folder), not %q", s.PrefixCacheDir)
	case s.PrefixCacheGB != AutoPrefixCacheGB && !(s.PrefixCacheGB >= 0 && s.PrefixCacheGB <= MaxPrefixCacheGB):
		return bad("prefix_cache_gb must be %d (auto), 0 (off) or up to %g GB, not %g", AutoPrefixCacheGB, float64(MaxPrefixCacheGB), s.PrefixCacheGB)
	case s.Parallel < AutoParallel || s.Parallel > MaxParallel:
		return bad("parallel must be %d (auto) or 1 to %d requests, not %d", AutoParallel, MaxParallel, s.Parallel)
	case !slices.Contains(speculativeModes, s.Speculative):
		return bad("speculative must be auto, off or on, not %q", s.Speculative)
	}
	if err := CheckKey(s.APIKey); err != nil {
		return bad("api_key: %v", err)
	}
	if err := CheckKey(s.AccessToken); err != nil {
		return bad("access_token: %v", err)
	}
	for _, o := range s.AllowedOrigins {
		if err := CheckOrigin(o); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// CheckKey refuses a key no client could send: clients send it in an HTTP
// header ("Authorization: Bearer KEY" or X-Api-Key), where a line break
// would end the header (and a key saved with one locks every client out),
// a space or tab is trimmed away, and browsers refuse anything outside
// ASCII. So a key is printable ASCII, without spaces.
func CheckKey(key string) error {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < firstKeyChar || c > lastKeyChar {
			return fmt.Errorf("character %d (%q) cannot be sent in an HTTP header: a key is letters, digits and printable ASCII punctuation, without spaces", i+1, rune(c))
		}
	}
	return nil
}

// The characters a key may hold: printable ASCII without the space
// (RFC 9110's VCHAR).
const (
	firstKeyChar = '!'
	lastKeyChar  = '~'
)

// CheckOrigin refuses what is not one browser origin: a scheme (http or
// https), a host name or address and an optional port, nothing else.
// Browsers send an origin as it is and the server compares it whole, so a
// pattern such as "http://*" would match no page while reading as if it
// allowed every one.
func CheckOrigin(o string) error {
	bad := fmt.Errorf("allowed origin %q is not an origin like http://localhost:3000 (one scheme, host and port, no wildcard, path or slash at the end)", o)
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawPath != "" ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return bad
	}
	host := u.Hostname()
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > maxPort {
			return bad
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return bad
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if strings.HasPrefix(u.Host, "[") || !hostName(host) {
		return bad
	}
	return nil
}

// hostName reports whether h is a DNS name: dot-separated labels of
// letters, digits and inner hyphens (RFC 1123).
func hostName(h string) bool {
	if h == "" || len(h) > maxHostChars {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > maxLabelChars || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Lengths of DNS names (RFC 1035).
const (
	maxHostChars  = 253
	maxLabelChars = 63
)

// restartFields lists the server settings, by their JSON names, whose
// saved value differs from the one running: they apply at the next start.
func restartFields(running, saved Settings) []string {
	out := []string{}
	if running.ContextLength != saved.ContextLength {
		out = append(out, FieldContextLength)
	}
	if running.Port != saved.Port {
		out = append(out, FieldPort)
	}
	if running.Expose != saved.Expose {
		out = append(out, FieldExpose)
	}
	if oneKey(running) != oneKey(saved) {
		out = append(out, FieldAPIKey)
	}
	if !slices.Equal(running.AllowedOrigins, saved.AllowedOrigins) {
		out = append(out, FieldAllowedOrigins)
	}
	if running.PrefixCacheDir != saved.PrefixCacheDir {
		out = append(out, FieldPrefixCacheDir)
	}
	if running.PrefixCacheGB != saved.PrefixCacheGB {
		out = append(out, FieldPrefixCacheGB)
	}
	if running.Parallel != saved.Parallel {
		out = append(out, FieldParallel)
	}
	if SpeculativeMode(running.Speculative) != SpeculativeMode(saved.Speculative) {
		out = append(out, FieldSpeculative)
	}
	return out
}

// oneKey is the key every caller of a server started from s must send:
// its API key, else, when exposed, its access token ("" for none).
func oneKey(s Settings) string {
	if s.APIKey == "" && s.Expose {
		return s.AccessToken
	}
	return s.APIKey
}

// SettingsStore keeps Settings in a JSON file. It is safe for concurrent use.
type SettingsStore struct {
	path string
	mu   sync.Mutex
	cur  Settings
	// inFile holds the JSON names the file had when opened: a setting in
	// force that came from neither a flag nor the file is the default.
	inFile map[string]bool
	// applied is what a server applied at start ([SettingsStore.Apply]).
	applied *Applied
}

// DefaultSettingsPath is settings.json in petal's folder of the user's
// configuration directory.
func DefaultSettingsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "petal", "settings.json"), nil
}

// OpenSettings reads the settings at path; a missing file gives the
// defaults. A file that is not valid settings is an error, not silently
// replaced, since it holds the user's keys.
func OpenSettings(path string) (*SettingsStore, error) {
	st := &SettingsStore{path: path, cur: DefaultSettings(), inFile: map[string]bool{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	s := DefaultSettings()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSettings, path, err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSettings, path, err)
	}
	for name := range fields {
		st.inFile[name] = true
	}
	if s.AllowedOrigins == nil {
		s.AllowedOrigins = []string{}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st.cur = s
	return st, nil
}

// Path is the settings file.
func (st *SettingsStore) Path() string { return st.path }

// Get returns the current settings.
func (st *SettingsStore) Get() Settings {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.cur
	s.AllowedOrigins = slices.Clone(s.AllowedOrigins)
	return s
}

// Set validates s and writes it: to a temporary file first, renamed over
// the old one, so a crash never leaves half a file.
func (st *SettingsStore) Set(s Settings) error {
	if s.AllowedOrigins == nil {
		s.AllowedOrigins = []string{}
	}
	if err := s.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(st.path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(st.path), ".settings-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := tmp.Chmod(settingsFileMode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), st.path); err != nil {
		return err
	}
	st.cur = s
	st.cur.AllowedOrigins = slices.Clone(s.AllowedOrigins)
	return nil
}
