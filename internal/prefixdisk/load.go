package prefixdisk

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Load restores the longest snapshot of model holding a prefix of tokens
// longer than shorter tokens, through load, and returns it and its length;
// the zero T and 0 when there is none. A file that fails any check (its
// header, its tokens, its length or its checksum, or load's error) is
// closed if load made something of it, deleted and logged, and the next
// shorter snapshot is tried.
func Load[T io.Closer](s *Store, model ModelID, tokens []int, shorter int, load func(r io.Reader, tokens int) (T, error)) (T, int) {
	var zero T
	start := time.Now()
	entries, err := List(s.dir)
	if err != nil {
		s.logf("prefix cache on disk: %v", err)
	}
	var lengths []int
	for _, e := range entries {
		if e.Model == model.prefix() && e.Tokens > shorter && e.Tokens <= len(tokens) {
			lengths = append(lengths, e.Tokens)
		}
	}
	slices.Sort(lengths)
	lengths = slices.Compact(lengths)
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name] = true
	}
	for _, n := range slices.Backward(lengths) {
		name := fileName(model, tokens[:n])
		if !names[name] {
			continue
		}
		path := filepath.Join(s.dir, name)
		v, read, err := loadFile(path, model, tokens[:n], load)
		if err == nil {
			touch(path)
			took := time.Since(start)
			s.hits.Add(1)
			s.hitTokens.Add(int64(n))
			s.loadNanos.Add(int64(took))
			// One line a hit, as a request's log would say it: the server
			// has no access log.
			s.logf("prefix cache on disk: loaded %d tokens from %s in %v", n, name, took.Round(time.Millisecond))
			return v, n
		}
		if errors.Is(err, os.ErrNotExist) {
			continue // evicted by another process since the listing
		}
		s.rejected.Add(1)
		if now, statErr := os.Stat(path); read != nil && statErr == nil && !os.SameFile(read, now) {
			// Another process renamed a whole snapshot over the file while
			// it was read: only the file read was wrong.
			s.logf("prefix cache on disk: ignored %s, since replaced: %v", name, err)
			continue
		}
		s.logf("prefix cache on disk: deleted %s: %v", name, err)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.logf("prefix cache on disk: %v", err)
		}
	}
	s.misses.Add(1)
	return zero, 0
}

// loadFile checks and loads one file; on any error what load made is
// closed. It also returns the file it read, once opened, which another
// process may since have renamed another over.
func loadFile[T io.Closer](path string, model ModelID, tokens []int, load func(io.Reader, int) (T, error)) (T, fs.FileInfo, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return zero, nil, err
	}
	v, err := readSnapshot(f, info.Size(), model, tokens, load)
	return v, info, err
}

// readSnapshot checks and loads the snapshot f of size bytes.
func readSnapshot[T io.Closer](f io.Reader, size int64, model ModelID, tokens []int, load func(io.Reader, int) (T, error)) (T, error) {
	var zero T
	hb := make([]byte, headerBytes)
	if _, err := io.ReadFull(f, hb); err != nil {
		return zero, fmt.Errorf("header: %w", err)
	}
	h, err := decodeHeader(hb)
	switch {
	case err != nil:
		return zero, err
	case h.version != FormatVersion:
		return zero, fmt.Errorf("format version %d, not %d", h.version, FormatVersion)
	case h.model != model:
		return zero, errors.New("written for another model")
	case int(h.tokens) != len(tokens):
		return zero, fmt.Errorf("holds %d tokens, its name %d", h.tokens, len(tokens))
	case uint64(size) != headerBytes+4*uint64(h.tokens)+h.payload:
		return zero, fmt.Errorf("%d bytes, its header says %d", size, headerBytes+4*uint64(h.tokens)+h.payload)
	}
	crc := crc32.New(castagnoli)
	body := io.TeeReader(f, crc)
	tb := make([]byte, 4*len(tokens))
	if _, err := io.ReadFull(body, tb); err != nil {
		return zero, fmt.Errorf("tokens: %w", err)
	}
	if !bytes.Equal(tb, encodeTokens(tokens)) {
		return zero, errors.New("holds other tokens than its name's")
	}
	payload := &io.LimitedReader{R: body, N: int64(h.payload)}
	v, err := load(payload, len(tokens))
	if err != nil {
		return zero, fmt.Errorf("state: %w", err)
	}
	// Whatever load left unread still counts towards the checksum: a state
	// shorter than its file is as wrong as a longer one.
	left, _ := io.Copy(io.Discard, payload)
	switch {
	case left > 0:
		err = fmt.Errorf("state %d bytes shorter than its file", left)
	case crc.Sum32() != h.crc:
		err = errors.New("checksum mismatch")
	}
	if err != nil {
		v.Close()
		return zero, err
	}
	return v, nil
}

// Stats are a Store's counters.
type Stats struct {
	// Hits and Misses count lookups; HitTokens the tokens hits restored.
	Hits, Misses, HitTokens int64
	// LoadSeconds is the time lookups that hit took, listing and reading.
	LoadSeconds float64
	// Writes counts snapshots written, Dropped those the full queue
	// refused, Rejected the files found damaged, foreign or stale (and
	// deleted, unless another process wrote one over them meanwhile).
	Writes, Dropped, Rejected int64
	// On is false once a full disk turned the Store off.
	On bool
	// Files and Bytes are what the folder holds, of every model.
	Files int
	Bytes int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	files, bytes := s.Usage()
	return Stats{
		Files: files, Bytes: bytes,
		Hits: s.hits.Load(), Misses: s.misses.Load(), HitTokens: s.hitTokens.Load(),
		LoadSeconds: time.Duration(s.loadNanos.Load()).Seconds(),
		Writes:      s.writes.Load(), Dropped: s.dropped.Load(), Rejected: s.rejected.Load(), On: s.On(),
	}
}
