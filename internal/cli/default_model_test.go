package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"petal/internal/models"
)

// isolateModels points the models root and the user cache at empty folders,
// as on a fresh machine.
func isolateModels(t *testing.T) {
	t.Helper()
	t.Setenv(models.EnvRoot, t.TempDir())
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
}

func TestResolveModel(t *testing.T) {
	isolateModels(t)
	var out bytes.Buffer
	if dir, err := resolveModel("some/dir", &out); err != nil || dir != "some/dir" || out.Len() != 0 {
		t.Errorf("named folder: %q, %v, said %q; want it unchanged and nothing said", dir, err, out.String())
	}
	dir, err := resolveModel("", &out)
	if err != nil || dir == "" {
		t.Fatalf("resolveModel: %q, %v", dir, err)
	}
	if !strings.Contains(out.String(), "demo model") {
		t.Errorf("with nothing installed it said %q, not that it uses the demo model", out.String())
	}
}

// TestServeDefaultsToDemo runs the README's `petal serve` on a fresh
// machine: no model installed, no --model; the demo model answers.
func TestServeDefaultsToDemo(t *testing.T) {
	isolateModels(t)
	t.Setenv("PETAL_API_KEY", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--addr", "127.0.0.1:0"}, w)
		w.Close()
	}()
	lines := bufio.NewReader(r)
	note, err := lines.ReadString('\n')
	if err != nil {
		t.Fatal(<-done)
	}
	if !strings.Contains(note, "demo model") {
		t.Errorf("first line %q does not say the demo model is used", note)
	}
	line, err := lines.ReadString('\n')
	if err != nil || !strings.Contains(line, "http://") {
		t.Fatalf("no URL in %q (%v)", line, err)
	}
	go io.Copy(io.Discard, r)
	base := strings.TrimSpace(line[strings.Index(line, "http://"):])

	resp, err := http.Post(base+"/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"Hello!"}],"temperature":0,"max_tokens":20}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	// The greedy reply transformers gives (models/demo/testdata/reference.json).
	const want = "Hello! How can I help you today?"
	if err != nil || len(body.Choices) != 1 || body.Choices[0].Message.Content != want {
		t.Fatalf("reply %+v (%v), want %q", body, err, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
