package service

import (
	"slices"
	"sync"
	"time"

	"petal/engine"
)

// Where the prefix cache takes snapshots inside a long prompt.
const (
	// LongPromptTokens is the prompt length past which snapshots are also
	// taken every SnapshotStride tokens, so a request that changes a long
	// prompt's tail still reuses most of it.
	LongPromptTokens = 4096
	// SnapshotStride is the distance between those snapshots.
	SnapshotStride = 4096
)

// withLongPromptPoints adds to the turn points of an n-token prompt, when
// there is a disk tier and the prompt is longer than LongPromptTokens, a
// point every SnapshotStride tokens, ascending. The disk tier alone keeps
// those: each holds all the prompt before it, so memory would hold a long
// prompt several times over and evict the turns' snapshots for them.
func (s *Service) withLongPromptPoints(turns []int, n int) []int {
	if s.disk == nil || n <= LongPromptTokens {
		return turns
	}
	points := slices.Clone(turns)
	for i := SnapshotStride; i < n; i += SnapshotStride {
		points = append(points, i)
	}
	slices.Sort(points)
	return slices.Compact(points)
}

// cacheHit is what the prefix cache gave a request.
type cacheHit struct {
	seq    engine.Sequence // nil: nothing
	tokens int
	// disk is whether the disk tier gave it, in diskTime.
	disk     bool
	diskTime time.Duration
}

// lookup returns a sequence holding the longest cached prefix of tokens:
// from memory, or from disk when the disk tier holds a longer one (which
// the memory tier then keeps too).
func (s *Service) lookup(tokens []int) (cacheHit, error) {
	seq, n, err := s.cache.get(tokens)
	if err != nil {
		return cacheHit{}, err
	}
	start := time.Now()
	dseq, dn := s.disk.get(tokens, n)
	if dseq == nil {
		if seq != nil {
			s.memoryHits.Add(1)
		}
		return cacheHit{seq: seq, tokens: n}, nil
	}
	hit := cacheHit{seq: dseq, tokens: dn, disk: true, diskTime: time.Since(start)}
	if seq != nil {
		seq.Close()
	}
	s.diskHits.Add(1)
	if s.cache.enabled() && !s.cache.has(tokens[:dn]) {
		if f, err := dseq.Fork(); err == nil && !s.cache.put(tokens[:dn], f) {
			f.Close()
		}
	}
	return hit, nil
}

// prefixCache keeps sequences after known token prefixes, bounded in bytes
// and entries, evicting the least recently used. Entries are never handed
// out: get returns a fork, so an entry serves any number of requests.
type prefixCache struct {
	mu         sync.Mutex
	entries    []*cacheEntry
	bytes      int64
	limit      int64 // < 0: off
	maxEntries int
	clock      uint64
}

type cacheEntry struct {
	tokens  []int
	seq     engine.Sequence
	bytes   int64
	lastUse uint64
}

func newPrefixCache(limit int64, maxEntries int) *prefixCache {
	return &prefixCache{limit: limit, maxEntries: maxEntries}
}

func (c *prefixCache) enabled() bool { return c.limit > 0 }

// get returns a fork of the entry holding the longest prefix of tokens, and
// that prefix's length; a nil sequence when none matches.
func (c *prefixCache) get(tokens []int) (engine.Sequence, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *cacheEntry
	for _, e := range c.entries {
		if len(e.tokens) <= len(tokens) && (best == nil || len(e.tokens) > len(best.tokens)) &&
			slices.Equal(e.tokens, tokens[:len(e.tokens)]) {
			best = e
		}
	}
	if best == nil {
		return nil, 0, nil
	}
	c.clock++
	best.lastUse = c.clock
	seq, err := best.seq.Fork()
	if err != nil {
		return nil, 0, err
	}
	return seq, len(best.tokens), nil
}

// has reports whether tokens are cached exactly.
func (c *prefixCache) has(tokens []int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if slices.Equal(e.tokens, tokens) {
			return true
		}
	}
	return false
}

// put takes seq, the state after tokens, into the cache and reports
// whether it did; if not, seq is still the caller's.
func (c *prefixCache) put(tokens []int, seq engine.Sequence) bool {
	if !c.enabled() || len(tokens) == 0 {
		return false
	}
	size := seq.Bytes()
	if size > c.limit {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if slices.Equal(e.tokens, tokens) {
			c.clock++
			e.lastUse = c.clock
			return false
		}
	}
	c.clock++
	c.entries = append(c.entries, &cacheEntry{tokens: slices.Clone(tokens), seq: seq, bytes: size, lastUse: c.clock})
	c.bytes += size
	for c.bytes > c.limit || len(c.entries) > c.maxEntries {
		c.evictOldest()
	}
	return true
}

func (c *prefixCache) evictOldest() {
	oldest := 0
	for i, e := range c.entries {
		if e.lastUse < c.entries[oldest].lastUse {
			oldest = i
		}
	}
	e := c.entries[oldest]
	c.entries = slices.Delete(c.entries, oldest, oldest+1)
	c.bytes -= e.bytes
	e.seq.Close()
}

// usage reports the entries and bytes held.
func (c *prefixCache) usage() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.bytes
}

func (c *prefixCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.entries) > 0 {
		c.evictOldest()
	}
}
