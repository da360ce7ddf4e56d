package prefixdisk

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits and defaults of a Store.
const (
	// QueueDepth is how many snapshots may wait to be written; one more is
	// dropped, as each holds a copy of a sequence's state in memory.
	QueueDepth = 2
	// MaxBudget caps the default budget.
	MaxBudget = 20e9
	// FreeShare is the part of the free disk the default budget takes.
	FreeShare = 0.10
	// fallbackBudget is the default where the free space is unknown.
	fallbackBudget = 2e9
	// StaleTemp is how old a temporary file must be before a Store removes
	// it (when it opens and after each write): a younger one may be another
	// process's write in progress.
	StaleTemp = 15 * time.Minute
	dirPerm   = 0o700
)

// DefaultDir is petal/prefix in the user's cache folder (as the demo
// model's and the kernels' caches, os.UserCacheDir: $XDG_CACHE_HOME or
// ~/.cache, ~/Library/Caches on a Mac); "" when there is none.
func DefaultDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "petal", "prefix")
}

// DefaultBudget is FreeShare of the free space where dir is (or would be),
// at most MaxBudget.
func DefaultBudget(dir string) int64 {
	for d := dir; ; d = filepath.Dir(d) {
		if free, err := freeBytes(d); err == nil {
			return min(int64(float64(free)*FreeShare), MaxBudget)
		}
		if d == filepath.Dir(d) {
			return fallbackBudget
		}
	}
}

// Logf receives the Store's log lines.
type Logf func(format string, args ...any)

// Store is a folder of snapshots within a byte budget.
type Store struct {
	dir    string
	budget int64
	logf   Logf
	queue  chan job
	done   chan struct{}

	mu     sync.Mutex
	closed bool
	off    atomic.Bool // after a full disk

	hits, misses, writes, dropped, rejected atomic.Int64
	loadNanos, hitTokens                    atomic.Int64
}

// job is one snapshot to write; release frees what write reads from.
type job struct {
	model   ModelID
	tokens  []int
	write   func(io.Writer) error
	release func()
}

// Open opens (creating it 0700) the folder dir with a budget in bytes,
// removes stale temporary files and starts the writer. Close stops it.
func Open(dir string, budget int64, logf Logf) (*Store, error) {
	if budget <= 0 {
		return nil, fmt.Errorf("prefixdisk: a budget of %d bytes", budget)
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("prefixdisk: %w", err)
	}
	// MkdirAll leaves an existing folder as it was; the snapshots hold the
	// user's prompts.
	if err := os.Chmod(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("prefixdisk: %w", err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &Store{dir: dir, budget: budget, logf: logf, queue: make(chan job, QueueDepth), done: make(chan struct{})}
	s.removeStaleTemps(time.Now())
	go s.writer()
	return s, nil
}

// Dir is the Store's folder.
func (s *Store) Dir() string { return s.dir }

// Budget is the Store's byte budget.
func (s *Store) Budget() int64 { return s.budget }

// Close writes the snapshots queued and stops the writer.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	return nil
}

// On reports whether the Store still takes snapshots (a full disk turns it
// off).
func (s *Store) On() bool { return !s.off.Load() }

// Has reports whether a snapshot of model after tokens is on disk.
func (s *Store) Has(model ModelID, tokens []int) bool {
	_, err := os.Stat(filepath.Join(s.dir, fileName(model, tokens)))
	return err == nil
}

// Room reports whether Save would queue a snapshot now, so a caller can
// skip copying a state that would be dropped.
func (s *Store) Room() bool { return s.On() && len(s.queue) < cap(s.queue) }

// Save queues the snapshot of model after tokens, written by write, and
// calls release once it is written or dropped. It never waits: with the
// queue full, the Store closed or off, the snapshot is dropped and Save
// reports false.
func (s *Store) Save(model ModelID, tokens []int, write func(io.Writer) error, release func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.off.Load() || len(tokens) == 0 || len(tokens) > MaxTokens {
		release()
		return false
	}
	select {
	case s.queue <- job{model: model, tokens: slices.Clone(tokens), write: write, release: release}:
		return true
	default:
		s.dropped.Add(1)
		release()
		return false
	}
}

func (s *Store) writer() {
	defer close(s.done)
	for j := range s.queue {
		if !s.off.Load() {
			s.writeJob(j)
		}
		j.release()
	}
}

func (s *Store) writeJob(j job) {
	path := filepath.Join(s.dir, fileName(j.model, j.tokens))
	if _, err := os.Stat(path); err == nil {
		touch(path)
		return
	}
	err := s.writeFile(path, j)
	switch {
	case err == nil:
		s.writes.Add(1)
		s.evict()
	case isDiskFull(err):
		s.off.Store(true)
		s.logf("prefix cache on disk: turned off, the disk is full (%v)", err)
	default:
		s.logf("prefix cache on disk: %v", err)
	}
}

// writeFile writes j to a temporary file beside path, synced, then renames
// it to path: a reader sees the whole file or none.
func (s *Store) writeFile(path string, j job) (err error) {
	f, err := os.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(make([]byte, headerBytes)); err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	w := &countWriter{w: io.MultiWriter(f, crc)}
	if _, err = w.Write(encodeTokens(j.tokens)); err != nil {
		return err
	}
	tokenBytes := w.n
	if err = j.write(w); err != nil {
		return err
	}
	h := header{version: FormatVersion, model: j.model, tokens: uint32(len(j.tokens)), crc: crc.Sum32(), payload: uint64(w.n - tokenBytes)}
	if _, err = f.WriteAt(h.encode(), 0); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the folder is synced; before, a
	// power cut may lose the snapshot (never corrupt it: its contents are
	// synced). Best effort, as the file is whole whatever this says, and
	// some file systems refuse to sync a folder.
	syncDir(s.dir)
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// touch marks a file as just used, for eviction.
func touch(path string) {
	now := time.Now()
	os.Chtimes(path, now, now)
}

// Entry is one snapshot file.
type Entry struct {
	Name string
	// Model is the short form of the model identity the name carries.
	Model  string
	Tokens int
	Bytes  int64
	Used   time.Time
}

// List returns the snapshots in dir, the most recently used first; a
// missing folder holds none.
func List(dir string) ([]Entry, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prefixdisk: %w", err)
	}
	var out []Entry
	for _, de := range des {
		model, n, ok := parseName(de.Name())
		if !ok || !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed by another process since the listing
		}
		out = append(out, Entry{Name: de.Name(), Model: model, Tokens: n, Bytes: info.Size(), Used: info.ModTime()})
	}
	slices.SortFunc(out, func(a, b Entry) int { return b.Used.Compare(a.Used) })
	return out, nil
}

// Clear removes every snapshot and temporary file in dir and reports how
// many files and bytes went.
func Clear(dir string) (files int, bytes int64, err error) {
	entries, err := List(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name)); err == nil {
			files++
			bytes += e.Bytes
		} else if !errors.Is(err, fs.ErrNotExist) {
			return files, bytes, fmt.Errorf("prefixdisk: %w", err)
		}
	}
	removeTemps(dir, time.Now(), 0)
	return files, bytes, nil
}

// Usage is the files and bytes in the Store's folder.
func (s *Store) Usage() (files int, bytes int64) {
	entries, _ := List(s.dir)
	for _, e := range entries {
		bytes += e.Bytes
	}
	return len(entries), bytes
}

// Clear removes every snapshot; see Clear.
func (s *Store) Clear() (files int, bytes int64, err error) { return Clear(s.dir) }

// evict removes the least recently used snapshots, of any model, until the
// folder is within the budget, and the stale temporary files, which it does
// not count: a long-running Store would otherwise keep those another
// process left when killed until it is opened again.
func (s *Store) evict() {
	s.removeStaleTemps(time.Now())
	entries, err := List(s.dir)
	if err != nil {
		s.logf("prefix cache on disk: %v", err)
		return
	}
	var total int64
	for _, e := range entries {
		total += e.Bytes
	}
	for i := len(entries) - 1; i >= 0 && total > s.budget; i-- {
		err := os.Remove(filepath.Join(s.dir, entries[i].Name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.logf("prefix cache on disk: %v", err)
			continue
		}
		total -= entries[i].Bytes
	}
}

func (s *Store) removeStaleTemps(now time.Time) { removeTemps(s.dir, now, StaleTemp) }

// removeTemps removes the temporary files in dir older than age.
func removeTemps(dir string, now time.Time, age time.Duration) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), tempPrefix) {
			continue
		}
		if info, err := de.Info(); err == nil && now.Sub(info.ModTime()) >= age {
			os.Remove(filepath.Join(dir, de.Name()))
		}
	}
}
