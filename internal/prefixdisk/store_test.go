package prefixdisk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// blob is a loaded payload, closed when a check after the load fails.
type blob struct {
	data   []byte
	closed *bool
}

func (b blob) Close() error { *b.closed = true; return nil }

// loadAll reads the whole payload.
func loadAll(closed *bool) func(io.Reader, int) (blob, error) {
	return func(r io.Reader, n int) (blob, error) {
		data, err := io.ReadAll(r)
		return blob{data: data, closed: closed}, err
	}
}

// payload is a state standing for n tokens' worth.
func payload(n int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("state%d|", n)), 100) }

type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

var modelA, modelB = NewModelID("checkpoint A", "cpu/kv-f32"), NewModelID("checkpoint B", "cpu/kv-f32")

func open(t testing.TB, dir string, budget int64) (*Store, *logBuf) {
	t.Helper()
	var l logBuf
	s, err := Open(dir, budget, l.logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &l
}

// save writes the snapshot of tokens and waits until it is on disk.
func save(t testing.TB, dir string, model ModelID, tokens []int) string {
	t.Helper()
	s, _ := open(t, dir, 1<<30)
	released := false
	data := payload(len(tokens))
	if !s.Save(model, tokens, func(w io.Writer) error { _, err := w.Write(data); return err }, func() { released = true }) {
		t.Fatal("Save dropped the snapshot")
	}
	s.Close()
	if !released {
		t.Fatal("Save did not release its state")
	}
	return filepath.Join(dir, fileName(model, tokens))
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 7*i + 1
	}
	return out
}

func TestSaveLoadLongestPrefix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prefix")
	long := seq(50)
	for _, n := range []int{10, 30, 45} {
		save(t, dir, modelA, long[:n])
	}
	save(t, dir, modelB, long[:48])
	s, l := open(t, dir, 1<<30)
	var closed bool
	// A restart: a new Store over the folder finds the longest prefix of
	// this model's, not model B's longer one.
	v, n := Load(s, modelA, long, 0, loadAll(&closed))
	if n != 45 || !bytes.Equal(v.data, payload(45)) {
		t.Fatalf("loaded %d tokens (%q...), want 45", n, v.data[:min(10, len(v.data))])
	}
	if !strings.Contains(l.text(), "loaded 45 tokens from "+fileName(modelA, long[:45])) {
		t.Errorf("log %q", l.text())
	}
	if _, n := Load(s, modelA, long[:40], 0, loadAll(&closed)); n != 30 {
		t.Errorf("prefix of 40 tokens loaded %d, want 30", n)
	}
	if _, n := Load(s, modelA, long, 45, loadAll(&closed)); n != 0 {
		t.Errorf("asked for more than 45 tokens, loaded %d", n)
	}
	other := append(seq(20), 999)
	if _, n := Load(s, modelA, other[10:], 0, loadAll(&closed)); n != 0 {
		t.Errorf("other tokens loaded %d", n)
	}
	if st := s.Stats(); st.Hits != 2 || st.Misses != 2 || st.HitTokens != 75 || st.Files != 4 || st.Rejected != 0 {
		t.Errorf("stats %+v", st)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("folder: %v %v", info.Mode(), err)
	}
	entries, _ := List(dir)
	for _, e := range entries {
		info, err := os.Stat(filepath.Join(dir, e.Name))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", e.Name, info.Mode(), err)
		}
	}
}

// TestDamagedFilesAreDeleted: a file that is truncated, bit-flipped,
// another model's or of an older format is never loaded: it is deleted and
// logged, and the next shorter snapshot is used.
func TestDamagedFilesAreDeleted(t *testing.T) {
	long := seq(40)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir, path string)
		why    string
	}{
		{"truncated", func(t *testing.T, dir, path string) {
			info, _ := os.Stat(path)
			if err := os.Truncate(path, info.Size()-3); err != nil {
				t.Fatal(err)
			}
		}, "bytes, its header says"},
		{"payload bit flipped", func(t *testing.T, dir, path string) { flip(t, path, -10) }, "checksum mismatch"},
		{"token bit flipped", func(t *testing.T, dir, path string) { flip(t, path, headerBytes+5) }, "other tokens"},
		{"checksum bit flipped", func(t *testing.T, dir, path string) { flip(t, path, 53) }, "checksum mismatch"},
		{"reserved bit flipped", func(t *testing.T, dir, path string) { flip(t, path, 13) }, "reserved bytes"},
		{"another model", func(t *testing.T, dir, path string) {
			// Model B's snapshot of the same tokens under model A's name.
			b := save(t, t.TempDir(), modelB, long[:35])
			data, _ := os.ReadFile(b)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "another model"},
		{"older format", func(t *testing.T, dir, path string) {
			data, _ := os.ReadFile(path)
			binary.LittleEndian.PutUint32(data[8:], FormatVersion-1)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "format version 0"},
		{"not a snapshot", func(t *testing.T, dir, path string) {
			if err := os.WriteFile(path, []byte("hello"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			save(t, dir, modelA, long[:20])
			path := save(t, dir, modelA, long[:35])
			tc.damage(t, dir, path)
			s, l := open(t, dir, 1<<30)
			var closed bool
			v, n := Load(s, modelA, long, 0, loadAll(&closed))
			if n != 20 || !bytes.Equal(v.data, payload(20)) {
				t.Errorf("loaded %d tokens, want the undamaged 20", n)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("damaged file kept: %v", err)
			}
			if log := l.text(); !strings.Contains(log, "deleted "+filepath.Base(path)) || !strings.Contains(log, tc.why) {
				t.Errorf("log %q, want the deletion and %q", log, tc.why)
			}
			if s.Stats().Rejected != 1 {
				t.Errorf("stats %+v", s.Stats())
			}
		})
	}
}

// flip inverts one bit at offset (from the end when negative).
func flip(t *testing.T, path string, offset int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if offset < 0 {
		offset += len(data)
	}
	data[offset] ^= 0x10
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLoaderLeavingBytesIsRejected: a state that reads less than its file
// holds is as wrong as a short file, and what it made is closed.
func TestLoaderLeavingBytesIsRejected(t *testing.T) {
	dir := t.TempDir()
	long := seq(10)
	save(t, dir, modelA, long)
	s, _ := open(t, dir, 1<<30)
	closed := false
	half := func(r io.Reader, n int) (blob, error) {
		b := make([]byte, len(payload(n))/2)
		_, err := io.ReadFull(r, b)
		return blob{data: b, closed: &closed}, err
	}
	if _, n := Load(s, modelA, long, 0, half); n != 0 || !closed {
		t.Errorf("loaded %d tokens; closed %v", n, closed)
	}
}

// TestKilledWrite: a write killed before its rename leaves a temporary
// file, which is never loaded, kept while it may be another process's
// write in progress, and removed once stale.
func TestKilledWrite(t *testing.T) {
	dir := t.TempDir()
	tokens := seq(12)
	path := save(t, dir, modelA, tokens)
	data, _ := os.ReadFile(path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	fresh, stale := filepath.Join(dir, tempPrefix+"fresh"), filepath.Join(dir, tempPrefix+"stale")
	for _, p := range []string{fresh, stale} {
		// Whole and valid but for its name, as a write killed between
		// its sync and its rename leaves it.
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-StaleTemp - time.Minute)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, dir, 1<<30)
	var closed bool
	if _, n := Load(s, modelA, tokens, 0, loadAll(&closed)); n != 0 {
		t.Errorf("a temporary file loaded %d tokens", n)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a temporary file young enough to be another writer's was removed: %v", err)
	}
}

// TestStaleTempRemovedWhileOpen: a temporary file left by a process killed
// after this Store opened is removed once stale by the Store's next write,
// not at its next start only; a younger one is kept.
func TestStaleTempRemovedWhileOpen(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 1<<30)
	stale, fresh := filepath.Join(dir, tempPrefix+"killed"), filepath.Join(dir, tempPrefix+"writing")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, payload(3), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-StaleTemp - time.Minute)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	s.Save(modelA, seq(4), func(w io.Writer) error { _, err := w.Write(payload(4)); return err }, func() {})
	s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("young temporary file removed: %v", err)
	}
	if !s.Has(modelA, seq(4)) {
		t.Error("the snapshot was not written")
	}
}

// TestQueueDropsWhenFull: with the writer busy and the queue full, Save
// drops the snapshot at once and releases its state.
func TestQueueDropsWhenFull(t *testing.T) {
	s, _ := open(t, t.TempDir(), 1<<30)
	started, unblock := make(chan struct{}), make(chan struct{})
	busy := func(w io.Writer) error { close(started); <-unblock; return nil }
	nop := func(io.Writer) error { return nil }
	if !s.Save(modelA, seq(1), busy, func() {}) {
		t.Fatal("first snapshot dropped")
	}
	<-started
	for i := range QueueDepth {
		if !s.Save(modelA, seq(2+i), nop, func() {}) {
			t.Fatalf("snapshot %d dropped with room in the queue", i)
		}
	}
	released := false
	if s.Save(modelA, seq(10), nop, func() { released = true }) || !released {
		t.Errorf("a full queue took a snapshot (released %v)", released)
	}
	close(unblock)
	s.Close()
	if st := s.Stats(); st.Writes != 1+QueueDepth || st.Dropped != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestDiskFullTurnsOff: a write that finds the disk full turns the tier
// off with one log line; later snapshots are dropped, loads still work.
func TestDiskFullTurnsOff(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, modelA, seq(5))
	s, l := open(t, dir, 1<<30)
	full := func(w io.Writer) error { return fmt.Errorf("writing: %w", syscall.ENOSPC) }
	s.Save(modelA, seq(6), full, func() {})
	s.Save(modelA, seq(7), full, func() {})
	s.Close() // waits for both
	if s.On() || strings.Count(l.text(), "disk is full") != 1 {
		t.Errorf("on %v, log %q", s.On(), l.text())
	}
	if s.Save(modelA, seq(8), func(io.Writer) error { return nil }, func() {}) {
		t.Error("a Store turned off took a snapshot")
	}
	entries, _ := List(dir)
	if len(entries) != 1 {
		t.Errorf("folder holds %+v", entries)
	}
	temps, _ := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if len(temps) != 0 {
		t.Errorf("failed writes left %v", temps)
	}
	var closed bool
	if _, n := Load(s, modelA, seq(9), 0, loadAll(&closed)); n != 5 {
		t.Errorf("loaded %d tokens after the disk filled, want 5", n)
	}
}

// TestEvictsLeastRecentlyUsed: past the budget the least recently used
// files go, and a load counts as a use.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	a, b := save(t, dir, modelA, seq(10)), save(t, dir, modelA, seq(20))
	info, _ := os.Stat(a)
	size := info.Size()
	// b is older than a, but a load of b makes it the newest.
	past := time.Now().Add(-time.Hour)
	os.Chtimes(b, past, past)
	os.Chtimes(a, past.Add(time.Minute), past.Add(time.Minute))
	s, _ := open(t, dir, 3*size)
	var closed bool
	if _, n := Load(s, modelA, seq(20), 10, loadAll(&closed)); n != 20 {
		t.Fatalf("loaded %d", n)
	}
	c := filepath.Join(dir, fileName(modelA, seq(30)))
	s.Save(modelA, seq(30), func(w io.Writer) error { _, err := w.Write(payload(30)); return err }, func() {})
	s.Close()
	for path, want := range map[string]bool{a: false, b: true, c: true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", filepath.Base(path), err == nil, want)
		}
	}
}

func TestClear(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, modelA, seq(3))
	save(t, dir, modelB, seq(4))
	os.WriteFile(filepath.Join(dir, tempPrefix+"x"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600)
	files, bytes, err := Clear(dir)
	if err != nil || files != 2 || bytes == 0 {
		t.Fatalf("cleared %d files, %d bytes: %v", files, bytes, err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != "notes.txt" {
		t.Errorf("left %v", left)
	}
	if files, _, err := Clear(filepath.Join(dir, "missing")); err != nil || files != 0 {
		t.Errorf("missing folder: %d, %v", files, err)
	}
}

// TestTwoStoresShareAFolder: two Stores (as two processes) writing the
// same and different snapshots into one folder leave only whole files.
func TestTwoStoresShareAFolder(t *testing.T) {
	dir := t.TempDir()
	s1, _ := open(t, dir, 1<<30)
	s2, _ := open(t, dir, 1<<30)
	for i := range 20 {
		tokens := seq(1 + i%5)
		data := payload(len(tokens))
		write := func(w io.Writer) error { _, err := w.Write(data); return err }
		for !s1.Save(modelA, tokens, write, func() {}) {
			s1.Close()
			s1, _ = open(t, dir, 1<<30)
		}
		for !s2.Save(modelA, tokens, write, func() {}) {
			s2.Close()
			s2, _ = open(t, dir, 1<<30)
		}
	}
	s1.Close()
	s2.Close()
	s, _ := open(t, dir, 1<<30)
	for n := 1; n <= 5; n++ {
		var closed bool
		if v, got := Load(s, modelA, seq(n), 0, loadAll(&closed)); got != n || !bytes.Equal(v.data, payload(n)) {
			t.Errorf("snapshot of %d tokens: loaded %d", n, got)
		}
	}
	if s.Stats().Rejected != 0 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestParseName(t *testing.T) {
	name := fileName(modelA, seq(3))
	if m, n, ok := parseName(name); !ok || n != 3 || m != modelA.prefix() {
		t.Errorf("%s: %s %d %v", name, m, n, ok)
	}
	for _, bad := range []string{"x.pfx", strings.Replace(name, "-3-", "-0-", 1), strings.Replace(name, "-3-", "-99999999-", 1), name + ".tmp", tempPrefix + name} {
		if _, _, ok := parseName(bad); ok {
			t.Errorf("%s parsed", bad)
		}
	}
}
