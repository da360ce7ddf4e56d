package api

import (
	"context"
	"errors"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"

	"petal/internal/httpgate"
	"petal/internal/hub"
)

// Puller is Petal's model download, which /api/pull runs for the model
// Petal ships for while another (the demo) is served: the download the
// web UI's Download button drives (manage.HubDownloader), so that both
// show one download.
type Puller interface {
	// Source is the Hugging Face repository and revision it fetches.
	Source() (repo, revision string)
	// Pull downloads the model, calling progress with each event (one at
	// a time), until it is whole or fails; when ctx ends it stops, what
	// is on disk kept for the next pull.
	Pull(ctx context.Context, progress func(hub.Event)) error
}

// Ollama's pull progress, in its words (ollama-js's ProgressResponse):
// the manifest, one layer's bytes, the digest check, the end.
const (
	pullManifest  = "pulling manifest"
	pullVerifying = "verifying sha256 digest"
	pullSuccess   = "success"
)

type ollamaProgress struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     int64  `json:"total,omitempty"`
	Completed int64  `json:"completed,omitempty"`
}

// pullable reports whether name is the model p downloads as an Ollama
// client names it: the repository ("mlx-community/Qwen3.6-35B-A3B-4bit"),
// with Ollama's "hf.co/" prefix for Hugging Face repositories or
// without its owner, in any case, with or without ":latest".
func pullable(p Puller, name string) bool {
	repo, _ := p.Source()
	name = strings.TrimSuffix(strings.ToLower(name), ":latest")
	for _, host := range []string{"hf.co/", "huggingface.co/"} {
		name = strings.TrimPrefix(name, host)
	}
	return name == strings.ToLower(repo) || name == strings.ToLower(repoBase(p))
}

// repoBase is the name of p's repository without its owner, which is
// also the name of the folder it pulls into, so of the model served
// from there.
func repoBase(p Puller) string {
	repo, _ := p.Source()
	return path.Base(repo)
}

// ollamaPull answers a pull of the served model at once: it is on disk and
// loaded. The model Petal ships for, when another is served, is downloaded
// by Petal's downloader with Ollama's progress; any other is refused, as
// Petal serves only its one model.
func (s *Server) ollamaPull(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ollamaModelName
		Stream *bool `json:"stream"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	name := body.get()
	if name == "" {
		return badParam("model", "name the model to pull in \"model\"")
	}
	stream := body.Stream == nil || *body.Stream
	p := s.opts.Pull
	if s.ollamaServes(name) || p != nil && pullable(p, name) && s.ollamaServes(repoBase(p)) {
		if !stream {
			httpgate.WriteJSON(w, http.StatusOK, ollamaProgress{Status: pullSuccess})
			return nil
		}
		st := s.startStream(w, r, false)
		defer st.close()
		for _, status := range []string{pullManifest, pullVerifying, "writing manifest", pullSuccess} {
			if st.send(ollamaProgress{Status: status}) != nil {
				return nil
			}
		}
		return nil
	}
	if p == nil || !pullable(p, name) {
		msg := "Petal cannot pull %s: it serves one model, %s, started with petal serve --model DIR"
		args := []any{strconv.Quote(name), strconv.Quote(s.svc.Info().Name)}
		if p != nil {
			repo, _ := p.Source()
			msg += ", and downloads only %s"
			args = append(args, strconv.Quote(repo))
		}
		return ollamaRefused(msg+"; download a model with petal pull or the web UI, then serve it", args...)
	}
	if !stream {
		if err := p.Pull(r.Context(), func(hub.Event) {}); err != nil {
			return pullError(err)
		}
		httpgate.WriteJSON(w, http.StatusOK, ollamaProgress{Status: pullSuccess})
		return nil
	}
	s.streamPull(w, r, p)
	return nil
}

// streamPull runs p's download under r, one NDJSON line per progress
// report, and ends with success or one error line. A client that hangs
// up, or stops reading, stops the download.
func (s *Server) streamPull(w http.ResponseWriter, r *http.Request, p Puller) {
	_, revision := p.Source()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := s.startStream(w, r, false)
	defer st.close()
	var watch pullWatch
	watch.ready = make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- p.Pull(ctx, watch.note) }()
	out := pullLines{st: st, digest: revision}
	out.send(ollamaProgress{Status: pullManifest})
	for {
		select {
		case <-watch.ready:
			for _, ev := range watch.take() {
				if !out.event(ev) {
					cancel()
				}
			}
		case err := <-done:
			for _, ev := range watch.take() {
				out.event(ev)
			}
			if err != nil {
				if r.Context().Err() == nil {
					out.send(map[string]string{"error": pullError(err).Message})
				}
				return
			}
			if !out.verified {
				out.send(ollamaProgress{Status: pullVerifying})
			}
			out.send(ollamaProgress{Status: pullSuccess})
			return
		}
	}
}

// pullWatch hands the download's events to the stream without the
// download ever waiting for the client: progress is cumulative, so a
// report the stream had no time to send is replaced by the next of its
// kind, while each change of phase, and each retry, keeps its place.
type pullWatch struct {
	mu      sync.Mutex
	pending []hub.Event
	ready   chan struct{}
}

// maxPendingPull bounds the events waiting for the stream: a client that
// reads nothing while retries and progress alternate leaves the latest.
const maxPendingPull = 16

func (w *pullWatch) note(ev hub.Event) {
	w.mu.Lock()
	n := len(w.pending)
	if n > 0 && (n == maxPendingPull || sameKind(w.pending[n-1], ev)) {
		w.pending[n-1] = ev
	} else {
		w.pending = append(w.pending, ev)
	}
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// sameKind reports whether b supersedes a: the same phase's progress, or
// another retry.
func sameKind(a, b hub.Event) bool {
	return a.Phase == b.Phase && (a.Retry == nil) == (b.Retry == nil)
}

// take returns the events waiting, in order.
func (w *pullWatch) take() []hub.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.pending
	w.pending = nil
	return evs
}

// pullLines writes a download's events as Ollama's progress lines: the
// download as one layer, the revision as its digest.
type pullLines struct {
	st       *stream
	digest   string
	verified bool
}

// send writes one line and reports whether the stream is still good.
func (o *pullLines) send(v any) bool { return o.st.send(v) == nil }

func (o *pullLines) event(ev hub.Event) bool {
	switch {
	case ev.Retry != nil:
		return o.send(ollamaProgress{Status: "retrying: " + hub.Diagnose(ev.Retry).Message})
	case ev.Phase == hub.Verifying && ev.File == "":
		// The whole checkpoint's check, after every file's.
		if o.verified {
			return true
		}
		o.verified = true
		return o.send(ollamaProgress{Status: pullVerifying})
	case ev.Phase == hub.Importing, ev.Phase == hub.Downloading, ev.Phase == hub.Verifying:
		if ev.Total == 0 {
			return true
		}
		status := "pulling " + shortDigest(o.digest)
		if ev.Phase == hub.Importing {
			status = "importing from the Hugging Face cache"
		}
		return o.send(ollamaProgress{Status: status, Digest: o.digest, Total: ev.Total, Completed: ev.Done})
	}
	return true
}

// shortDigest is the part of a digest Ollama's status names a layer by.
func shortDigest(d string) string { return d[:min(len(d), 12)] }

// pullError is a failed download in words the client shows, with the
// status of an answer not streamed.
func pullError(err error) *apiError {
	e := &apiError{Status: http.StatusInternalServerError, Type: "server_error", Code: "pull_failed",
		Message: "the download of the model failed: " + err.Error()}
	switch {
	case errors.Is(err, hub.ErrPaused):
		e.Message = "the download of the model was paused; pull again to resume it where it stopped"
	case errors.Is(err, hub.ErrCanceled):
		e.Message = "the download of the model was cancelled from Petal's Model screen"
	case errors.Is(err, hub.ErrBusy):
		e.Status = http.StatusConflict
	case errors.Is(err, hub.ErrNoSpace):
		e.Status = http.StatusInsufficientStorage
	case errors.Is(err, hub.ErrUnreachable), errors.Is(err, hub.ErrStalled):
		e.Status = http.StatusBadGateway
		e.Message = "the download of the model stopped: " + hub.Diagnose(err).Message +
			" What was downloaded is kept: pull again to resume once the Hub can be reached."
	}
	return e
}
