package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"petal/internal/fit"
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

// serveLines runs petal serve with args until the test ends and returns
// the lines it printed up to the serving line and the two after it.
func serveLines(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, args, w)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %v: %v", args, err)
		}
	})
	br := bufio.NewReader(r)
	var lines []string
	after := -1
	for after < 2 {
		line, err := br.ReadString('\n')
		if err != nil {
			cancel()
			t.Fatalf("serve %v printed %q, then %v", args, lines, err)
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
		if after >= 0 || strings.HasPrefix(line, "serving ") {
			after++
		}
	}
	go io.Copy(io.Discard, br) // serve never blocks on the pipe
	return lines
}

// TestServeBanner: the serve banner never printed the web UI's address,
// nor how to get the real model in place of the demo (issue 28 B.6). The
// serving line stays as clients and scripts parse it; the next says where
// the web UI is, and the page there answers; with the demo model, the
// next says it is a toy and how to get the real one, with its size.
func TestServeBanner(t *testing.T) {
	isolateModels(t)
	lines := serveLines(t, "--addr", "127.0.0.1:0", "--backend", "cpu")
	n := len(lines)
	serving, web, toy := lines[n-3], lines[n-2], lines[n-1]
	base := strings.TrimSuffix(serving[strings.Index(serving, "http://"):], "v1")
	if !strings.HasPrefix(serving, "serving ") || !strings.HasSuffix(serving, "/v1") || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("serving line %q", serving)
	}
	if want := "web UI: " + base + " (chat, the Model screen, settings)"; web != want {
		t.Errorf("web UI line %q, want %q", web, want)
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET %s: %d %s", base, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	m, err := fit.Qwen36()
	if err != nil {
		t.Fatal(err)
	}
	size := fmt.Sprintf("(%.1f GB)", float64(m.WeightsBytes)/1e9)
	if m.WeightsBytes < 18e9 || m.WeightsBytes > 21e9 {
		t.Errorf("the real model's download is %d bytes, not about 19.5 GB", m.WeightsBytes)
	}
	for _, want := range []string{"the demo model is a toy", size, "`petal pull`", "Download button", "Model screen"} {
		if !strings.Contains(toy, want) {
			t.Errorf("demo line %q lacks %q", toy, want)
		}
	}

	// Another model: the web UI's line, and no word of a demo.
	dir := scriptedFolder(t, func(string) string { return "</think>\n\nok" })
	lines = serveLines(t, "--model", dir, "--backend", "scripted", "--addr", "127.0.0.1:0")
	n = len(lines)
	if !strings.HasPrefix(lines[n-2], "web UI: http://127.0.0.1:") || strings.Contains(strings.Join(lines, "\n"), "demo") {
		t.Errorf("serving a model of its own, serve printed:\n%s", strings.Join(lines, "\n"))
	}
}
