package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"petal/internal/runtime"
)

// TestServeCommand runs petal serve on a free port, talks to it, and
// interrupts it.
func TestServeCommand(t *testing.T) {
	dir := scriptedFolder(t, func(string) string { return "Sure.</think>\n\nServed." })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--model", dir, "--backend", "scripted", "--addr", "127.0.0.1:0", "--api-key", "k"}, w)
		w.Close()
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(<-done)
	}
	go io.Copy(io.Discard, r)
	base := strings.TrimSpace(line[strings.Index(line, "http://"):])

	req, _ := http.NewRequest("POST", base+"/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Choices []struct {
			Message struct{ Content, Reasoning string }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || len(body.Choices) != 1 || body.Choices[0].Message.Content != "Served." || body.Choices[0].Message.Reasoning != "Sure." {
		t.Fatalf("reply %+v (%v)", body, err)
	}
	req, _ = http.NewRequest("GET", base+"/models", nil)
	req.Host = "evil.example"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Host: status %d", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v after the interrupt", err)
		}
	case <-time.After(runtime.DefaultShutdownTimeout + time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeFlags(t *testing.T) {
	// No --model is not an error: it serves the default model (TestServeDefaultsToDemo).
	for _, args := range [][]string{
		{"--model", "x", "--queue", "0"},
		{"--model", "x", "stray"},
		{"--model", "x", "--backend", "nope"},
	} {
		if err := serve(context.Background(), args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
