package api

import (
	"bytes"
	"log"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"petal/internal/service"
)

// lineWriter hands each log line to a channel: the line is written after
// the reply reaches the client, so the test waits for it.
type lineWriter chan string

func (w lineWriter) Write(b []byte) (int, error) {
	w <- string(b)
	return len(b), nil
}

func (w lineWriter) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-w:
		return strings.TrimSuffix(l, "\n")
	case <-time.After(5 * time.Second):
		t.Fatal("no log line")
		return ""
	}
}

// TestAccessLog: nothing recorded which client sent what (issue 30 item
// 11); each API request now logs one line with the client, route, status,
// tokens and time, and never what the client sent.
func TestAccessLog(t *testing.T) {
	lines := make(lineWriter, 16)
	ts := newTestServer(t, service.Options{}, Options{Logger: log.New(lines, "petal: ", log.LstdFlags)}, constant("ok"))
	secret := "SECRET-WORDS"
	req := post(t, ts.URL+"/v1/chat/completions?key="+secret, `{"messages":[{"role":"user","content":"`+secret+`"}],"max_tokens":5}`)
	req.Header.Set("User-Agent", "claude-cli/2.1.332 (external, cli)")
	if resp, body := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	line := lines.next(t)
	want := regexp.MustCompile(`^petal: \d{4}/\d\d/\d\d \d\d:\d\d:\d\d access: 127\.0\.0\.1:\d+ claude-cli/2\.1\.332 "POST /v1/chat/completions" 200 prompt=(\d+) cached=0 disk=0 completion=2 \d+\.\d{3}s$`)
	if m := want.FindStringSubmatch(line); m == nil || m[1] == "0" || strings.Contains(line, secret) {
		t.Errorf("line %q", line)
	}

	// A stream is logged once it ends, with its tokens; the same prompt
	// is read from the prefix cache.
	req = post(t, ts.URL+"/api/chat", `{"messages":[{"role":"user","content":"`+secret+`"}]}`)
	req.Header.Set("User-Agent", "")
	do(t, req)
	line = lines.next(t)
	if !regexp.MustCompile(`access: 127\.0\.0\.1:\d+ - "POST /api/chat" 200 prompt=\d+ cached=[1-9]\d* disk=0 completion=2 `).MatchString(line) {
		t.Errorf("stream line %q", line)
	}
	// Refusals too, with no tokens.
	do(t, get(t, ts.URL+"/v1/nothing"))
	if line = lines.next(t); !strings.Contains(line, `"GET /v1/nothing" 404 prompt=0 cached=0 disk=0 completion=0 `) {
		t.Errorf("404 line %q", line)
	}
	do(t, post(t, ts.URL+"/v1/chat/completions", `{"messages":[]}`))
	if line = lines.next(t); !strings.Contains(line, `"POST /v1/chat/completions" 400 prompt=0 `) {
		t.Errorf("400 line %q", line)
	}
}

// TestAccessLogOff: NoAccessLog (petal serve --access-log=false) logs
// nothing. ServeHTTP is called directly, so that the line would have been
// written when it returns.
func TestAccessLogOff(t *testing.T) {
	for _, off := range []bool{false, true} {
		var buf bytes.Buffer
		ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
		srv := New(ts.svc, Options{Logger: log.New(&buf, "", 0), NoAccessLog: off})
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, post(t, "http://localhost/v1/models", ""))
		srv.ServeHTTP(rec, get(t, "http://localhost/v1/models"))
		if logged := strings.Count(buf.String(), "access: "); logged != map[bool]int{false: 2, true: 0}[off] {
			t.Errorf("NoAccessLog %v: %q", off, buf.String())
		}
		if !off && !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ access: `).MatchString(buf.String()) {
			t.Errorf("a logger without a time gets none: %q", buf.String())
		}
	}
}
