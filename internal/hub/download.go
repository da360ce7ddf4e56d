package hub

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Download is a pull running in the background that can be paused,
// resumed and cancelled: the handle the app's setup screen holds.
type Download struct {
	opts Options

	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{}
	dir    string
	err    error
}

// Start begins pulling opts in the background.
func Start(ctx context.Context, opts Options) *Download {
	d := &Download{opts: opts}
	d.start(ctx)
	return d
}

func (d *Download) start(ctx context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	d.mu.Lock()
	d.cancel, d.done, d.dir, d.err = cancel, done, "", nil
	d.mu.Unlock()
	go func() {
		dir, err := Pull(ctx, d.opts)
		d.mu.Lock()
		d.dir, d.err = dir, err
		d.mu.Unlock()
		cancel(nil)
		close(done)
	}()
}

// Wait blocks until the pull ends and returns the model folder, or why it
// ended ([ErrPaused] after Pause).
func (d *Download) Wait() (string, error) {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	<-done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dir, d.err
}

// Pause stops the pull, keeping what is on disk.
func (d *Download) Pause() {
	d.stop(ErrPaused)
}

// Resume starts a stopped pull again (after Pause or a failure); it does
// nothing while the pull runs.
func (d *Download) Resume(ctx context.Context) {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	select {
	case <-done:
		d.start(ctx)
	default:
	}
}

// Cancel stops the pull and removes what it wrote.
func (d *Download) Cancel() error {
	d.stop(ErrCanceled)
	return Discard(d.opts)
}

func (d *Download) stop(cause error) {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	cancel(cause)
	<-done
}

// Discard removes the unfinished pull into opts' folder: its staging
// folder and lock file. A finished model folder is left alone.
func Discard(opts Options) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	staging, lockPath := stagingPaths(o.Dir)
	unlock, err := lock(lockPath)
	if err != nil {
		return err
	}
	defer unlock()
	if err := removeTensorStagings(o.Dir); err != nil {
		return err
	}
	return os.RemoveAll(staging)
}

// Delete removes a model folder that a pull finished, and any unfinished
// pull into it. It refuses a folder without a pull's manifest, so a
// mistaken path cannot delete anything else.
func Delete(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := readManifest(dir); err != nil {
		return fmt.Errorf("%w: %s is not a model folder Petal pulled: %w", ErrInput, dir, err)
	}
	staging, lockPath := stagingPaths(dir)
	unlock, err := lock(lockPath)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := removeTensorStagings(dir); err != nil {
		return err
	}
	return os.RemoveAll(staging)
}
