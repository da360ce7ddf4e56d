package models

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"petal/engine/checkpoint"
	"petal/engine/damaged"
	"petal/internal/hub"
	"petal/models/demo"
)

const (
	// RealModelName is the folder of the real model under [Root].
	RealModelName = "Qwen3.6-35B-A3B-4bit"

	// EnvRoot is the environment variable that overrides [Root].
	EnvRoot = hub.EnvModels
	// demoPrefix starts the name of an unpacked demo folder in the cache;
	// demoHashLen hex digits of the contents' hash follow.
	demoPrefix  = "demo-"
	demoHashLen = 16
	// cacheSubdir is Petal's folder inside the user's cache folder.
	cacheSubdir = "petal"
)

// ErrDamaged marks an installed model folder that cannot be used as it is;
// it is also [damaged.Err].
var ErrDamaged = damaged.New("models: installed model is damaged")

// Root is the folder that holds installed models.
func Root() string { return hub.ModelsRoot() }

// DefaultModelDir is the folder of the model to run when none is named:
// the installed real model, else the unpacked demo model (isDemo true).
// A real model folder that exists but does not hold a usable config gives
// an error marked [ErrDamaged] rather than a silent switch to the demo.
func DefaultModelDir() (dir string, isDemo bool, err error) {
	realDir := filepath.Join(Root(), RealModelName)
	ok, err := installed(realDir)
	if err != nil {
		return "", false, err
	}
	if ok {
		return realDir, false, nil
	}
	dir, err = DemoDir()
	return dir, true, err
}

// DemoDisplayName is what people are shown for the demo model, whose id
// (the folder's name, demo- and a hash in the cache) says nothing to them.
const DemoDisplayName = "Demo model"

// DisplayName is the name to show for the model in dir served as id: the
// demo model, wherever its folder lies, is DemoDisplayName; any other is
// called by its id.
func DisplayName(dir, id string) string {
	if isDemo(dir) {
		return DemoDisplayName
	}
	return id
}

// isDemo reports whether dir holds the demo model: its config.json is the
// embedded demo's, byte for byte.
func isDemo(dir string) bool {
	got, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return false
	}
	want, err := demo.Files.ReadFile("config.json")
	return err == nil && bytes.Equal(got, want)
}

// installed reports whether dir holds a model: a config.json Petal accepts
// and weights. A folder without config.json is not installed.
func installed(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if _, err := checkpoint.ReadConfig(dir); err != nil {
		return false, fmt.Errorf("%w: %s: %w (remove the folder or download it again)", ErrDamaged, dir, err)
	}
	for _, weights := range []string{"model.safetensors.index.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, weights)); err == nil {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: %s has config.json but no weights (remove the folder or download it again)", ErrDamaged, dir)
}

var demoHash = sync.OnceValues(func() (string, error) {
	h := sha256.New()
	for _, name := range demo.Names {
		data, err := demo.Files.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("models: demo model built without %s: %w", name, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:demoHashLen], nil
})

// DemoDir returns the folder of the unpacked demo model, unpacking it into
// the user's cache folder first if this binary's demo is not there yet.
func DemoDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("models: no cache folder to unpack the demo model into: %w", err)
	}
	return unpackDemo(filepath.Join(cache, cacheSubdir))
}

// unpackDemo writes the demo model into parent/demo-<hash>, unless it is
// there already. Files go to a temporary folder that is renamed into place,
// so the final folder is either absent or complete, also when two
// processes unpack at once.
func unpackDemo(parent string) (string, error) {
	sum, err := demoHash()
	if err != nil {
		return "", err
	}
	final := filepath.Join(parent, demoPrefix+sum)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("models: unpacking the demo model: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+demoPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("models: unpacking the demo model: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up after a failure
	for _, name := range demo.Names {
		data, err := demo.Files.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("models: demo model built without %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return "", fmt.Errorf("models: unpacking the demo model: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process may have put a complete copy there first.
		if _, statErr := os.Stat(filepath.Join(final, "config.json")); statErr == nil {
			return final, nil
		}
		return "", fmt.Errorf("models: unpacking the demo model: %w", err)
	}
	return final, nil
}
