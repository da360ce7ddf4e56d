package grammar

import (
	"errors"
	"slices"
)

// ErrRejected says a token the grammar does not allow was fed to a
// Matcher.
var ErrRejected = errors.New("grammar: the token breaks the grammar")

// Matcher follows one reply through a grammar, token by token: Allowed
// says which tokens may come next, Advance takes the one that came.
type Matcher struct {
	v      *Vocab
	states []stack
	// levels are the states at each depth of the trie walk, kept to
	// spare allocations.
	levels [][]stack
}

// Matcher starts a reply.
func (g *Grammar) Matcher(v *Vocab) *Matcher {
	return &Matcher{v: v, states: []stack{{frame{n: g.root}}}}
}

// Done reports whether the reply is a complete value of the grammar.
func (m *Matcher) Done() bool { return slices.ContainsFunc(m.states, accepting) }

// Allowed sets in mask (a bitset of Vocab.Size bits, cleared first) the
// tokens that may come next: those whose bytes keep the reply a prefix of
// a value, and the end-of-reply tokens once it is complete.
func (m *Matcher) Allowed(mask []uint64) {
	clear(mask)
	if m.Done() {
		for _, id := range m.v.eos {
			if id >= 0 && id < m.v.size {
				mask[id/64] |= 1 << (id % 64)
			}
		}
	}
	t := &m.v.all
	if m.freeString() {
		for _, s := range m.states {
			f := s.top()
			for i, w := range m.v.inside[stringState(f.esc, f.cont)] {
				mask[i] |= w
			}
		}
		t = &m.v.quoted
	}
	m.walk(t, 0, m.states, 0, mask)
}

// freeString reports that every state is inside a string of unbounded
// length.
func (m *Matcher) freeString() bool {
	for _, s := range m.states {
		if len(s) == 0 {
			return false
		}
		if f := s.top(); f.st != stString || !f.n.free() {
			return false
		}
	}
	return true
}

func (m *Matcher) walk(t *trie, node int32, states []stack, depth int, mask []uint64) {
	for c := t.childStart[node]; c < t.childStart[node+1]; c++ {
		for len(m.levels) <= depth {
			m.levels = append(m.levels, nil)
		}
		next := m.levels[depth][:0]
		b := t.childByte[c]
		for _, s := range states {
			next = step(s, b, next)
		}
		m.levels[depth] = next
		if len(next) == 0 {
			continue
		}
		child := t.childNode[c]
		for _, id := range t.ids[t.idStart[child]:t.idStart[child+1]] {
			mask[id/64] |= 1 << (id % 64)
		}
		m.walk(t, child, next, depth+1, mask)
	}
}

// Advance takes the bytes of the token that came; an end-of-reply token
// is taken when the reply is complete.
func (m *Matcher) Advance(token []byte, eos bool) error {
	if eos {
		if !m.Done() {
			return ErrRejected
		}
		m.states = []stack{nil}
		return nil
	}
	states := m.states
	for _, b := range token {
		var next []stack
		for _, s := range states {
			next = step(s, b, next)
		}
		if len(next) == 0 {
			return ErrRejected
		}
		states = next
	}
	m.states = states
	return nil
}
