package main

import (
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAppLogAppendsAndStartsOverWhenLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Library", "Logs", "Petal.log")
	write := func(s string) {
		t.Helper()
		f, err := openAppLog(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write("first start\n")
	write("second start\n")
	if got := read(); got != "first start\nsecond start\n" {
		t.Fatalf("log %q: starts do not append", got)
	}
	write(strings.Repeat("x", appLogMax))
	write("after the limit\n")
	if got := read(); got != "after the limit\n" {
		t.Errorf("a log past %d bytes was not started anew (%d bytes)", appLogMax, len(got))
	}
}

// TestAppLogTakesTheDefaultLogger: what packages log through the log
// package's default logger (the demo model mended at start) went to
// stderr alone, which is /dev/null for an app opened from Finder, and was
// lost; it now reaches the app's log file beside the app's own lines.
func TestAppLogTakesTheDefaultLogger(t *testing.T) {
	w, prefix, flags := log.Writer(), log.Prefix(), log.Flags()
	t.Cleanup(func() {
		log.SetOutput(w)
		log.SetPrefix(prefix)
		log.SetFlags(flags)
	})
	path := filepath.Join(t.TempDir(), "Petal.log")
	newAppLogger(path).Print("the app's own line")
	log.Print("a package's line")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{appLogPrefix, "the app's own line", "a package's line"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the log file lacks %q:\n%s", want, b)
		}
	}
	if n := strings.Count(string(b), appLogPrefix); n != 2 {
		t.Errorf("%d lines start with %q, want 2:\n%s", n, appLogPrefix, b)
	}
}
