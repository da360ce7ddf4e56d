package models

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
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
	// demoFileMode is an unpacked demo file's: anyone may read it.
	demoFileMode = 0o644
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

// demoSums are the SHA-256 sums of the embedded demo's files, by name,
// which its unpacked copy is checked against.
var demoSums = sync.OnceValues(func() (map[string][sha256.Size]byte, error) {
	sums := map[string][sha256.Size]byte{}
	for _, name := range demo.Names {
		data, err := demo.Files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("models: demo model built without %s: %w", name, err)
		}
		sums[name] = sha256.Sum256(data)
	}
	return sums, nil
})

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
// the user's cache folder first if this binary's demo is not there yet. A
// copy that is there is checked against the embedded files, and a damaged
// or missing file is unpacked again (with a line on the standard logger).
func DemoDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("models: no cache folder to unpack the demo model into: %w", err)
	}
	return unpackDemo(filepath.Join(cache, cacheSubdir))
}

// unpackDemo writes the demo model into parent/demo-<hash>, unless it is
// there already, in which case its files are checked and mended. Files go
// to a temporary folder that is renamed into place, so the final folder is
// either absent or complete, also when two processes unpack at once; a
// cache cleaner or a disk error can still damage it later.
func unpackDemo(parent string) (string, error) {
	sum, err := demoHash()
	if err != nil {
		return "", err
	}
	final := filepath.Join(parent, demoPrefix+sum)
	if info, err := os.Stat(final); err == nil && info.IsDir() {
		return final, mendDemo(final)
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
		if err := os.WriteFile(filepath.Join(tmp, name), data, demoFileMode); err != nil {
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

// mendDemo compares each file of the unpacked demo in dir with the
// embedded one by SHA-256 and writes again the ones that differ or are
// missing: the binary holds an intact copy, so a damaged cache never keeps
// petal from starting. Each file is replaced by a rename, so a process
// reading it sees the old or the new one whole.
func mendDemo(dir string) error {
	sums, err := demoSums()
	if err != nil {
		return err
	}
	for _, name := range demo.Names {
		path := filepath.Join(dir, name)
		got, err := fileSum(path)
		if err == nil && got == sums[name] {
			continue
		}
		what := "damaged"
		if errors.Is(err, fs.ErrNotExist) {
			what = "missing"
		}
		data, err := demo.Files.ReadFile(name)
		if err != nil {
			return fmt.Errorf("models: demo model built without %s: %w", name, err)
		}
		if err := replaceFile(path, data); err != nil {
			return fmt.Errorf("models: mending the demo model's %s in %s: %w", name, dir, err)
		}
		log.Printf("the demo model's %s in %s was %s: unpacked it again from this binary", name, dir, what)
	}
	return nil
}

// fileSum is the SHA-256 of the file at path.
func fileSum(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// replaceFile writes data to path through a temporary file beside it that
// is renamed over it.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(demoFileMode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
