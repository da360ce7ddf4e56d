package cli

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"petal/internal/hub"
)

// testHome is the folder TestMain puts the user's config and cache
// folders in.
var testHome string

// TestMain keeps the user's own files out of the tests: petal serve
// applies the settings file in the user's config folder, and
// $PETAL_API_KEY, when no flag says otherwise; the Model screen keeps its
// CPU measurement (petal/cpu-speed.json), serve its prefix cache on disk
// and the demo model its unpacked copy in the user's cache folder; pull
// looks into the Hugging Face cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "petal-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testHome = dir
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	os.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	os.Setenv(hub.EnvHome, filepath.Join(dir, "huggingface"))
	if goruntime.GOOS == "darwin" { // its config and cache folders are under $HOME
		os.Setenv("HOME", dir)
	}
	os.Unsetenv(envAPIKey)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestUserFoldersAreTheTests': the tests wrote the Model screen's CPU
// measurement into the user's ~/.cache/petal/cpu-speed.json, as the cache
// folder was the user's.
func TestUserFoldersAreTheTests(t *testing.T) {
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.UserConfigDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{cache, config, os.Getenv(hub.EnvHome)} {
		if !strings.HasPrefix(d, testHome+string(filepath.Separator)) {
			t.Errorf("%s is outside the tests' folder %s", d, testHome)
		}
	}
}
