package grammar

import (
	"sync"
	"time"
)

// Inside a raw value nearly every token may come next, and walking the
// whole trie for each mask took 156 ms over Qwen's vocabulary. Whether a
// token without '<' or a newline stays inside depends only on the UTF-8
// state, so those are tabled by it and only the rest are walked.

// utf8States counts the continuation bytes a raw value may wait for: 0 to 3.
const utf8States = 4

// rawTable is a vocabulary arranged for raw values.
type rawTable struct {
	// safe[c] are the tokens without a marked byte that a raw value
	// waiting for c continuation bytes takes.
	safe [utf8States][]uint64
	// marked holds the tokens with a '<' (which may start a closing tag)
	// or the first byte of a value's end.
	marked trie
}

// rawTables holds each Vocab's rawTable (*Vocab to *rawTable), built on
// its first raw value: a model has one Vocab for its life.
var rawTables sync.Map

// rawFast returns m's vocabulary's rawTable when every state is inside a
// raw value with no closing tag begun, where the table gives the mask;
// nil otherwise. The table is built on the first use (a tenth of a second
// for Qwen's vocabulary, more on a busy machine), and the time it takes is
// added to the mask's deadline: it is the model's cost, not the reply's.
func rawFast(m *Matcher) *rawTable {
	for _, s := range m.states {
		if s == nil || s.top().st != stRaw || s.top().count != 0 {
			return nil
		}
	}
	if t, ok := rawTables.Load(m.v); ok {
		return t.(*rawTable)
	}
	start := time.Now()
	t, _ := rawTables.LoadOrStore(m.v, newRawTable(m.v))
	m.deadline = m.deadline.Add(time.Since(start))
	return t.(*rawTable)
}

// inside sets in mask the tokens of safe that states take, and reports
// whether there is any.
func (r *rawTable) inside(states []stack, mask []uint64) bool {
	some := false
	var done [utf8States]bool
	for _, s := range states {
		c := s.top().cont
		if done[c] {
			continue
		}
		done[c] = true
		for i, w := range r.safe[c] {
			mask[i] |= w
			some = some || w != 0
		}
	}
	return some
}

func newRawTable(v *Vocab) *rawTable {
	tokens := make([][]byte, v.size)
	t := &v.all
	var visit func(n int32, prefix []byte)
	visit = func(n int32, prefix []byte) {
		for _, id := range t.ids[t.idStart[n]:t.idStart[n+1]] {
			tokens[id] = prefix
		}
		for c := t.childStart[n]; c < t.childStart[n+1]; c++ {
			visit(t.childNode[c], append(prefix[:len(prefix):len(prefix)], t.childByte[c]))
		}
	}
	visit(0, nil)
	r := &rawTable{}
	for c := range r.safe {
		r.safe[c] = make([]uint64, (v.size+63)/64)
	}
	var marked []int32
	for id, b := range tokens {
		switch {
		case b == nil:
		case bytesHaveAny(b, forbiddenOpen, paramClose[0]):
			marked = append(marked, int32(id))
		default:
			for c := range utf8States {
				if utf8Continues(b, byte(c)) {
					r.safe[c][id/64] |= 1 << (id % 64)
				}
			}
		}
	}
	r.marked = buildTrie(tokens, marked)
	return r
}

func bytesHaveAny(b []byte, x, y byte) bool {
	for _, c := range b {
		if c == x || c == y {
			return true
		}
	}
	return false
}

// utf8Continues reports whether b is UTF-8 text after a character that
// waits for cont continuation bytes, as stepRaw reads it.
func utf8Continues(b []byte, cont byte) bool {
	for _, c := range b {
		var ok bool
		if cont, ok = utf8Byte(cont, c); !ok {
			return false
		}
	}
	return true
}

// utf8Byte is the continuation bytes due after c, where cont were due
// before it; false if c breaks UTF-8.
func utf8Byte(cont, c byte) (byte, bool) {
	switch {
	case cont > 0:
		return cont - 1, c&0xC0 == 0x80
	case c&0xC0 == 0x80 || c >= 0xF5 || c == 0xC0 || c == 0xC1:
		return 0, false
	case c >= 0xF0:
		return 3, true
	case c >= 0xE0:
		return 2, true
	case c >= 0xC2:
		return 1, true
	}
	return 0, true
}
