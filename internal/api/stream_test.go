package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClient is a ResponseWriter over a socket that takes a write only
// when the test lets it (each token of accept takes one), or, when rate is
// set, reads rate bytes a second; it fails a write once the write deadline
// has passed, as a net.Conn does.
type fakeClient struct {
	header  http.Header
	accept  chan struct{}
	rate    int
	expired chan struct{}
	once    sync.Once
	mu      sync.Mutex
	got     bytes.Buffer
	// deadline is the latest write deadline set.
	deadline time.Time
}

func newFakeClient() *fakeClient {
	return &fakeClient{header: http.Header{}, accept: make(chan struct{}), expired: make(chan struct{})}
}

func (c *fakeClient) Header() http.Header { return c.header }
func (c *fakeClient) WriteHeader(int)     {}
func (c *fakeClient) FlushError() error   { return nil }

func (c *fakeClient) Write(b []byte) (int, error) {
	if c.rate > 0 {
		read := time.NewTimer(time.Duration(len(b)) * time.Second / time.Duration(c.rate))
		defer read.Stop()
		select {
		case <-read.C:
		case <-c.expired:
			return 0, os.ErrDeadlineExceeded
		}
	} else {
		select {
		case <-c.accept:
		case <-c.expired:
			return 0, os.ErrDeadlineExceeded
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.Write(b)
}

func (c *fakeClient) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	if !t.IsZero() && !t.After(time.Now()) {
		c.once.Do(func() { close(c.expired) })
	}
	return nil
}

func (c *fakeClient) lastDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

func (c *fakeClient) received() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.String()
}

// streamServer is a Server with only what streams use, logging to log.
func streamServer(log *log.Logger) *Server {
	return &Server{logger: log, opts: Options{PingInterval: time.Minute}}
}

func event(i int) string { return fmt.Sprintf("data: %d\n\n", i) }

// TestStreamCutsOffStalledClient: a client that takes nothing while the
// handler queues events is cut off once StreamBacklog events wait behind a
// write it has not taken for StreamStall, not before: the next event fails
// at once with errSlowClient (so the generation stops), the write the
// writer was blocked in is interrupted, and the cut-off is logged.
func TestStreamCutsOffStalledClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logged strings.Builder
		c := newFakeClient()
		st := streamServer(log.New(&logged, "", 0)).startStream(c, httptest.NewRequest("POST", "/v1/completions", nil), true)
		if err := st.write(event(0)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the writer has taken event 0 and waits in Write
		i := 1
		for ; i <= StreamBacklog; i++ {
			if err := st.write(event(i)); err != nil {
				t.Fatalf("event %d with %d waiting: %v", i, i-1, err)
			}
		}
		time.Sleep(StreamStall - 1) // the fake clock's
		if err := st.write(event(i)); err != nil {
			t.Fatalf("event %d, %v into the stalled write: %v", i, StreamStall-1, err)
		}
		i++
		time.Sleep(time.Nanosecond)
		if err := st.write(event(i)); !errors.Is(err, errSlowClient) {
			t.Fatalf("event %d, %v into the stalled write with %d waiting: %v, want errSlowClient", i, StreamStall, i-1, err)
		}
		if err := st.write(event(i + 1)); !errors.Is(err, errSlowClient) {
			t.Fatalf("after the cut-off: %v", err)
		}
		st.close() // returns: the blocked write was interrupted
		if !errors.Is(st.failed(), errSlowClient) {
			t.Errorf("failed() = %v", st.failed())
		}
		if got := c.received(); got != "" {
			t.Errorf("the stalled client received %q", got)
		}
		if d := c.lastDeadline(); d.IsZero() || d.After(time.Now()) {
			t.Errorf("a cut-off stream's connection has write deadline %v, want one passed, so that the server closes it", d)
		}
		if !strings.Contains(logged.String(), "stream cut off: POST /v1/completions") {
			t.Errorf("log %q does not say the stream was cut off", logged.String())
		}
	})
}

// TestStreamKeepsUpWithReader: a client that takes each write as it comes
// gets every event, in order, however many more than StreamBacklog the
// handler queues at once (a queue longer than the backlog behind a write
// that is not stalled is the writer's delay, not the client's).
func TestStreamKeepsUpWithReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeClient()
		close(c.accept)
		st := streamServer(log.New(&strings.Builder{}, "", 0)).startStream(c, httptest.NewRequest("POST", "/v1/completions", nil), true)
		var want strings.Builder
		for i := range 8 * StreamBacklog {
			if err := st.write(event(i)); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			want.WriteString(event(i))
		}
		st.close()
		if st.failed() != nil {
			t.Errorf("failed() = %v", st.failed())
		}
		if got := c.received(); got != want.String() {
			t.Errorf("received %q, want %q", got, want.String())
		}
	})
}

// TestStreamTrickle: a client that reads, but slower than the reply comes
// (the 4 KB/s trickle against 40 KB/s of events, a 200-byte event
// every 5 ms), is cut off too; one that reads faster than that never is.
func TestStreamTrickle(t *testing.T) {
	const (
		events = 2000
		every  = 5 * time.Millisecond
	)
	payload := "data: " + strings.Repeat("x", 192) + "\n\n"
	for _, tc := range []struct {
		rate int
		cut  bool
	}{{4 << 10, true}, {80 << 10, false}} {
		t.Run(fmt.Sprint("rate=", tc.rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newFakeClient()
				c.rate = tc.rate
				st := streamServer(log.New(&strings.Builder{}, "", 0)).startStream(c, httptest.NewRequest("POST", "/v1/responses", nil), true)
				sent := 0
				var err error
				for ; sent < events; sent++ {
					if err = st.write(payload); err != nil {
						break
					}
					time.Sleep(every) // the fake clock's
				}
				st.close()
				got := len(c.received()) / len(payload)
				switch {
				case tc.cut && (!errors.Is(err, errSlowClient) || got == 0):
					t.Errorf("a client reading %d B/s took %d of %d events and was not cut off (%v)", tc.rate, got, sent, err)
				case !tc.cut && (err != nil || got != events):
					t.Errorf("a client reading %d B/s took %d of %d events: %v", tc.rate, got, events, err)
				}
			})
		})
	}
}

// TestStreamDrainsOnClose: events queued behind a slow write are written
// when the handler closes the stream, not dropped.
func TestStreamDrainsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeClient()
		st := streamServer(log.New(&strings.Builder{}, "", 0)).startStream(c, httptest.NewRequest("POST", "/api/chat", nil), false)
		st.write(event(0))
		synctest.Wait()
		st.write(event(1))
		st.write(event(2))
		closed := make(chan struct{})
		go func() {
			st.close()
			close(closed)
		}()
		c.accept <- struct{}{} // event 0
		c.accept <- struct{}{} // events 1 and 2, in one write
		<-closed
		if got, want := c.received(), event(0)+event(1)+event(2); got != want || st.failed() != nil {
			t.Errorf("received %q (%v), want %q", got, st.failed(), want)
		}
	})
}

// TestStreamEndsWithRequest: when the request ends (the client went away)
// a write the writer waits in is interrupted, so close returns at once
// rather than after StreamWriteTimeout, and the stream fails with the
// request's cause.
func TestStreamEndsWithRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		gone := errors.New("client gone")
		c := newFakeClient()
		r := httptest.NewRequest("POST", "/v1/messages", nil).WithContext(ctx)
		st := streamServer(log.New(&strings.Builder{}, "", 0)).startStream(c, r, true)
		st.write(event(0))
		synctest.Wait()
		start := time.Now()
		cancel(gone)
		st.close()
		if waited := time.Since(start); waited != 0 {
			t.Errorf("close waited %v for a write to a client that is gone", waited)
		}
		if !errors.Is(st.failed(), gone) {
			t.Errorf("failed() = %v, want the request's cause", st.failed())
		}
		if err := st.write(event(1)); !errors.Is(err, gone) {
			t.Errorf("write after the request ended: %v", err)
		}
	})
}

// TestStreamPings: an SSE stream silent for the ping interval gets a
// comment; an NDJSON one, which has no comments, gets nothing.
func TestStreamPings(t *testing.T) {
	for _, sse := range []bool{true, false} {
		t.Run(fmt.Sprint("sse=", sse), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newFakeClient()
				close(c.accept)
				s := streamServer(log.New(&strings.Builder{}, "", 0))
				st := s.startStream(c, httptest.NewRequest("POST", "/v1/chat/completions", nil), sse)
				time.Sleep(s.opts.PingInterval * 3 / 2) // the fake clock's
				st.close()
				want := ""
				if sse {
					want = ": ping\n\n"
				}
				if got := c.received(); got != want {
					t.Errorf("received %q after %v of silence, want %q", got, s.opts.PingInterval*3/2, want)
				}
			})
		})
	}
}
