package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"petal/engine/checkpoint"
)

// Phase is the stage a pull is in.
type Phase string

// The phases, in order.
const (
	ListingFiles Phase = "listing"
	Importing    Phase = "importing"
	Downloading  Phase = "downloading"
	Verifying    Phase = "verifying"
	Done         Phase = "done"
)

// Event reports a pull's progress.
type Event struct {
	Phase Phase
	File  string // the file a Importing or Verifying event is about
	// Done of Total bytes are on disk (counting earlier runs).
	Done, Total    int64
	BytesPerSecond float64       // over the last few seconds
	ETA            time.Duration // 0 when unknown
	// Retry is the error a connection is being retried after, if any.
	Retry error
}

// Pull brings opts.Repo at opts.Revision into opts.Dir and returns the
// folder. A folder that a pull finished for the same revision is returned
// as it is. Cancelling ctx stops the pull with its cause (see
// context.WithCancelCause), keeping what is on disk for the next one.
func Pull(ctx context.Context, opts Options) (string, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	if finished(o) {
		return o.Dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(o.Dir), 0o755); err != nil {
		return "", err
	}
	staging, lockPath := stagingPaths(o.Dir)
	unlock, err := lock(lockPath)
	if err != nil {
		return "", err
	}
	defer unlock()
	if finished(o) { // another process may have finished while we waited
		return o.Dir, nil
	}
	if _, err := os.Lstat(o.Dir); err == nil {
		return "", fmt.Errorf("%w: %s (delete it or pull into another folder)", ErrExists, o.Dir)
	}
	p := &puller{o: o, c: o.client(), staging: staging}
	err = p.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return "", err
	}
	return o.Dir, nil
}

// finished reports whether o.Dir holds a finished pull of o's revision.
func finished(o Options) bool {
	m, err := readManifest(o.Dir)
	return err == nil && m.Repo == o.Repo && (m.Revision == o.Revision || m.SHA == o.Revision)
}

// puller is one run of a pull.
type puller struct {
	o       Options
	c       *http.Client
	staging string
	root    *os.Root
	listing *Listing

	mu    sync.Mutex // guards st, jobs' parts, events
	st    *state
	jobs  []*job
	total int64

	fetched atomic.Int64 // bytes fetched in this run

	emitMu sync.Mutex // one event at a time
}

// job is one file being downloaded.
type job struct {
	f        File
	fs       *fileState
	part     *os.File
	progress []atomic.Int64 // bytes on disk from each chunk's start
	left     atomic.Int64   // chunks not finished
}

func (p *puller) run(ctx context.Context) error {
	p.emit(Event{Phase: ListingFiles})
	l, err := p.fetchListing(ctx)
	if err != nil {
		return err
	}
	p.listing, p.total = l, l.Total()
	p.st = loadState(p.staging, l)
	if p.st == nil {
		// Nothing here can be trusted for this revision: start clean.
		if err := os.RemoveAll(p.staging); err != nil {
			return err
		}
		p.st = &state{Repo: l.Repo, SHA: l.SHA, ChunkBytes: p.o.ChunkBytes, Files: map[string]*fileState{}}
	}
	if err := os.MkdirAll(p.staging, 0o755); err != nil {
		return err
	}
	if p.root, err = os.OpenRoot(p.staging); err != nil {
		return err
	}
	defer p.root.Close()
	if err := p.checkVerified(); err != nil {
		return err
	}
	if err := p.importCache(ctx); err != nil {
		return err
	}
	if err := p.download(ctx); err != nil {
		return err
	}
	return p.finish()
}

// fetchListing asks for the listing, retrying what may pass.
func (p *puller) fetchListing(ctx context.Context) (*Listing, error) {
	for attempt := 1; ; attempt++ {
		l, err := fetchListing(ctx, p.c, p.o.Endpoint, p.o.Repo, p.o.Revision)
		if err == nil || !isRetryable(err) || attempt > p.o.MaxRetries || ctx.Err() != nil {
			return l, err
		}
		if err := p.sleep(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// checkVerified forgets verified files that are no longer there whole.
func (p *puller) checkVerified() error {
	for _, f := range p.listing.Files {
		fs := p.st.Files[f.Name]
		if fs == nil || !fs.Verified {
			continue
		}
		if info, err := p.root.Stat(filepath.FromSlash(f.Name)); err != nil || info.Size() != f.Size || !info.Mode().IsRegular() {
			delete(p.st.Files, f.Name)
		}
	}
	return p.saveState()
}

// doneBytes counts the bytes on disk: verified files and written chunks.
func (p *puller) doneBytes() int64 {
	var n int64
	for _, f := range p.listing.Files {
		fs := p.st.Files[f.Name]
		if fs == nil {
			continue
		}
		if fs.Verified {
			n += f.Size
			continue
		}
		for _, c := range fs.Chunks {
			n += c
		}
	}
	return n
}

// download fetches every file not verified yet.
func (p *puller) download(ctx context.Context) error {
	need := p.total - p.doneBytes()
	if need == 0 && p.allVerified() {
		return nil
	}
	free, err := p.o.FreeSpace(p.staging)
	if err != nil {
		return err
	}
	if free < need+DiskMargin {
		return fmt.Errorf("%w: %s needs %.2f GB more (and %.2f GB to spare); %.2f GB are free",
			ErrNoSpace, p.o.Dir, float64(need)/1e9, float64(DiskMargin)/1e9, float64(free)/1e9)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type chunk struct {
		j *job
		i int
	}
	var chunks []chunk
	for _, f := range p.listing.Files {
		if fs := p.st.Files[f.Name]; fs != nil && fs.Verified {
			continue
		}
		j, err := p.open(f)
		if err != nil {
			return err
		}
		p.jobs = append(p.jobs, j)
		for i := range j.progress {
			chunks = append(chunks, chunk{j, i})
		}
	}
	defer p.closeParts()
	queue := make(chan chunk, len(chunks))
	for _, c := range chunks {
		queue <- c
	}
	close(queue)
	var wg sync.WaitGroup
	for range p.o.Parallel {
		wg.Go(func() {
			for c := range queue {
				if ctx.Err() != nil {
					return
				}
				err := p.fetchChunk(ctx, c.j, c.i)
				if err == nil && c.j.left.Add(-1) == 0 {
					err = p.verifyPart(c.j)
				}
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		p.report(ctx)
	}()
	wg.Wait()
	cancel(nil)
	<-reported
	saveErr := p.saveState()
	// The workers' first error, or the caller's cause; a plain cancel is
	// what ended the reporter after the workers were done.
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	if saveErr != nil {
		return saveErr
	}
	if !p.allVerified() {
		return errors.New("hub: download stopped before every file was verified")
	}
	return nil
}

func (p *puller) allVerified() bool {
	for _, f := range p.listing.Files {
		if fs := p.st.Files[f.Name]; fs == nil || !fs.Verified {
			return false
		}
	}
	return true
}

// open prepares f's part file at full length and its chunk progress.
func (p *puller) open(f File) (*job, error) {
	fs := p.st.Files[f.Name]
	n := chunkCount(f.Size, p.st.ChunkBytes)
	if fs == nil {
		fs = &fileState{Size: f.Size, Chunks: make([]int64, n)}
	}
	name := filepath.FromSlash(f.Name) + partSuffix
	if dir := path.Dir(f.Name); dir != "." {
		if err := p.root.MkdirAll(filepath.FromSlash(dir), 0o755); err != nil {
			return nil, err
		}
	}
	part, err := p.root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hub: %s: %w", f.Name, err)
	}
	if info, err := part.Stat(); err != nil || info.Size() != f.Size {
		if info != nil && info.Size() < f.Size {
			// A part shorter than the state says was cut: start it over.
			clear(fs.Chunks)
		}
		if err := part.Truncate(f.Size); err != nil {
			part.Close()
			return nil, fmt.Errorf("hub: %s: %w", f.Name, err)
		}
	}
	p.mu.Lock()
	p.st.Files[f.Name] = fs
	p.mu.Unlock()
	j := &job{f: f, fs: fs, part: part, progress: make([]atomic.Int64, n)}
	for i, c := range fs.Chunks {
		j.progress[i].Store(c)
	}
	j.left.Store(n)
	return j, nil
}

func (p *puller) closeParts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range p.jobs {
		if j.part != nil {
			j.part.Close()
			j.part = nil
		}
	}
}

// verifyPart hashes a finished part file and, if it is right, gives it
// its final name. A wrong file is thrown away, so the next pull fetches
// it anew.
func (p *puller) verifyPart(j *job) error {
	p.emit(Event{Phase: Verifying, File: j.f.Name, Done: p.doneLocked(), Total: p.total})
	name := filepath.FromSlash(j.f.Name)
	if err := j.part.Sync(); err != nil {
		return err
	}
	if _, err := j.part.Seek(0, 0); err != nil {
		return err
	}
	ok, err := verify(j.part, j.f)
	if err != nil {
		return fmt.Errorf("hub: hashing %s: %w", j.f.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	j.part.Close()
	j.part = nil
	if !ok {
		p.root.Remove(name + partSuffix)
		delete(p.st.Files, j.f.Name)
		return fmt.Errorf("%w: %s (discarded; pulling again fetches it anew)", ErrChecksum, j.f.Name)
	}
	if err := p.root.Rename(name+partSuffix, name); err != nil {
		return err
	}
	j.fs.Verified, j.fs.Chunks = true, nil
	return p.saveStateLocked()
}

// doneLocked is doneBytes under the lock, with live chunk progress.
func (p *puller) doneLocked() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.liveDone()
}

// liveDone counts verified files and the chunks' live progress; p.mu held.
func (p *puller) liveDone() int64 {
	var n int64
	for _, f := range p.listing.Files {
		if fs := p.st.Files[f.Name]; fs != nil && fs.Verified {
			n += f.Size
		}
	}
	for _, j := range p.jobs {
		if j.fs.Verified {
			continue
		}
		for i := range j.progress {
			n += j.progress[i].Load()
		}
	}
	return n
}

// report saves the resume state and emits progress until ctx ends.
func (p *puller) report(ctx context.Context) {
	type sample struct {
		t time.Time
		n int64
	}
	var samples []sample
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			p.saveState()
			n := p.fetched.Load()
			samples = append(samples, sample{now, n})
			for len(samples) > 1 && now.Sub(samples[0].t) > speedWindow {
				samples = samples[1:]
			}
			ev := Event{Phase: Downloading, Done: p.doneLocked(), Total: p.total}
			if dt := now.Sub(samples[0].t).Seconds(); dt > 0 {
				ev.BytesPerSecond = float64(n-samples[0].n) / dt
			}
			if ev.BytesPerSecond > 0 {
				ev.ETA = time.Duration(float64(ev.Total-ev.Done) / ev.BytesPerSecond * float64(time.Second))
			}
			p.emit(ev)
		}
	}
}

// saveState writes the resume state. Chunk progress is read before the
// part files are synced, so the state never claims bytes that a crash
// could lose.
func (p *puller) saveState() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.saveStateLocked()
}

func (p *puller) saveStateLocked() error {
	for _, j := range p.jobs {
		if j.fs.Verified {
			continue
		}
		for i := range j.progress {
			j.fs.Chunks[i] = j.progress[i].Load()
		}
	}
	for _, j := range p.jobs {
		if j.part != nil {
			if err := j.part.Sync(); err != nil {
				return fmt.Errorf("hub: %s: %w", j.f.Name, err)
			}
		}
	}
	data, err := json.Marshal(p.st)
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(p.staging, stateName), data)
}

// finish checks the whole checkpoint, writes the manifest and moves the
// staging folder into place.
func (p *puller) finish() error {
	p.emit(Event{Phase: Verifying, Done: p.total, Total: p.total})
	if _, err := p.root.Stat("config.json"); err == nil {
		m, err := checkpoint.Open(p.staging)
		if err != nil {
			return fmt.Errorf("hub: %s@%s downloaded and hashed, but it is not a checkpoint Petal can load: %w", p.o.Repo, p.listing.SHA, err)
		}
		m.Close()
	}
	data, err := json.MarshalIndent(manifest{Repo: p.o.Repo, Revision: p.o.Revision, SHA: p.listing.SHA, Files: p.listing.Files}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(p.staging, manifestName), data); err != nil {
		return err
	}
	if err := p.root.Remove(stateName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(p.staging, p.o.Dir); err != nil {
		return err
	}
	p.emit(Event{Phase: Done, Done: p.total, Total: p.total})
	return nil
}

func (p *puller) emit(ev Event) {
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	if p.o.Progress != nil {
		p.o.Progress(ev)
	}
}

// maxBackoffDoublings bounds the shift in sleep, so that a high attempt
// count cannot overflow the duration before maxRetryWait caps it.
const maxBackoffDoublings = 20

// sleep waits out the backoff before attempt (1-based): RetryBase doubled
// per attempt, at most maxRetryWait.
func (p *puller) sleep(ctx context.Context, attempt int) error {
	d := p.o.RetryBase << min(attempt-1, maxBackoffDoublings)
	d = min(d, maxRetryWait)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
