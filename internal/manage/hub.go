package manage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"

	"petal/engine/damaged"
	"petal/internal/hub"
)

// Download states, as DownloadStatus reports them.
const (
	DownloadIdle      = "idle"
	DownloadRunning   = "running"
	DownloadPaused    = "paused"
	DownloadVerifying = "verifying"
	DownloadDone      = "done"
	DownloadFailed    = "failed"
	DownloadCancelled = "cancelled"
)

// errorCodes names each failure of package hub for the UI, which switches
// on the code.
var errorCodes = []struct {
	err  error
	code string
}{
	{hub.ErrChecksum, "checksum"},
	{hub.ErrNoSpace, "no_space"},
	{hub.ErrNotFound, "not_found"},
	{hub.ErrAuth, "auth"},
	{hub.ErrStalled, "stalled"},
	{hub.ErrBadListing, "bad_listing"},
	{hub.ErrBusy, "busy"},
	{hub.ErrExists, "exists"},
	{hub.ErrInput, "bad_input"},
	{hub.ErrUnreachable, "unreachable"},
}

func downloadError(err error) *DownloadError {
	if errors.Is(err, hub.ErrUnreachable) && !errors.Is(err, hub.ErrStalled) {
		return &DownloadError{Code: "unreachable", Message: hub.Diagnose(err).Message, Detail: err.Error()}
	}
	if errors.Is(err, damaged.Err) {
		return &DownloadError{Code: CodeDamaged, Message: damagedMessage, Detail: err.Error()}
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return &DownloadError{Code: c.code, Message: err.Error()}
		}
	}
	return &DownloadError{Code: "download_failed", Message: err.Error()}
}

// HubDownloader is the Downloader over package hub: one pull of one model
// folder, driven by the Setup screen. Pulls run in the background, apart
// from the request that started them.
type HubDownloader struct {
	opts hub.Options
	dir  string

	// act serializes Do, so an action decides on the state and moves it
	// with nothing in between; it is held while a pause or cancel waits for
	// the pull to stop, which needs only mu.
	act sync.Mutex

	mu    sync.Mutex
	dl    *hub.Download
	state string
	ev    hub.Event
	err   *DownloadError
	// retry is the connection being retried, until bytes move again or
	// the pull reaches another phase.
	retry *DownloadRetry
	// gen counts the runs; a run's end is ignored once a newer one began.
	gen int
	// changed is closed, and replaced, at each change of state, for those
	// that wait for one.
	changed chan struct{}
}

// NewHubDownloader drives pulls with opts (its Progress is replaced). A
// folder a pull already finished starts as done.
func NewHubDownloader(opts hub.Options) *HubDownloader {
	if opts.Repo == "" {
		opts.Repo = hub.DefaultRepo
	}
	if opts.Revision == "" {
		opts.Revision = hub.DefaultRevision
	}
	if opts.Dir == "" {
		opts.Dir = hub.DefaultDir(opts.Repo)
	}
	h := &HubDownloader{opts: opts, dir: opts.Dir, state: DownloadIdle, changed: make(chan struct{})}
	h.opts.Progress = h.progress
	if hub.Finished(h.dir) {
		h.state = DownloadDone
		size := folderSize(h.dir)
		h.ev = hub.Event{Phase: hub.Done, Done: size, Total: size}
	}
	return h
}

// Dir is the model folder pulls write.
func (h *HubDownloader) Dir() string { return h.dir }

func folderSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func (h *HubDownloader) progress(ev hub.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case ev.Retry != nil:
		d := hub.Diagnose(ev.Retry)
		h.retry = &DownloadRetry{
			Reason: d.Reason, Message: d.Message, Detail: d.Detail, Unreachable: d.Unreachable,
			NextAttemptAt: ev.RetryAt, Attempt: ev.Attempt, MaxAttempts: ev.MaxAttempts,
		}
	case ev.Done > h.ev.Done || ev.Phase != h.ev.Phase:
		h.retry = nil
	}
	h.ev = ev
}

// Status reports the download now.
func (h *HubDownloader) Status() DownloadStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	state := h.state
	var retry *DownloadRetry
	if state == DownloadRunning {
		retry = h.retry
	}
	if state == DownloadRunning && h.ev.Phase == hub.Verifying {
		state = DownloadVerifying
	}
	return DownloadStatus{
		State: state, Repo: h.opts.Repo, Revision: h.opts.Revision, Dir: h.dir,
		BytesDone: h.ev.Done, BytesTotal: h.ev.Total, Speed: h.ev.BytesPerSecond, ETASeconds: h.ev.ETA.Seconds(),
		Error: h.err, Retry: retry,
	}
}

// errState says an action does not fit the download's state.
type errState struct{ action, state string }

func (e errState) Error() string {
	return "cannot " + e.action + " a download that is " + e.state
}

// Do takes an action. Pulls run under a background context: the request
// that starts one ends long before the pull does.
func (h *HubDownloader) Do(_ context.Context, a Action) error {
	h.act.Lock()
	defer h.act.Unlock()
	h.mu.Lock()
	state, dl := h.state, h.dl
	h.mu.Unlock()
	refuse := func() error { return errState{string(a), state} }
	switch a {
	case Start:
		if state != DownloadIdle && state != DownloadCancelled && state != DownloadFailed {
			return refuse()
		}
		h.run(func() *hub.Download { return hub.Start(context.Background(), h.opts) })
	case Resume:
		if dl == nil || (state != DownloadPaused && state != DownloadFailed) {
			return refuse()
		}
		h.run(func() *hub.Download { dl.Resume(context.Background()); return dl })
	case Pause:
		if dl == nil || state != DownloadRunning {
			return refuse()
		}
		dl.Pause()
		h.settle(DownloadPaused, nil)
	case Cancel:
		if dl == nil || (state != DownloadRunning && state != DownloadPaused && state != DownloadFailed) {
			return refuse()
		}
		if err := dl.Cancel(); err != nil {
			return err
		}
		h.settle(DownloadCancelled, nil)
		h.mu.Lock()
		h.ev, h.dl = hub.Event{}, nil
		h.mu.Unlock()
	case Verify:
		if state != DownloadDone {
			return refuse()
		}
		h.mu.Lock()
		// No pull is running to pause or cancel while the folder is hashed.
		h.setLocked(DownloadRunning, nil)
		h.ev.Phase, h.dl = hub.Verifying, nil
		h.gen++
		gen := h.gen
		h.mu.Unlock()
		go func() {
			err := hub.Verify(h.dir)
			h.mu.Lock()
			defer h.mu.Unlock()
			if gen != h.gen {
				return
			}
			h.ev.Phase = hub.Done
			if err != nil {
				h.setLocked(DownloadFailed, downloadError(err))
			} else {
				h.setLocked(DownloadDone, nil)
			}
		}()
	case Delete:
		if state == DownloadRunning {
			return refuse()
		}
		if err := hub.Delete(h.dir); err != nil {
			return err
		}
		h.mu.Lock()
		h.setLocked(DownloadIdle, nil)
		h.ev, h.dl = hub.Event{}, nil
		h.gen++
		h.mu.Unlock()
	default:
		return errState{string(a), state}
	}
	return nil
}

// Source is the repository and revision pulls fetch.
func (h *HubDownloader) Source() (repo, revision string) { return h.opts.Repo, h.opts.Revision }

// Pull runs a download as Start does, for a caller that waits for its end
// and reads its progress (Ollama's /api/pull): progress gets each event
// while Pull runs, and the Model screen sees the same download. When ctx
// ends the pull is paused, what is on disk kept, as the Model screen's
// Pause leaves it: a client that hangs up stops the download, and the next
// pull, or Resume, goes on from there. A download already running is not
// taken over: the error is marked [hub.ErrBusy]. A folder a pull finished
// is done at once.
func (h *HubDownloader) Pull(ctx context.Context, progress func(hub.Event)) error {
	h.act.Lock()
	h.mu.Lock()
	state := h.state
	h.mu.Unlock()
	if state == DownloadRunning {
		h.act.Unlock()
		return fmt.Errorf("%w: the model is being downloaded already (Petal's Model screen shows how far)", hub.ErrBusy)
	}
	// The pull's own context, so that its end reads as a pause, not as
	// the caller's cancellation, and a later Resume does not inherit it.
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(hub.ErrPaused) })
	defer stop()
	// The caller hears only of this run: a Resume from the Model screen
	// runs the same download after Pull returned.
	var live atomic.Bool
	live.Store(true)
	defer live.Store(false)
	opts := h.opts
	opts.Progress = func(ev hub.Event) {
		h.progress(ev)
		if live.Load() {
			progress(ev)
		}
	}
	h.run(func() *hub.Download { return hub.Start(pctx, opts) })
	h.mu.Lock()
	dl, gen := h.dl, h.gen
	h.mu.Unlock()
	h.act.Unlock()
	_, err := dl.Wait()
	// Returned once the state says how the run ended, so a pull asked
	// for right after this one is not refused as busy.
	h.mu.Lock()
	for h.gen == gen && h.state == DownloadRunning {
		changed := h.changed
		h.mu.Unlock()
		<-changed
		h.mu.Lock()
	}
	h.mu.Unlock()
	return err
}

// run starts a pull and watches for its end.
func (h *HubDownloader) run(start func() *hub.Download) {
	h.mu.Lock()
	h.setLocked(DownloadRunning, nil)
	h.retry = nil
	h.gen++
	gen := h.gen
	h.mu.Unlock()
	dl := start()
	h.mu.Lock()
	h.dl = dl
	h.mu.Unlock()
	go func() {
		_, err := dl.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		if gen != h.gen {
			return
		}
		switch {
		case err == nil:
			h.setLocked(DownloadDone, nil)
		case errors.Is(err, hub.ErrPaused):
			h.setLocked(DownloadPaused, h.err)
		case errors.Is(err, hub.ErrCanceled):
			h.setLocked(DownloadCancelled, h.err)
		default:
			h.setLocked(DownloadFailed, downloadError(err))
		}
	}()
}

// settle records a state an action reached itself, ending the current run.
func (h *HubDownloader) settle(state string, err *DownloadError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	h.setLocked(state, err)
}

// setLocked moves the download to state with err, and wakes those waiting
// on changed; h.mu is held.
func (h *HubDownloader) setLocked(state string, err *DownloadError) {
	h.state, h.err = state, err
	close(h.changed)
	h.changed = make(chan struct{})
}
