//go:build unix

package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"petal/engine/cpu"
	"petal/internal/service"
)

// demoModel is the built-in demo checkpoint.
const demoModel = "../../models/demo"

// Bounds of TestStalledReaders.
const (
	// stalledReceiveBuffer is the never-readers' socket receive buffer,
	// small so that their streams back up after a few kilobytes (Linux
	// raises it to its minimum, about 2 KB).
	stalledReceiveBuffer = 1 << 10
	// shortReplyBound is how long the short request may take: far more
	// than the cut-offs need on a loaded machine, less than the
	// StreamWriteTimeout a never-reader held the engine for before.
	shortReplyBound = 45 * time.Second
)

// stalledRequest is a long streamed completion: the demo continues this
// prompt for 1,139 tokens with this seed, far past what a never-reader's
// socket and backlog hold.
const stalledRequest = `{"prompt":"Once upon a time","max_tokens":3000,"seed":1,"stream":true}`

// lockedBuffer is a log destination the test reads while the server may
// still write to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStalledReaders is issue 28's stalled-reader scenario through the
// real HTTP server on the demo model: three clients open long streams and
// never read, then a fourth request of the same client asks for 4 tokens.
// The engine serves one request at a time, so the short request is
// answered only because each never-reader is cut off once it falls
// StreamBacklog events behind (its generation cancelled), instead of
// holding the engine until a write times out; its reply comes while the
// never-readers have still read nothing.
// stalledScenario starts the real HTTP server on the demo model with
// parallel requests decoding together, opens three long streams through
// dial that never read, waits for all three to be in, then asks for 4
// tokens with the same client and checks the reply. It returns the
// service, the server's address, its log and the never-readers.
func stalledScenario(t *testing.T, parallel int, dial func(string) (net.Conn, error)) (*service.Service, string, *lockedBuffer, []net.Conn) {
	t.Helper()
	m, err := cpu.Open(demoModel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	svc, err := service.New(m, demoModel, service.Options{Name: "demo", Parallel: parallel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	logged := &lockedBuffer{}
	hs := New(svc, Options{Logger: log.New(logged, "", 0)}).HTTPServer("127.0.0.1:0")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	addr := ln.Addr().String()
	stalled := make([]net.Conn, 3)
	t.Cleanup(func() {
		for _, c := range stalled {
			if c != nil {
				c.Close()
			}
		}
		hs.Close()
		<-served
		// The generations of the connections just closed end at their
		// next step; the model must outlive them.
		waitQueue(t, svc, func(m service.Metrics) bool { return m.Running == 0 && m.Waiting == 0 })
	})
	for i := range stalled {
		c, err := dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		stalled[i] = c
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nUser-Agent: petal-test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			addr, len(stalledRequest), stalledRequest)
	}
	// All three have joined the queue: running, waiting, or already cut
	// off.
	waitQueue(t, svc, func(m service.Metrics) bool { return int(m.Failed)+m.Waiting+m.Running == len(stalled) })

	start := time.Now()
	req := post(t, "http://"+addr+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":4,"seed":1}`)
	req.Header.Set("User-Agent", "petal-test")
	client := &http.Client{Timeout: shortReplyBound}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the short request behind %d never-readers: %v (log %q)", len(stalled), err, logged.String())
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	client.CloseIdleConnections()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v: %s", resp.StatusCode, err, body)
	}
	var reply struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &reply); err != nil || reply.Usage.CompletionTokens != 4 {
		t.Fatalf("reply %s (%v), want 4 tokens", body, err)
	}
	t.Logf("4-token request answered in %v behind %d never-reading streams", took, len(stalled))
	return svc, addr, logged, stalled
}

// TestStalledReadersBeside is the scenario with four requests decoding
// together and never-readers whose sockets take the kernel's default
// buffers (a few hundred kilobytes, so no cut-off comes for a long
// while): the short request is answered beside them, all three still
// running and none cut off.
func TestStalledReadersBeside(t *testing.T) {
	svc, _, _, _ := stalledScenario(t, 4, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) })
	// The short request leaves the engine just after its reply is sent.
	got := waitQueue(t, svc, func(m service.Metrics) bool { return m.Completed == 1 && m.Running <= 3 })
	if got.Running != 3 || got.Failed != 0 {
		t.Errorf("after the short reply: %d running, %d failed; want the 3 never-readers running, none failed", got.Running, got.Failed)
	}
}

func TestStalledReaders(t *testing.T) {
	svc, _, logged, stalled := stalledScenario(t, 1, dialStalled)
	// Each never-reader's generation ended in failure (cancelled), the
	// short one's in success, and each cut-off was logged.
	if got := svc.Metrics(); got.Failed != int64(len(stalled)) || got.Completed != 1 {
		t.Errorf("failed %d, completed %d; want %d and 1", got.Failed, got.Completed, len(stalled))
	}
	if n := strings.Count(logged.String(), "stream cut off: POST /v1/completions"); n != len(stalled) {
		t.Errorf("%d cut-offs logged, want %d: %q", n, len(stalled), logged.String())
	}
	t.Logf("log:\n%s", logged.String())
	// Read now, each stream holds the events the sockets and the backlog
	// took and ends without the reply's end.
	for i, c := range stalled {
		c.SetReadDeadline(time.Now().Add(shortReplyBound))
		got, _ := io.ReadAll(c)
		if !strings.Contains(string(got), "data: {") || strings.Contains(string(got), "[DONE]") {
			t.Errorf("never-reader %d received %d bytes, want events and no [DONE]: %q", i, len(got), got)
		}
		t.Logf("never-reader %d: %d events in %d bytes", i, strings.Count(string(got), "data: {"), len(got))
	}
}

// dialStalled connects to addr with a small receive buffer, set before
// the handshake so that the window advertised is small too.
func dialStalled(addr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, raw syscall.RawConn) error {
		var err error
		if cerr := raw.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stalledReceiveBuffer)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	return d.Dial("tcp", addr)
}
