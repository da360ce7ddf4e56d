package manage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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
}

// DefaultPort is the port petal listens on unless told otherwise.
const DefaultPort = 8080

// DefaultSettings are the settings of a fresh install.
func DefaultSettings() Settings {
	return Settings{Thinking: true, Preset: "thinking", Port: DefaultPort, AllowedOrigins: []string{}}
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
	}
	for _, o := range s.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			return bad("allowed origin %q is not an origin like http://localhost:3000", o)
		}
	}
	return nil
}

// restartFields lists the settings that a running server has already
// applied, by their JSON names.
func restartFields(running, saved Settings) []string {
	out := []string{}
	if running.ContextLength != saved.ContextLength {
		out = append(out, "context_length")
	}
	if running.Port != saved.Port {
		out = append(out, "port")
	}
	if running.Expose != saved.Expose || running.AccessToken != saved.AccessToken {
		out = append(out, "expose")
	}
	if running.APIKey != saved.APIKey {
		out = append(out, "api_key")
	}
	if !slices.Equal(running.AllowedOrigins, saved.AllowedOrigins) {
		out = append(out, "allowed_origins")
	}
	return out
}

// SettingsStore keeps Settings in a JSON file. It is safe for concurrent use.
type SettingsStore struct {
	path string
	mu   sync.Mutex
	cur  Settings
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
	st := &SettingsStore{path: path, cur: DefaultSettings()}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	s := DefaultSettings()
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSettings, path, err)
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
