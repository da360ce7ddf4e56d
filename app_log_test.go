package main

import (
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
