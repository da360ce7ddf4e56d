package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"petal/engine/cpu"
	"petal/internal/prefixdisk"
	"petal/internal/service"
)

// demoServerWithDisk serves the demo model on the CPU with the prefix cache's disk
// tier in dir; stop ends the server, the service and the tier's writes.
func demoServerWithDisk(t *testing.T, dir string, logger *log.Logger) (url string, stop func()) {
	t.Helper()
	m, err := cpu.Open("../../models/demo")
	if err != nil {
		t.Fatal(err)
	}
	store, err := prefixdisk.Open(dir, 1<<30, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(m, "../../models/demo", service.Options{PrefixDisk: store})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(New(svc, Options{Logger: logger}))
	closed := false
	stop = func() {
		if !closed {
			closed = true
			ts.Close()
			svc.Close()
			store.Close()
			m.Close()
		}
	}
	t.Cleanup(stop)
	return ts.URL, stop
}

// TestDiskHitsAreReported: after a restart, the Anthropic API's
// cache_read_input_tokens counts the prompt start read from disk, and
// /metrics splits memory and disk hits and gives the load time.
func TestDiskHitsAreReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	system := "You are a coding agent.\n" + strings.Repeat("Read the file before editing it, keep changes small, and run the tests.\n", 30)
	url, stop := demoServerWithDisk(t, dir, log.New(io.Discard, "", 0))
	body := fmt.Sprintf(`{"messages":[{"role":"system","content":%q},{"role":"user","content":"List the files."}],"max_tokens":2,"temperature":0}`, system)
	if resp, out := do(t, post(t, url+"/v1/chat/completions", body)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	stop()

	var lines bytes.Buffer
	url, stop = demoServerWithDisk(t, dir, log.New(&lines, "", 0))
	body = fmt.Sprintf(`{"model":"demo","system":%q,"messages":[{"role":"user","content":"Which test fails?"}],"max_tokens":2,"temperature":0}`, system)
	resp, out := do(t, post(t, url+"/v1/messages", body))
	var msg struct {
		Usage struct {
			InputTokens          int `json:"input_tokens"`
			CacheReadInputTokens int `json:"cache_read_input_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(out), &msg); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	read, total := msg.Usage.CacheReadInputTokens, msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens
	if read*100 < total*90 {
		t.Errorf("after a restart %d of %d input tokens read from the cache", read, total)
	}
	_, metrics := do(t, get(t, url+"/metrics"))
	for _, want := range []string{
		"petal_prefix_cache_disk_hits_total 1\n", "petal_prefix_cache_memory_hits_total 0\n",
		fmt.Sprintf("petal_prefix_disk_loaded_tokens_total %d\n", read), "petal_prefix_disk_on 1\n",
		"# TYPE petal_prefix_disk_load_seconds_total counter\n", "# TYPE petal_prefix_disk_bytes gauge\n",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	stop() // the access lines are written once each request is answered
	if want := fmt.Sprintf(`cached=%d disk=%d/`, read, read); !strings.Contains(lines.String(), want) {
		t.Errorf("the access log does not say the disk gave the %d cached tokens (%q):\n%s", read, want, lines.String())
	}
}
