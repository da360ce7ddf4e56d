package hub

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
)

// Phase is the stage a pull is in.
type Phase string

// The phases, in order.
const (
	ListingFiles Phase = "listing"
	Importing    Phase = "importing"
	Downloading  Phase = "downloading"
	Verifying    Phase = "verifying"
	// FetchingTensors: some tensors of another repository (the MTP head)
	// come by range requests after the main files.
	FetchingTensors Phase = "tensors"
	Done            Phase = "done"
)

// Event reports a pull's progress.
type Event struct {
	Phase Phase
	File  string // the file a Importing or Verifying event is about
	// Done of Total bytes are on disk (counting earlier runs).
	Done, Total    int64
	BytesPerSecond float64       // over the last few seconds
	ETA            time.Duration // 0 when unknown
	// Retry is the error a connection is being retried after, if any
	// ([Diagnose] says it in words); RetryAt is when the next attempt, the
	// Attempt-th of at most MaxAttempts, starts.
	Retry                error
	RetryAt              time.Time
	Attempt, MaxAttempts int
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
	mtp, err := mtpSource(o)
	if err != nil {
		return "", err
	}
	if finished(o) && (mtp == nil || hasFile(o.Dir, checkpoint.MTPFile)) {
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
	// Another process may have finished while we waited.
	if !finished(o) {
		if err := checkFree(o.Dir); err != nil {
			return "", err
		}
		p := &puller{o: o, c: o.client(), staging: staging}
		err = p.run(ctx)
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			return "", noSpace(err)
		}
	}
	if mtp != nil {
		if err := pullMTP(ctx, o, mtp); err != nil {
			return "", fmt.Errorf("the model is in %s, its MTP head is not (the model runs without it; pulling again resumes): %w", o.Dir, noSpace(err))
		}
	}
	return o.Dir, nil
}

// noSpace marks a write that found the disk full as [ErrNoSpace], which the
// free-space check before a pull reports too: both mean the same to the user.
func noSpace(err error) error {
	if diskFull(err) && !errors.Is(err, ErrNoSpace) {
		return fmt.Errorf("%w: the disk filled up: %w", ErrNoSpace, err)
	}
	return err
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
	// source is the folder an import takes its files from; replace says
	// the finished folder takes the place of the one at o.Dir.
	source  string
	replace bool

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

	// A shard stored realigned: its original header region is written to
	// head (in the staging folder's heads folder) at the offsets it has in
	// the original; once it is whole, lay places the data and ready closes.
	head  *os.File
	lay   *layout
	ready chan struct{}
}

// write puts b, which the original file holds at off, where it belongs:
// the part file as it is, or for a realigned shard the header region into
// head and the data through the layout.
func (j *job) write(b []byte, off int64) error {
	if j.head == nil {
		_, err := j.part.WriteAt(b, off)
		return err
	}
	n := int64(len(b))
	if j.lay != nil {
		n = max(0, min(n, j.lay.origData-off))
	}
	if n > 0 {
		if _, err := j.head.WriteAt(b[:n], off); err != nil {
			return err
		}
	}
	if n == int64(len(b)) {
		return nil
	}
	return j.lay.place(j.part, b[n:], off+n)
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

// fetchListing asks for the listing, retrying what may pass and saying
// when the next attempt comes: an offline machine hears so at once. With
// Options.QuickOffline, a Hub that is not reached at all is tried
// quickOfflineRetries more times, unreported, before the pull gives up.
func (p *puller) fetchListing(ctx context.Context) (*Listing, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, listingTimeout)
		l, err := fetchListing(actx, p.c, p.o.Endpoint, p.o.Repo, p.o.Revision)
		cancel()
		if err == nil || !isRetryable(err) || ctx.Err() != nil {
			return l, err
		}
		quick := p.o.QuickOffline && notReached(err)
		if attempt > p.o.MaxRetries || quick && attempt > quickOfflineRetries {
			return nil, unreachable(fmt.Errorf("hub: gave up after %d attempts: %w", attempt, err))
		}
		if quick {
			if err := p.sleep(ctx, p.o.RetryBase); err != nil {
				return nil, err
			}
			continue
		}
		if err := p.retryAfter(ctx, Event{Phase: ListingFiles}, err, attempt); err != nil {
			return nil, err
		}
	}
}

// retryAfter reports ev as retrying after err and waits out the backoff
// before attempt+1.
func (p *puller) retryAfter(ctx context.Context, ev Event, err error, attempt int) error {
	d := p.backoff(attempt)
	ev.Retry, ev.RetryAt = err, time.Now().Add(d)
	ev.Attempt, ev.MaxAttempts = attempt+1, p.o.MaxRetries+1
	p.emit(ev)
	return p.sleep(ctx, d)
}

// checkVerified forgets verified files that are no longer there whole.
func (p *puller) checkVerified() error {
	for _, f := range p.listing.Files {
		fs := p.st.Files[f.Name]
		if fs == nil || !fs.Verified {
			continue
		}
		size := f.Size
		if fs.Stored != 0 {
			size = fs.Stored
			if _, err := p.root.Stat(headPath(f.Name)); err != nil {
				delete(p.st.Files, f.Name)
				continue
			}
		}
		if info, err := p.root.Stat(filepath.FromSlash(f.Name)); err != nil || info.Size() != size || !info.Mode().IsRegular() {
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
	// A task is chunk i of j, or with i < 0 j's header region, which a
	// realigned shard needs before its data can be placed.
	type task struct {
		j *job
		i int
	}
	var heads, chunks []task
	for _, f := range p.listing.Files {
		if fs := p.st.Files[f.Name]; fs != nil && fs.Verified {
			continue
		}
		j, err := p.open(f)
		if err != nil {
			p.closeParts()
			return err
		}
		p.jobs = append(p.jobs, j)
		if j.head != nil && j.lay == nil {
			heads = append(heads, task{j, -1})
		}
		for i := range j.progress {
			chunks = append(chunks, task{j, i})
		}
	}
	defer p.closeParts()
	// Headers go first: a worker that takes a chunk of a shard whose header
	// is still coming waits for it, and the header is always taken before.
	queue := make(chan task, len(heads)+len(chunks))
	for _, t := range append(heads, chunks...) {
		queue <- t
	}
	close(queue)
	var wg sync.WaitGroup
	for range p.o.Parallel {
		wg.Go(func() {
			for t := range queue {
				if ctx.Err() != nil {
					return
				}
				var err error
				if t.i < 0 {
					err = p.fetchHead(ctx, t.j)
				} else {
					select {
					case <-t.j.ready:
						err = p.fetchChunk(ctx, t.j, t.i)
					case <-ctx.Done():
						return
					}
					if err == nil && t.j.left.Add(-1) == 0 {
						err = p.verifyPart(t.j)
					}
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
	// What is on disk now, for a pull that stopped before a report.
	p.emit(Event{Phase: Downloading, Done: p.doneLocked(), Total: p.total})
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

// open prepares f's part file and its chunk progress; for
// a realigned shard, its header file and, if the header is whole, its
// layout and part file.
func (p *puller) open(f File) (*job, error) {
	fs := p.st.Files[f.Name]
	n := chunkCount(f.Size, p.st.ChunkBytes)
	if fs == nil {
		fs = &fileState{Size: f.Size, Chunks: make([]int64, n)}
	}
	j := &job{f: f, fs: fs, progress: make([]atomic.Int64, n), ready: make(chan struct{})}
	if err := p.mkdirFor(f.Name); err != nil {
		return nil, err
	}
	if realigns(f) {
		if err := p.openRealigned(j); err != nil {
			return nil, err
		}
	} else {
		close(j.ready)
		part, err := p.root.OpenFile(filepath.FromSlash(f.Name)+partSuffix, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("hub: %s: %w", f.Name, err)
		}
		j.part = part
		// The part grows as bytes arrive, never to the listing's size ahead
		// of them: a listing that overstates a file must not leave a sparse
		// file of that size behind.
		info, err := part.Stat()
		if err != nil {
			part.Close()
			return nil, fmt.Errorf("hub: %s: %w", f.Name, err)
		}
		if info.Size() < writtenEnd(fs.Chunks, p.st.ChunkBytes) {
			// A part shorter than the state says was cut: start it over.
			clear(fs.Chunks)
		}
		if info.Size() > f.Size {
			if err := part.Truncate(f.Size); err != nil {
				part.Close()
				return nil, fmt.Errorf("hub: %s: %w", f.Name, err)
			}
		}
	}
	p.mu.Lock()
	p.st.Files[f.Name] = fs
	p.mu.Unlock()
	for i, c := range fs.Chunks {
		j.progress[i].Store(c)
	}
	j.left.Store(n)
	return j, nil
}

// writtenEnd is the file offset the state's chunk progress reaches.
func writtenEnd(chunks []int64, chunk int64) int64 {
	var end int64
	for i, c := range chunks {
		if c > 0 {
			end = max(end, int64(i)*chunk+c)
		}
	}
	return end
}

// mkdirFor makes the staging folder's folder a listed file goes in.
func (p *puller) mkdirFor(name string) error {
	if dir := path.Dir(name); dir != "." {
		return p.root.MkdirAll(filepath.FromSlash(dir), 0o755)
	}
	return nil
}

// headPath is where a realigned shard's original header region is kept in
// the staging folder; listed names cannot start with Petal's prefix.
func headPath(name string) string {
	return filepath.Join(headsDir, filepath.FromSlash(name))
}

// openRealigned opens j's header file and, when the state says the header
// is on disk, plans the layout from it and opens the part file. Anything
// that disagrees with the state starts the file over.
func (p *puller) openRealigned(j *job) error {
	hp := headPath(j.f.Name)
	if err := p.root.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return err
	}
	head, err := p.root.OpenFile(hp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", j.f.Name, err)
	}
	j.head = head
	lay, ok := p.resumeLayout(j)
	if !ok {
		clear(j.fs.Chunks)
		p.root.Remove(filepath.FromSlash(j.f.Name) + partSuffix)
		return nil
	}
	if lay == nil {
		return nil
	}
	return p.setLayout(j, lay)
}

// resumeLayout reads what the state says is on disk of j's header region:
// the layout if all of it is (nil while it is not), false if the files do
// not hold what the state claims.
func (p *puller) resumeLayout(j *job) (*layout, bool) {
	have := prefixDone(j.fs.Chunks, p.st.ChunkBytes, j.f.Size)
	info, err := j.head.Stat()
	if err != nil {
		return nil, false
	}
	if have < lenPrefix {
		return nil, info.Size() >= have
	}
	end, err := headEnd(j.head, j.f.Size)
	if err != nil {
		return nil, false
	}
	if have < end {
		return nil, info.Size() >= have
	}
	region := make([]byte, end)
	if _, err := j.head.ReadAt(region, 0); err != nil {
		return nil, false
	}
	lay, err := planLayout(region, j.f.Size)
	if err != nil {
		return nil, false
	}
	if have > end { // data was placed: the part must be there whole
		info, err := p.root.Stat(filepath.FromSlash(j.f.Name) + partSuffix)
		if err != nil || info.Size() != lay.size {
			return nil, false
		}
	}
	return lay, true
}

// prefixDone is how many bytes from the file's start are on disk without
// a gap, by the chunks' progress.
func prefixDone(chunks []int64, chunk, size int64) int64 {
	var n int64
	for i, c := range chunks {
		n += c
		if c < chunkLen(size, chunk, i) {
			break
		}
	}
	return n
}

// headEnd reads the header length a safetensors file opens with and
// returns where its data section starts.
func headEnd(r io.ReaderAt, size int64) (int64, error) {
	var b [lenPrefix]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(b[:])
	if n > safetensors.MaxHeaderSize || lenPrefix+int64(n) > size {
		return 0, fmt.Errorf("%w: header length %d in a file of %d bytes", safetensors.ErrCorrupt, n, size)
	}
	return lenPrefix + int64(n), nil
}

// fetchHead brings j's header region onto disk, in two requests (the
// length, then the rest), and plans its layout.
func (p *puller) fetchHead(ctx context.Context, j *job) error {
	if err := p.fetchPrefix(ctx, j, lenPrefix); err != nil {
		return err
	}
	end, err := headEnd(j.head, j.f.Size)
	if err != nil {
		return p.badHead(j, err)
	}
	if err := p.fetchPrefix(ctx, j, end); err != nil {
		return err
	}
	region := make([]byte, end)
	if _, err := j.head.ReadAt(region, 0); err != nil {
		return err
	}
	lay, err := planLayout(region, j.f.Size)
	if err != nil {
		return p.badHead(j, err)
	}
	return p.setLayout(j, lay)
}

// fetchPrefix brings j's bytes [0, end) onto disk, chunk by chunk.
func (p *puller) fetchPrefix(ctx context.Context, j *job, end int64) error {
	for i := range j.progress {
		start := int64(i) * p.st.ChunkBytes
		if start >= end {
			break
		}
		if err := p.fetchRange(ctx, j, i, min(end, start+chunkLen(j.f.Size, p.st.ChunkBytes, i))); err != nil {
			return err
		}
	}
	return nil
}

// badHead throws away a shard whose header does not parse: the bytes may
// have been damaged on the way, and the hash cannot be checked without a
// layout to store the rest by.
func (p *puller) badHead(j *job, cause error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.root.Remove(headPath(j.f.Name))
	delete(p.st.Files, j.f.Name)
	p.saveStateLocked()
	return fmt.Errorf("%w: %s: its safetensors header does not parse (%w); discarded, pulling again fetches it anew", ErrChecksum, j.f.Name, cause)
}

// setLayout opens j's part file at the stored size, writes the stored
// header region and lets the chunks of j be placed.
func (p *puller) setLayout(j *job, lay *layout) error {
	part, err := p.root.OpenFile(filepath.FromSlash(j.f.Name)+partSuffix, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", j.f.Name, err)
	}
	if info, err := part.Stat(); err != nil || info.Size() != lay.size {
		if err := part.Truncate(lay.size); err != nil {
			part.Close()
			return fmt.Errorf("hub: %s: %w", j.f.Name, err)
		}
	}
	if _, err := part.WriteAt(lay.head, 0); err != nil {
		part.Close()
		return fmt.Errorf("hub: writing %s: %w", j.f.Name, err)
	}
	p.mu.Lock()
	j.part, j.lay = part, lay
	p.mu.Unlock()
	close(j.ready)
	return nil
}

func (p *puller) closeParts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range p.jobs {
		j.closeFiles()
	}
}

// closeFiles closes j's part and header files; p.mu held.
func (j *job) closeFiles() {
	for _, f := range []**os.File{&j.part, &j.head} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

// verifyPart hashes a finished part file and, if it is right, gives it
// its final name. A wrong file is thrown away, so the next pull fetches
// it anew. A realigned shard is checked against the Hub's hash over the
// original's bytes: its original header region, then its data read from
// the part in the original's order.
func (p *puller) verifyPart(j *job) error {
	p.emit(Event{Phase: Verifying, File: j.f.Name, Done: p.doneLocked(), Total: p.total})
	name := filepath.FromSlash(j.f.Name)
	if err := j.part.Sync(); err != nil {
		return err
	}
	var ok bool
	var err error
	if lay := j.lay; lay != nil && !lay.verbatim {
		if err := j.head.Sync(); err != nil {
			return err
		}
		ok, err = checkRealigned(j.part, lay.size, lay.origHead, headSum(lay.head), j.f)
	} else {
		ok, err = verify(io.NewSectionReader(j.part, 0, j.f.Size), j.f)
	}
	if err != nil {
		return fmt.Errorf("hub: hashing %s: %w", j.f.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	realigned := j.lay != nil && !j.lay.verbatim
	j.closeFiles()
	if !ok {
		p.root.Remove(name + partSuffix)
		p.root.Remove(headPath(j.f.Name))
		delete(p.st.Files, j.f.Name)
		return fmt.Errorf("%w: %s (discarded; pulling again fetches it anew)", ErrChecksum, j.f.Name)
	}
	if err := p.root.Rename(name+partSuffix, name); err != nil {
		return err
	}
	j.fs.Verified, j.fs.Chunks = true, nil
	if realigned {
		j.fs.Stored = j.lay.size
	} else if j.lay != nil {
		p.root.Remove(headPath(j.f.Name))
	}
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
		for _, f := range []*os.File{j.part, j.head} {
			if f != nil {
				if err := f.Sync(); err != nil {
					return fmt.Errorf("hub: %s: %w", j.f.Name, err)
				}
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
			return fmt.Errorf("hub: %s: every file is hashed, but it is not a checkpoint Petal can load: %w", p.what(), err)
		}
		m.Close()
	}
	m := manifest{Repo: p.o.Repo, Revision: p.o.Revision, SHA: p.listing.SHA, Files: p.listing.Files, Source: p.source}
	if err := p.collectRealigned(&m); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(p.staging, manifestName), data); err != nil {
		return err
	}
	if err := p.root.Remove(stateName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(filepath.Join(p.staging, headsDir)); err != nil {
		return err
	}
	if p.replace {
		err = p.replaceDir()
	} else if err = removeEmptyDir(p.o.Dir); err == nil {
		err = os.Rename(p.staging, p.o.Dir)
	}
	if err != nil {
		return err
	}
	p.emit(Event{Phase: Done, Done: p.total, Total: p.total})
	return nil
}

// what names what is being stored, for messages.
func (p *puller) what() string {
	if p.source != "" {
		return p.source
	}
	return p.o.Repo + "@" + p.listing.SHA
}

// collectRealigned records in m the shards stored realigned: their
// original header regions, kept in the heads folder, and the stored
// files' sizes and header hashes.
func (p *puller) collectRealigned(m *manifest) error {
	for _, f := range p.listing.Files {
		fs := p.st.Files[f.Name]
		if fs == nil || fs.Stored == 0 {
			continue
		}
		orig, err := p.root.ReadFile(headPath(f.Name))
		if err != nil {
			return err
		}
		stored, err := p.root.Open(filepath.FromSlash(f.Name))
		if err != nil {
			return err
		}
		head, err := readHeadRegion(stored, fs.Stored)
		stored.Close()
		if err != nil {
			return fmt.Errorf("hub: %s: %w", f.Name, err)
		}
		if m.Realigned == nil {
			m.Realigned = map[string]realignedFile{}
		}
		m.Realigned[f.Name] = realignedFile{Size: fs.Stored, HeaderSHA256: headSum(head), OriginalHeader: orig}
	}
	return nil
}

// replaceDir puts the finished staging folder in the place of o.Dir,
// whose files it links where they were kept.
func (p *puller) replaceDir() error {
	parent, base := filepath.Split(p.o.Dir)
	old := filepath.Join(parent, petalPrefix+base+".replaced")
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(p.o.Dir, old); err != nil {
		return err
	}
	if err := os.Rename(p.staging, p.o.Dir); err != nil {
		os.Rename(old, p.o.Dir)
		return err
	}
	return os.RemoveAll(old)
}

// checkFree refuses a model folder that holds something; an empty folder
// is taken, as if absent.
func checkFree(dir string) error {
	info, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.IsDir() {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: %s (delete it or pull into another folder)", ErrExists, dir)
}

// removeEmptyDir clears the way for renaming a finished staging folder to
// dir, which may be an empty folder the user made.
func removeEmptyDir(dir string) error {
	if err := checkFree(dir); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s: %w", ErrExists, dir, err)
	}
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

// backoff is the wait after attempt (1-based) failed: RetryBase doubled
// per attempt, at most maxRetryWait.
func (p *puller) backoff(attempt int) time.Duration {
	return min(p.o.RetryBase<<min(attempt-1, maxBackoffDoublings), maxRetryWait)
}

func (p *puller) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
