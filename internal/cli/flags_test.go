package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"petal/internal/runtime"
)

// --help on any command prints its usage and succeeds.
func TestHelpSucceeds(t *testing.T) {
	for name := range commands {
		if err := Run([]string{name, "--help"}, io.Discard); err != nil {
			t.Errorf("petal %s --help: %v", name, err)
		}
	}
}

// A bad flag's error is printed once, by main: the flag set prints only
// the usage.
func TestBadFlagSaidOnce(t *testing.T) {
	var stderr bytes.Buffer
	fs := newFlags("x", &stderr)
	fs.Int("count", 0, "how many")
	err := fs.Parse([]string{"--bogus"})
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("error %v", err)
	}
	if got := stderr.String(); strings.Contains(got, "bogus") || !strings.Contains(got, "-count") {
		t.Errorf("the flag set printed %q, want the usage without the error", got)
	}
}

func TestBenchRunNeedsModel(t *testing.T) {
	run := runArmProcess
	defer func() { runArmProcess = run }()
	runArmProcess = func([]string) ([]byte, error) {
		t.Error("an arm ran without a model")
		return nil, errors.New("no arm")
	}
	err := Run([]string{"bench"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--model DIR is required") || strings.Contains(err.Error(), "exit status") {
		t.Errorf("bench without --model: %v", err)
	}
}

// A --model that names no folder is said so, not as a memory-fit failure.
func TestMissingModelFolder(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, backend := range []string{"cpu", "sim"} {
		_, err := runtime.Load(runtime.LoadRequest{Dir: missing, Backend: backend}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "no such folder") || strings.Contains(err.Error(), "memory-fit") {
			t.Errorf("%s: %v", backend, err)
		}
	}
	if err := Run([]string{"bench", "--model", missing}, io.Discard); err == nil || !strings.Contains(err.Error(), "no such folder") {
		t.Errorf("bench: %v", err)
	}
}

// Listening on every interface prints a URL a client can use.
func TestServeOnEveryInterfacePrintsAUsableURL(t *testing.T) {
	dir := scriptedFolder(t, func(string) string { return "</think>\n\nok" })
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--model", dir, "--backend", "scripted", "--addr", "0.0.0.0:0"}, w)
		w.Close()
	}()
	defer func() { cancel(); <-done }()
	br := bufio.NewReader(r)
	var line string
	for !strings.HasPrefix(line, "serving ") {
		var err error
		if line, err = br.ReadString('\n'); err != nil {
			t.Fatalf("no serving line: %v", err)
		}
	}
	go io.Copy(io.Discard, br)
	base := strings.TrimSpace(line[strings.Index(line, "http://"):])
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("printed %q", line)
	}
	resp, err := http.Get(strings.TrimSuffix(base, "/v1") + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /health at the printed URL: %d", resp.StatusCode)
	}
}
