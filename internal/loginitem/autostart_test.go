//go:build !darwin

package loginitem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAutostartEntryWrittenAndRemoved(t *testing.T) {
	cfg := t.TempDir()
	e, err := autostartEntry("linux", cfg, `/opt/Pe "tal" & $co/petal`)
	if err != nil {
		t.Fatal(err)
	}
	if e.path != filepath.Join(cfg, "autostart", "petal.desktop") {
		t.Errorf("desktop entry at %s", e.path)
	}
	if err := e.apply(true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(e.path)
	if err != nil {
		t.Fatal(err)
	}
	// The Exec key's quoting rules of the Desktop Entry Specification.
	if !strings.Contains(string(b), "Exec=\"/opt/Pe \\\"tal\\\" & \\$co/petal\"\n") {
		t.Errorf("entry:\n%s", b)
	}
	if err := e.apply(false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.path); !errors.Is(err, os.ErrNotExist) {
		t.Error("the entry is still there after turning it off")
	}
	if err := e.apply(false); err != nil {
		t.Errorf("turning off twice: %v", err)
	}
	if _, err := autostartEntry("plan9", cfg, "/petal"); err == nil {
		t.Error("plan9 accepted")
	}
	if _, err := autostartEntry("linux", cfg, "/pe\ntal"); err == nil {
		t.Error("a path with a line break accepted")
	}
}
