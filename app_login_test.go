package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoginItemWrittenAndRemoved(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, ".config")
	for _, goos := range []string{"darwin", "linux"} {
		li, err := loginItemFor(goos, home, cfg, `/Applications/Pe "tal" & co/petal`)
		if err != nil {
			t.Fatal(err)
		}
		if err := li.apply(true); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(li.path)
		if err != nil {
			t.Fatalf("%s: %v", goos, err)
		}
		switch goos {
		case "darwin":
			if li.path != filepath.Join(home, "Library/LaunchAgents/app.petal.plist") {
				t.Errorf("plist at %s", li.path)
			}
			// The plist is well-formed XML and names the program escaped.
			dec := xml.NewDecoder(strings.NewReader(string(b)))
			dec.Strict = true
			var program string
			for {
				tok, err := dec.Token()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("plist is not XML: %v", err)
				}
				if cd, ok := tok.(xml.CharData); ok && strings.HasSuffix(string(cd), "/petal") {
					program = string(cd)
				}
			}
			if program != `/Applications/Pe "tal" & co/petal` {
				t.Errorf("program %q", program)
			}
		case "linux":
			if li.path != filepath.Join(cfg, "autostart/petal.desktop") {
				t.Errorf("desktop entry at %s", li.path)
			}
			if !strings.Contains(string(b), "Exec=\"/Applications/Pe \\\"tal\\\" & co/petal\"\n") {
				t.Errorf("entry:\n%s", b)
			}
		}
		if err := li.apply(false); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(li.path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: login item still there after turning it off", goos)
		}
		if err := li.apply(false); err != nil {
			t.Errorf("turning off twice: %v", err)
		}
	}
	if _, err := loginItemFor("plan9", home, cfg, "/petal"); err == nil {
		t.Error("plan9 accepted")
	}
	if _, err := loginItemFor("linux", home, cfg, "/pe\ntal"); err == nil {
		t.Error("a path with a line break accepted")
	}
}
