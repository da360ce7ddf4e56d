package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"petal/internal/prefixdisk"
)

// serveWithDisk runs petal serve on the demo model on the CPU with the
// prefix cache's disk tier in dir, and returns its base URL and a stop
// function that waits until the server (and its disk writes) are done.
func serveWithDisk(t *testing.T, dir string) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--model", demoModel, "--backend", "cpu", "--addr", "127.0.0.1:0",
			"--prefix-cache-dir", dir, "--prefix-cache-gb", "1", "--cache-mb", "64"}, w)
		w.Close()
	}()
	br := bufio.NewReader(r)
	var log strings.Builder
	for !strings.Contains(log.String(), "prefix cache on disk: ") {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("serve: %v (log %q)", <-done, log.String())
		}
		log.WriteString(line)
		if i := strings.Index(line, "http://"); i >= 0 && base == "" {
			base = strings.TrimSpace(line[i:])
		}
	}
	go io.Copy(io.Discard, br)
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return base, stop
}

// agentChat posts a greedy chat request with a long system prompt and
// returns the reply, the cached prompt tokens it reports and how long it
// took.
func agentChat(t *testing.T, base, question string) (reply string, prompt, cached int, took time.Duration) {
	t.Helper()
	var rules strings.Builder
	for i := range 40 {
		fmt.Fprintf(&rules, "Rule %d: read the file before editing it, keep changes small, and run the tests.\n", i)
	}
	body, _ := json.Marshal(map[string]any{
		"messages": []map[string]string{
			{"role": "system", "content": "You are a coding agent.\n" + rules.String()},
			{"role": "user", "content": question},
		},
		"max_tokens": 4, "temperature": 0,
	})
	start := time.Now()
	resp, err := http.Post(base+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	took = time.Since(start)
	var out struct {
		Choices []struct {
			Message struct{ Content, ReasoningContent string }
		}
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		t.Fatalf("status %d: %v %+v", resp.StatusCode, err, out)
	}
	return out.Choices[0].Message.ReasoningContent + "|" + out.Choices[0].Message.Content, out.Usage.PromptTokens, out.Usage.PromptTokensDetails.CachedTokens, took
}

// TestServeRestartReusesDisk: petal serve answers an agent's first
// request, restarts, and answers a new conversation with the same system
// prompt from the disk tier, as an uncached server does.
func TestServeRestartReusesDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	base, stop := serveWithDisk(t, dir)
	_, prompt1, cached1, took1 := agentChat(t, base, "List the files.")
	stop()
	if cached1 != 0 {
		t.Fatalf("the first request reports %d cached tokens", cached1)
	}

	base, stop = serveWithDisk(t, dir)
	reply, prompt2, cached2, took2 := agentChat(t, base, "Which test fails?")
	stop()
	t.Logf("first request %d prompt tokens in %v; after a restart %d prompt tokens, %d cached, in %v", prompt1, took1, prompt2, cached2, took2)
	// The system prompt is all but the user's turn: about 95% of the prompt.
	if cached2*100 < prompt2*90 {
		t.Errorf("after the restart %d of %d prompt tokens cached", cached2, prompt2)
	}

	uncached, _ := serveWithDisk(t, filepath.Join(t.TempDir(), "other"))
	want, _, none, _ := agentChat(t, uncached, "Which test fails?")
	if none != 0 || reply != want {
		t.Errorf("reply %q (%d cached), uncached %q (%d)", reply, cached2, want, none)
	}

	var list bytes.Buffer
	if err := Run([]string{"cache", "list", "--dir", dir}, &list); err != nil {
		t.Fatal(err)
	}
	entries, _ := prefixdisk.List(dir)
	if len(entries) == 0 || !strings.Contains(list.String(), fmt.Sprintf("%d snapshots", len(entries))) {
		t.Errorf("cache list of %d snapshots:\n%s", len(entries), list.String())
	}
	var clear bytes.Buffer
	if err := Run([]string{"cache", "clear", "--dir", dir}, &clear); err != nil {
		t.Fatal(err)
	}
	if left, _ := prefixdisk.List(dir); len(left) != 0 || !strings.Contains(clear.String(), fmt.Sprintf("removed %d snapshots", len(entries))) {
		t.Errorf("after clear %d left: %s", len(left), clear.String())
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("clear removed the folder: %v", err)
	}
}

func TestCacheCommandRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{{"cache"}, {"cache", "drop"}, {"cache", "list", "extra"}, {"cache", "list", "--dir", ""}} {
		if err := Run(args, io.Discard); err == nil {
			t.Errorf("%q succeeded", args)
		}
	}
	for _, gb := range []string{"-1", "lots", "NaN", "1e300"} {
		if _, err := parsePrefixCacheGB(gb); err == nil || !strings.Contains(err.Error(), "--prefix-cache-gb") {
			t.Errorf("--prefix-cache-gb %s: %v", gb, err)
		}
	}
	if s, note, err := openPrefixDisk(t.TempDir(), 0, nil); s != nil || err != nil || !strings.Contains(note, "off") {
		t.Errorf("--prefix-cache-gb 0: %v %q %v", s, note, err)
	}
}
