package grammar

import (
	"bytes"
	"slices"
)

// Vocab is a model's vocabulary arranged for masking. Built once per
// model; safe for concurrent use.
//
// Inside a string, which is where most of a reply's tokens go, whether a
// token stays inside depends only on the string's escape and UTF-8 state,
// and what it does to a string of bounded length only on the characters
// it adds, so the tokens that stay inside are tabled by that state and
// ordered by their characters; only the tokens holding a quote, which may
// end the string, are walked. Every other state walks the trie of all
// tokens, where a prefix that breaks the grammar cuts off every token
// under it.
type Vocab struct {
	size int
	eos  []int
	// all holds every token with bytes, quoted those holding a '"'.
	all, quoted trie
	// inside[e] are the tokens without a quote that a string in entry
	// state e takes, whatever its length bound.
	inside [stringStates][]uint64
	// byChars[e] are inside[e]'s tokens by the characters each adds to
	// the string, fewest first; upTo[e][k] counts those adding at most k
	// (len(upTo[e])-1 is the most any adds), for strings with little
	// room left.
	byChars [stringStates][]int32
	upTo    [stringStates][]int32
}

// stringStates counts a free string's states: UTF-8 continuation bytes
// due (0 to 3) outside an escape, or the escape's position (1 to 5).
const stringStates = 9

func stringState(esc, cont byte) int {
	if esc != 0 {
		return 3 + int(esc)
	}
	return int(cont)
}

// trie is a byte trie in flat arrays: node i's children are
// childByte/childNode[childStart[i]:childStart[i+1]], and the tokens that
// end at it ids[idStart[i]:idStart[i+1]].
type trie struct {
	childStart []int32
	childByte  []byte
	childNode  []int32
	idStart    []int32
	ids        []int32
}

// NewVocab builds the vocabulary of size ids; bytesOf gives a token's
// bytes, false for tokens a reply may not use (special ones). eos are the
// ids that end a reply, allowed once the value is complete.
func NewVocab(size int, bytesOf func(id int) ([]byte, bool), eos []int) *Vocab {
	v := &Vocab{size: size, eos: slices.Clone(eos)}
	for e := range v.inside {
		v.inside[e] = make([]uint64, (size+63)/64)
	}
	tokens := make([][]byte, size)
	var all, quoted []int32
	var chars [stringStates][]int // the characters of byChars' tokens
	for id := range size {
		b, ok := bytesOf(id)
		if !ok || len(b) == 0 {
			continue
		}
		tokens[id] = b
		all = append(all, int32(id))
		if bytes.IndexByte(b, '"') >= 0 {
			quoted = append(quoted, int32(id))
			continue
		}
		for e := range stringStates {
			esc, cont := byte(0), byte(e)
			if e > 3 {
				esc, cont = byte(e-3), 0
			}
			if n, ok := staysInside(b, esc, cont); ok {
				v.inside[e][id/64] |= 1 << (id % 64)
				v.byChars[e] = append(v.byChars[e], int32(id))
				chars[e] = append(chars[e], n)
			}
		}
	}
	for e := range stringStates {
		v.byChars[e], v.upTo[e] = orderByChars(v.byChars[e], chars[e])
	}
	v.all = buildTrie(tokens, all)
	v.quoted = buildTrie(tokens, quoted)
	return v
}

// staysInside reports whether b leaves a string entered in state esc, cont
// still open, and how many characters it adds to it (a string's length
// bound counts them as stepString does).
func staysInside(b []byte, esc, cont byte) (int, bool) {
	n := 0
	for _, c := range b {
		var char, ok, closes bool
		if esc, cont, char, closes, ok = stringByte(esc, cont, c); !ok || closes {
			return 0, false
		}
		if char {
			n++
		}
	}
	return n, true
}

// orderByChars sorts ids by their chars (a counting sort: a token adds
// few) and returns them with upTo, where upTo[k] counts the ids adding at
// most k characters.
func orderByChars(ids []int32, chars []int) ([]int32, []int32) {
	most := 0
	for _, n := range chars {
		most = max(most, n)
	}
	upTo := make([]int32, most+1)
	for _, n := range chars {
		upTo[n]++
	}
	for k := 1; k <= most; k++ {
		upTo[k] += upTo[k-1]
	}
	sorted := make([]int32, len(ids))
	next := make([]int32, most+1) // where the next id of each count goes
	for k := 1; k <= most; k++ {
		next[k] = upTo[k-1]
	}
	for i, id := range ids {
		sorted[next[chars[i]]] = id
		next[chars[i]]++
	}
	return sorted, upTo
}

// insideRoom sets in mask the tokens without a quote that a string in
// entry state e takes with room characters left before its maxLength, and
// reports whether there is any.
func (v *Vocab) insideRoom(e, room int, mask []uint64) bool {
	upTo := v.upTo[e]
	if len(upTo) == 0 {
		return false
	}
	if room >= len(upTo)-1 {
		some := false
		for i, w := range v.inside[e] {
			mask[i] |= w
			some = some || w != 0
		}
		return some
	}
	fit := v.byChars[e][:upTo[room]]
	for _, id := range fit {
		mask[id/64] |= 1 << (id % 64)
	}
	return len(fit) > 0
}

// Size is the number of ids a mask covers.
func (v *Vocab) Size() int { return v.size }

func buildTrie(tokens [][]byte, ids []int32) trie {
	slices.SortFunc(ids, func(a, b int32) int { return bytes.Compare(tokens[a], tokens[b]) })
	var t trie
	// Breadth-first, so that each node's children are contiguous: a node
	// is a range of the sorted ids sharing a prefix of its depth.
	type span struct{ lo, hi, depth int }
	queue := []span{{0, len(ids), 0}}
	for n := 0; n < len(queue); n++ {
		sp := queue[n]
		lo := sp.lo
		t.idStart = append(t.idStart, int32(len(t.ids)))
		for lo < sp.hi && len(tokens[ids[lo]]) == sp.depth {
			t.ids = append(t.ids, ids[lo])
			lo++
		}
		t.childStart = append(t.childStart, int32(len(t.childByte)))
		for lo < sp.hi {
			b := tokens[ids[lo]][sp.depth]
			hi := lo + 1
			for hi < sp.hi && tokens[ids[hi]][sp.depth] == b {
				hi++
			}
			t.childByte = append(t.childByte, b)
			t.childNode = append(t.childNode, int32(len(queue)))
			queue = append(queue, span{lo, hi, sp.depth + 1})
			lo = hi
		}
	}
	t.idStart = append(t.idStart, int32(len(t.ids)))
	t.childStart = append(t.childStart, int32(len(t.childByte)))
	return t
}
