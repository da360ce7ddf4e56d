package models

import (
	"bytes"
	"errors"
	"log"
	"os"
	"path/filepath"
	"petal/internal/hub"
	"strings"
	"testing"

	"petal/engine/cpu"
	"petal/models/demo"
)

// isolate points the models root and the user cache at fresh folders.
func isolate(t *testing.T) (root, cache string) {
	t.Helper()
	root, cache = t.TempDir(), t.TempDir()
	t.Setenv(EnvRoot, root)
	t.Setenv("XDG_CACHE_HOME", cache) // os.UserCacheDir on Linux and the BSDs
	t.Setenv("HOME", cache)           // and on macOS, below $HOME/Library/Caches
	return root, cache
}

func TestDefaultIsDemoWithoutRealModel(t *testing.T) {
	_, cache := isolate(t)
	dir, isDemo, err := DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	if !isDemo {
		t.Fatalf("DefaultModelDir() = %s, not the demo, with nothing installed", dir)
	}
	if !strings.HasPrefix(dir, cache) || !strings.HasPrefix(filepath.Base(dir), demoPrefix) {
		t.Errorf("demo unpacked to %s, want a %s* folder in the cache %s", dir, demoPrefix, cache)
	}
	for _, name := range demo.Names {
		want, _ := demo.Files.ReadFile(name)
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: unpacked copy differs from the embedded file (%v)", name, err)
		}
	}
	m, err := cpu.Open(dir)
	if err != nil {
		t.Fatalf("unpacked demo does not open: %v", err)
	}
	m.Close()

	// A second call reuses the folder and leaves no temporary folders.
	again, isDemo, err := DefaultModelDir()
	if err != nil || !isDemo || again != dir {
		t.Errorf("second call: %s, %v, %v; want %s, true, nil", again, isDemo, err, dir)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Errorf("cache holds %d entries, want only the demo folder", len(entries))
	}
}

func TestDefaultIsInstalledRealModel(t *testing.T) {
	root, _ := isolate(t)
	realDir := filepath.Join(root, RealModelName)
	if err := os.MkdirAll(realDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Any config Petal accepts will do to count as installed: the demo's.
	for _, name := range []string{"config.json", "model.safetensors"} {
		data, _ := demo.Files.ReadFile(name)
		if err := os.WriteFile(filepath.Join(realDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir, isDemo, err := DefaultModelDir()
	if err != nil || isDemo || dir != realDir {
		t.Errorf("DefaultModelDir() = %s, %v, %v; want %s, false, nil", dir, isDemo, err, realDir)
	}
}

func TestDamagedRealModelIsAnError(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"bad config": {"config.json": "{not json", "model.safetensors": "x"},
		"no weights": {"config.json": ""},
	} {
		t.Run(name, func(t *testing.T) {
			root, _ := isolate(t)
			realDir := filepath.Join(root, RealModelName)
			if err := os.MkdirAll(realDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for f, content := range files {
				data := []byte(content)
				if content == "" {
					data, _ = demo.Files.ReadFile(f)
				}
				if err := os.WriteFile(filepath.Join(realDir, f), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir, isDemo, err := DefaultModelDir()
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), realDir) {
				t.Errorf("DefaultModelDir() = %s, %v, %v; want an ErrDamaged error naming %s", dir, isDemo, err, realDir)
			}
		})
	}
}

// The real model is looked for exactly where petal pull puts it.
func TestRealModelIsWherePullPutsIt(t *testing.T) {
	for _, env := range []string{"", t.TempDir()} {
		t.Setenv(EnvRoot, env)
		if got, want := filepath.Join(Root(), RealModelName), hub.DefaultDir(hub.DefaultRepo); got != want {
			t.Errorf("PETAL_MODELS=%q: real model looked for in %s, pulled into %s", env, got, want)
		}
	}
}

func TestUnpackKeepsExistingFolder(t *testing.T) {
	parent := t.TempDir()
	dir, err := unpackDemo(parent)
	if err != nil {
		t.Fatal(err)
	}
	// A folder that is there is kept (it only appears by rename); only
	// the model's own files are checked (TestDamagedDemoIsMended).
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := unpackDemo(parent)
	if err != nil || again != dir {
		t.Fatalf("unpackDemo again = %s, %v; want %s", again, err, dir)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Error("second unpack rewrote the folder")
	}
}

// TestDisplayNameOfTheDemo checks that the demo is called the demo model
// both unpacked in the cache (demo-<hash>) and as the repository's folder,
// and that another model, even one in a folder called demo, keeps its id.
func TestDisplayNameOfTheDemo(t *testing.T) {
	isolate(t)
	dir, _, err := DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Base(dir)
	if got := DisplayName(dir, id); got != DemoDisplayName {
		t.Errorf("DisplayName(%s) = %q, want %q", id, got, DemoDisplayName)
	}
	if got := DisplayName(filepath.Join("..", "..", "models", "demo"), "demo"); got != DemoDisplayName {
		t.Errorf("the repository's models/demo is called %q", got)
	}
	other := filepath.Join(t.TempDir(), "demo")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := demo.Files.ReadFile("config.json")
	if err := os.WriteFile(filepath.Join(other, "config.json"), append(bytes.TrimSpace(cfg), ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := DisplayName(other, "demo"); got != "demo" {
		t.Errorf("a folder called demo with another config is called %q", got)
	}
	if got := DisplayName(filepath.Join(t.TempDir(), "missing"), "Qwen3.6-35B-A3B-4bit"); got != "Qwen3.6-35B-A3B-4bit" {
		t.Errorf("a real model is called %q", got)
	}
}

// TestDamagedDemoIsMended: a damaged config.json in the demo's unpacked
// copy stopped petal serve ("bad model files: not valid JSON") although
// the binary holds an intact copy (issue 28 A.7). Each file is checked
// against the embedded one at start; a damaged or missing one is unpacked
// again, with a line in the log, and the model opens.
func TestDamagedDemoIsMended(t *testing.T) {
	isolate(t)
	dir, err := DemoDir()
	if err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "model.safetensors")
	damaged, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	damaged[len(damaged)/2] ^= 1 // one bit, the size unchanged
	for name, data := range map[string][]byte{"config.json": []byte("{not json"), "model.safetensors": damaged} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })

	again, isDemo, err := DefaultModelDir()
	if err != nil || !isDemo || again != dir {
		t.Fatalf("DefaultModelDir() = %s, %v, %v; want %s, true, nil", again, isDemo, err, dir)
	}
	for _, name := range demo.Names {
		want, _ := demo.Files.ReadFile(name)
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: not mended (%v)", name, err)
		}
	}
	for _, want := range []string{"config.json in " + dir + " was damaged", "model.safetensors in " + dir + " was damaged", "tokenizer.json in " + dir + " was missing"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the log %q does not say %q", logged.String(), want)
		}
	}
	if n := strings.Count(logged.String(), "\n"); n != 3 {
		t.Errorf("%d lines logged, want one a mended file:\n%s", n, logged.String())
	}
	m, err := cpu.Open(dir)
	if err != nil {
		t.Fatalf("the mended demo does not open: %v", err)
	}
	m.Close()

	// An intact copy is left as it is, and nothing is logged.
	logged.Reset()
	if _, err := DemoDir(); err != nil || logged.Len() != 0 {
		t.Errorf("intact copy: %v, logged %q", err, logged.String())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(demo.Names) {
		t.Errorf("the folder holds %d entries after mending, want the model's %d files", len(entries), len(demo.Names))
	}
}
