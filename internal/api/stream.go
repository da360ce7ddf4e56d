package api

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// stream writes one streamed response: server-sent events (each value a
// "data:" event) or NDJSON (each value a line). Writes come from the
// handler and from the pinger, so they are serialised; the first write
// error is kept and returned by every later call.
type stream struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	rc    *http.ResponseController
	sse   bool
	last  time.Time
	err   error
	done  chan struct{}
	pings sync.WaitGroup
}

// startStream sends the headers of a 200 streamed response.
func startStream(w http.ResponseWriter, sse bool) *stream {
	h := w.Header()
	if sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s := &stream{w: w, rc: http.NewResponseController(w), sse: sse, done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	s.flushLocked()
	return s
}

// send writes v as the next event or line.
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

// sendEvent writes v as a named server-sent event, as Anthropic's API
// streams.
func (s *stream) sendEvent(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write("event: " + name + "\ndata: " + string(data) + "\n\n")
}

// write sends text as is and flushes it.
func (s *stream) write(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout)) // not every writer supports deadlines
	if _, err := s.w.Write([]byte(text)); err != nil {
		s.err = err
		return err
	}
	s.flushLocked()
	return s.err
}

func (s *stream) flushLocked() {
	if err := s.rc.Flush(); err != nil && s.err == nil {
		s.err = err
	}
	s.last = time.Now()
}

// failed returns the first write error, if any.
func (s *stream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// keepAlive sends an SSE comment whenever the stream has been silent for
// interval, until stop is called. NDJSON has no comments, so it gets none.
func (s *stream) keepAlive(interval time.Duration) (stop func()) {
	if !s.sse {
		return func() {}
	}
	s.pings.Add(1)
	go func() {
		defer s.pings.Done()
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.mu.Lock()
				silent := time.Since(s.last) >= interval
				s.mu.Unlock()
				if silent && s.write(": ping\n\n") != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(s.done)
		s.pings.Wait()
	}
}
