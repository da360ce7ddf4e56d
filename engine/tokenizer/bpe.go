package tokenizer

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Limits of the word cache.
const (
	// maxCachedWords bounds the cache; it is emptied when full, which a
	// working set of a few thousand distinct words never reaches.
	maxCachedWords = 1 << 16
	// maxCachedWordBytes keeps long runs (base64, long CJK sentences,
	// rows of '=') out of the cache: they rarely repeat.
	maxCachedWordBytes = 256
)

// bpe is the merge table of a byte-level BPE model.
type bpe struct {
	// merges maps a pair of ids (left<<32 | right) to its rank<<32 | the
	// id of the merged token.
	merges map[uint64]uint64
	// byteID is the id of the one-byte token of each byte.
	byteID [256]int32
	// vocab is set when the model has ignore_merges: a word found whole in
	// it is one token, whatever the merges would make.
	vocab map[string]int
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// symbol is one token of a word being merged, in a linked list over the
// word's initial bytes; id -1 marks one merged into its left neighbour.
type symbol struct {
	id         int32
	prev, next int32
}

// candidate is a possible merge of the symbol at pos with its right
// neighbour into newID.
type candidate struct {
	rank  uint32
	pos   int32
	newID int32
}

func (c candidate) less(d candidate) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

// scratch holds the buffers of one encoding, reused through a pool.
type scratch struct {
	symbols []symbol
	heap    []candidate
	ids     []int32
}

// merge appends the tokens of word to dst: it starts from one token per
// byte and repeatedly applies the lowest-ranked merge of two neighbours,
// leftmost first among equal ranks (the library's order).
func (m *bpe) merge(dst []int32, word string, sc *scratch) []int32 {
	if m.vocab != nil {
		if id, ok := m.vocab[byteLevelString([]byte(word))]; ok {
			return append(dst, int32(id))
		}
	}
	if word == "" {
		return dst
	}
	syms := sc.symbols[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, symbol{id: m.byteID[word[i]], prev: int32(i) - 1, next: int32(i) + 1})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h = heapPush(h, candidate{rank: uint32(v >> 32), pos: int32(i), newID: int32(uint32(v))})
		}
	}
	for len(h) > 0 {
		var c candidate
		c, h = heapPop(h)
		left := &syms[c.pos]
		if left.id < 0 || left.next < 0 {
			continue
		}
		right := syms[left.next]
		// Skip a candidate made stale by an earlier merge of either side.
		if v, ok := m.merges[pairKey(left.id, right.id)]; !ok || int32(uint32(v)) != c.newID {
			continue
		}
		syms[left.next].id = -1
		left.id = c.newID
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = c.pos
		}
		if left.prev >= 0 {
			if v, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				h = heapPush(h, candidate{rank: uint32(v >> 32), pos: left.prev, newID: int32(uint32(v))})
			}
		}
		if left.next >= 0 {
			if v, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
				h = heapPush(h, candidate{rank: uint32(v >> 32), pos: c.pos, newID: int32(uint32(v))})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.symbols, sc.heap = syms, h
	return dst
}

func heapPush(h []candidate, c candidate) []candidate {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].less(h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	return h
}

func heapPop(h []candidate) (candidate, []candidate) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		small := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			small = r
		}
		if !h[small].less(h[i]) {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	return top, h
}

// wordCache remembers the tokens of short words; it is safe for concurrent
// use, and reading it takes no lock.
type wordCache struct {
	words sync.Map // string -> []int32
	count atomic.Int64
}

func (c *wordCache) get(word string) ([]int32, bool) {
	v, ok := c.words.Load(word)
	if !ok {
		return nil, false
	}
	return v.([]int32), true
}

func (c *wordCache) put(word string, ids []int32) {
	if c.count.Add(1) > maxCachedWords {
		c.words.Clear()
		c.count.Store(1)
	}
	// Clone the key: word points into the caller's text.
	c.words.Store(strings.Clone(word), ids)
}
