package cli

import (
	"fmt"
	"os"
	goruntime "runtime"
	"testing"
)

// TestMain keeps the user's own settings out of the tests: petal serve
// applies the settings file in the user's config folder, and
// $PETAL_API_KEY, when no flag says otherwise.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "petal-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	if goruntime.GOOS == "darwin" { // its config folder is under $HOME
		os.Setenv("HOME", dir)
	}
	os.Unsetenv(envAPIKey)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
