package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of a streamed response.
const (
	// StreamBacklog is how many events may wait for a client that takes
	// nothing: once that many wait behind a write it has not taken for
	// StreamStall, the client is cut off and its generation cancelled.
	// A client that stops reading must not hold the engine (which may
	// serve one request at a time) nor its place in a batch; network
	// hiccups are the socket's buffers' to absorb.
	StreamBacklog = 32
	// StreamStall is how long the writer must have waited in one write
	// before a full backlog counts against the client. Events also pile
	// up while the writer is between writes, waiting for a CPU (a test's
	// scripted model outruns any socket); that is not the client's doing,
	// and the writer takes them all at its next write.
	StreamStall = 100 * time.Millisecond
	// StreamUnsentBytes bounds what the kernel queues unsent on a stream's
	// socket (TCP_NOTSENT_LOWAT), so that a client that stops reading
	// stalls the writer soon. Left to itself Linux let the socket of a
	// client with a 4 KB receive buffer absorb 2.8 MB on loopback, over
	// ten thousand events.
	StreamUnsentBytes = 4 << 10
)

// errSlowClient is why a stream is cut off and its generation cancelled.
var errSlowClient = fmt.Errorf("api: the client took nothing for %v while %d events waited; stream cut off", StreamStall, StreamBacklog)

// stream writes one streamed response: server-sent events (each value a
// "data:" event) or NDJSON (each value a line). The handler queues events
// without waiting for the client, since it sends them from inside the
// engine's decode loop; a writer goroutine writes them out, and sends a
// ping (an SSE comment) whenever the stream has been silent for the ping
// interval. The first failure (a write error, the request's end, or the
// client cut off for taking nothing while StreamBacklog events waited) is
// kept and returned by every later call.
type stream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	sse    bool
	ping   time.Duration // 0: no pings (NDJSON has no comments)
	logger *log.Logger
	who    string // the request, for the log
	conn   net.Conn
	// unwatch stops the cut-off at the request's end; watched is closed
	// once a cut-off that started has returned.
	unwatch func() bool
	watched chan struct{}

	mu      sync.Mutex
	queue   []byte // events not yet taken by the writer, one after the other
	queued  int    // events in queue
	events  int    // events queued in all, for the log
	writing bool   // the writer is in a write, since writeStart
	started time.Time
	closing bool
	err     error
	wake    chan struct{} // a token when the writer has work
	done    chan struct{} // closed when the writer returns
}

// startStream sends the headers of a 200 streamed response and starts its
// writer; the stream must be closed before the handler returns.
func (s *Server) startStream(w http.ResponseWriter, r *http.Request, sse bool) *stream {
	h := w.Header()
	if sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	st := &stream{w: w, rc: http.NewResponseController(w), sse: sse, logger: s.logger,
		who:  r.Method + " " + r.URL.Path + " from " + r.RemoteAddr,
		wake: make(chan struct{}, 1), done: make(chan struct{}), watched: make(chan struct{})}
	if sse {
		st.ping = s.opts.PingInterval
	}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		st.conn = c
		limitUnsent(c, StreamUnsentBytes)
	}
	w.WriteHeader(http.StatusOK)
	// A client that is gone takes no more events, and its writer must
	// not wait out a write deadline to notice.
	st.unwatch = context.AfterFunc(r.Context(), func() {
		st.cut(context.Cause(r.Context()))
		close(st.watched)
	})
	go st.run()
	return st
}

// send queues v as the next event or line.
func (s *stream) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if s.sse {
		return s.write("data: " + string(data) + "\n\n")
	}
	return s.write(string(data) + "\n")
}

// sendEvent queues v as a named server-sent event, as Anthropic's API
// streams.
func (s *stream) sendEvent(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write("event: " + name + "\ndata: " + string(data) + "\n\n")
}

// write queues text as is, or cuts the stream off when StreamBacklog
// events wait behind a write the client has not taken for StreamStall. It
// never waits for the client.
func (s *stream) write(text string) error {
	s.mu.Lock()
	if s.err != nil {
		defer s.mu.Unlock()
		return s.err
	}
	if stalled := time.Since(s.started); s.queued >= StreamBacklog && s.writing && stalled >= StreamStall {
		s.failLocked(errSlowClient)
		waiting, events := s.queued, s.events
		s.mu.Unlock()
		s.logger.Printf("stream cut off: %s took nothing for %v while %d events waited, %d events in; its generation is cancelled",
			s.who, stalled.Round(time.Millisecond), waiting, events)
		return errSlowClient
	}
	s.queue = append(s.queue, text...)
	s.queued++
	s.events++
	s.mu.Unlock()
	s.signal()
	return nil
}

// cut ends the stream with err unless it already failed.
func (s *stream) cut(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLocked(err)
}

// failLocked keeps err as the stream's failure and interrupts a write in
// progress: a deadline in the past fails it at once.
func (s *stream) failLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.rc.SetWriteDeadline(time.Now()) // not every writer supports deadlines
	s.signal()
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// failed returns the stream's failure, if any.
func (s *stream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// close waits for the writer to write what is queued (each write bounded
// by StreamWriteTimeout) and returns the socket to its defaults.
func (s *stream) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
	<-s.done
	// A cut-off still under way would set its deadline on the connection
	// after the handler returned, when it may carry the next request.
	if !s.unwatch() {
		<-s.watched
	}
	if s.conn != nil {
		limitUnsent(s.conn, 0)
	}
}

// run is the writer: it sends the headers, then each batch of queued
// events, until the stream fails or is closed with nothing left queued.
func (s *stream) run() {
	defer close(s.done)
	var tick <-chan time.Time
	if s.ping > 0 {
		t := time.NewTicker(s.ping / 2)
		defer t.Stop()
		tick = t.C
	}
	if !s.put(nil) {
		return
	}
	last := time.Now()
	for {
		s.mu.Lock()
		batch, closing := s.queue, s.closing
		s.queue, s.queued = nil, 0
		s.mu.Unlock()
		if len(batch) == 0 {
			if closing {
				return
			}
			select {
			case <-s.wake:
				continue
			case now := <-tick:
				if now.Sub(last) < s.ping {
					continue
				}
				batch = []byte(": ping\n\n")
			}
		}
		if !s.put(batch) {
			return
		}
		last = time.Now()
	}
}

// put writes and flushes batch and reports whether the stream is still
// good.
func (s *stream) put(batch []byte) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.writing, s.started = true, time.Now()
	// Under the lock, so that a cut-off's deadline is never replaced.
	s.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	s.mu.Unlock()
	var err error
	if len(batch) > 0 {
		_, err = s.w.Write(batch)
	}
	if err == nil {
		err = s.rc.Flush()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writing = false
	if err != nil && s.err == nil {
		s.err = err
	}
	return s.err == nil
}

// connKey is the context key under which the server keeps a request's
// connection, whose socket a stream tunes.
type connKey struct{}

// withConn is the http.Server's ConnContext: it keeps c for the streams
// of the requests c carries.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}
