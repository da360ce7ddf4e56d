package grammar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Limits of a matcher's work. A schema whose readings overlap (anyOf
// branches that differ only deep inside) keeps several states alive; the
// same state reached twice is kept once, and past these bounds the reply
// ends with an error rather than the mask taking the engine.
const (
	// MaxStates bounds the distinct states a matcher holds at once.
	MaxStates = 1024
	// MaxMaskTime bounds the time one Allowed may take.
	MaxMaskTime = time.Second
	// MaxReplyMaskTime bounds the time the masks of one reply take in
	// all: a schema that keeps a thousand readings open inside a string
	// costs each token's mask a few hundred milliseconds, under
	// MaxMaskTime, and a reply of thousands of tokens must not hold the
	// engine for hours. Schemas that clients send take well under a
	// millisecond a token.
	MaxReplyMaskTime = time.Minute
	// checkEvery is how many steps the mask takes between looks at the
	// clock and the request's context.
	checkEvery = 4096
)

// Errors of a Matcher; each is returned wrapped, with figures.
var (
	// ErrRejected says a token the grammar does not allow was fed to a
	// Matcher.
	ErrRejected = errors.New("grammar: the token breaks the grammar")
	// ErrTooManyStates says the readings of the reply so far outgrew
	// MaxStates.
	ErrTooManyStates = errors.New("grammar: the schema leaves too many readings of the reply open")
	// ErrMaskTime says one token's mask took longer than MaxMaskTime, or
	// the reply's masks longer than MaxReplyMaskTime.
	ErrMaskTime = errors.New("grammar: the mask of the next token takes too long")
	// ErrStuck says no token of the vocabulary continues the reply: its
	// tokens cannot spell what the schema requires next.
	ErrStuck = errors.New("grammar: no token of the vocabulary can continue the reply")
)

// Matcher follows one reply through a grammar, token by token: Allowed
// says which tokens may come next, Advance takes the one that came.
type Matcher struct {
	v      *Vocab
	states []stack
	// levels are the states at each depth of the trie walk, kept to
	// spare allocations.
	levels [][]stack
	// seen deduplicates states: a hash's first state in the list kept.
	seen map[uint64]int
	// The current mask's bounds: its context, its deadline, the steps
	// since the last look at them, and the error that cut it short.
	ctx      context.Context
	deadline time.Time
	late     error // the error past the deadline
	steps    int
	err      error
	// spent is the time the reply's masks took so far.
	spent time.Duration
}

// The errors past a mask's deadline: its own, or the reply's.
var (
	errMaskTime      = fmt.Errorf("%w: more than %v", ErrMaskTime, MaxMaskTime)
	errReplyMaskTime = fmt.Errorf("%w: the reply's masks took more than %v in all", ErrMaskTime, MaxReplyMaskTime)
)

// Matcher starts a reply.
func (g *Grammar) Matcher(v *Vocab) *Matcher {
	return &Matcher{v: v, states: []stack{newStack(g.root)}}
}

// Done reports whether the reply is a complete value of the grammar.
func (m *Matcher) Done() bool { return slices.ContainsFunc(m.states, accepting) }

// Allowed sets in mask (a bitset of Vocab.Size bits, cleared first) the
// tokens that may come next: those whose bytes keep the reply a prefix of
// a value, and the end-of-reply tokens once it is complete. It stops with
// an error when ctx ends (its cause), past MaxStates, MaxMaskTime or the
// reply's MaxReplyMaskTime, or when no token is allowed; the mask is then
// cleared.
func (m *Matcher) Allowed(ctx context.Context, mask []uint64) error {
	start := time.Now()
	limit, late := MaxMaskTime, errMaskTime
	if left := MaxReplyMaskTime - m.spent; left < limit {
		limit, late = left, errReplyMaskTime
	}
	err := m.allowed(ctx, mask, start.Add(limit), late)
	m.spent += time.Since(start)
	return err
}

func (m *Matcher) allowed(ctx context.Context, mask []uint64, deadline time.Time, late error) error {
	clear(mask)
	m.ctx, m.deadline, m.late, m.steps, m.err = ctx, deadline, late, 0, nil
	if err := context.Cause(ctx); err != nil {
		return err
	}
	some := false
	if m.Done() {
		for _, id := range m.v.eos {
			if id >= 0 && id < m.v.size {
				mask[id/64] |= 1 << (id % 64)
				some = true
			}
		}
	}
	t := &m.v.all
	if m.inString() {
		if m.insideString(mask) {
			some = true
		}
		t = &m.v.quoted
	} else if r := rawFast(m); r != nil {
		if r.inside(m.states, mask) {
			some = true
		}
		t = &r.marked
	}
	if m.walk(t, 0, m.states, 0, mask) {
		some = true
	}
	if m.err != nil {
		clear(mask)
		return m.err
	}
	if !some {
		return ErrStuck
	}
	return nil
}

// inString reports that every state is inside a string.
func (m *Matcher) inString() bool {
	for _, s := range m.states {
		if s == nil || s.top().st != stString {
			return false
		}
	}
	return true
}

// insideString sets in mask the tokens without a quote that the states,
// all inside strings, take, and reports whether there is any. The tokens
// a string takes with k characters of room are among those it takes with
// more, so each entry state's tokens are those of its state with the most
// room: at most stringStates lookups, however many states.
func (m *Matcher) insideString(mask []uint64) bool {
	var room [stringStates]int
	for e := range room {
		room[e] = -1 // no state
	}
	for _, s := range m.states {
		f := s.top()
		r := math.MaxInt
		if f.n.maxLen >= 0 {
			r = f.n.maxLen - int(f.count)
		}
		e := stringState(f.esc, f.cont)
		room[e] = max(room[e], r)
	}
	some := false
	for e, r := range room {
		if r >= 0 && m.v.insideRoom(e, r, mask) {
			some = true
		}
	}
	return some
}

// walk sets the tokens under trie node `node` that states take, and
// reports whether it set any; it stops once m.err is set.
func (m *Matcher) walk(t *trie, node int32, states []stack, depth int, mask []uint64) bool {
	some := false
	for c := t.childStart[node]; c < t.childStart[node+1] && m.err == nil; c++ {
		for len(m.levels) <= depth {
			m.levels = append(m.levels, nil)
		}
		next := m.levels[depth][:0]
		b := t.childByte[c]
		for _, s := range states {
			next = step(s, b, next)
		}
		next = m.settle(next, len(states))
		m.levels[depth] = next
		if m.err != nil {
			return some
		}
		if len(next) == 0 {
			continue
		}
		child := t.childNode[c]
		for _, id := range t.ids[t.idStart[child]:t.idStart[child+1]] {
			mask[id/64] |= 1 << (id % 64)
			some = true
		}
		if m.walk(t, child, next, depth+1, mask) {
			some = true
		}
	}
	return some
}

// settle deduplicates the states one byte led to from `from` states,
// counts the work, and sets m.err past the bounds.
func (m *Matcher) settle(states []stack, from int) []stack {
	states = m.dedup(states)
	if len(states) > MaxStates {
		m.err = fmt.Errorf("%w: more than %d", ErrTooManyStates, MaxStates)
		return states
	}
	if m.ctx == nil {
		return states
	}
	if m.steps += from; m.steps >= checkEvery {
		m.steps = 0
		if err := context.Cause(m.ctx); err != nil {
			m.err = err
		} else if time.Now().After(m.deadline) {
			m.err = m.late
		}
	}
	return states
}

// dedup keeps the first of equal states, in place.
func (m *Matcher) dedup(states []stack) []stack {
	if len(states) < 2 {
		return states
	}
	if m.seen == nil {
		m.seen = make(map[uint64]int)
	}
	clear(m.seen)
	kept := states[:0]
next:
	for _, s := range states {
		h := s.sum()
		if i, ok := m.seen[h]; ok {
			if same(kept[i], s) {
				continue
			}
			for _, k := range kept { // a collision of hashes
				if same(k, s) {
					continue next
				}
			}
		} else {
			m.seen[h] = len(kept)
		}
		kept = append(kept, s)
	}
	return kept
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
	m.ctx, m.err = nil, nil
	for _, b := range token {
		var next []stack
		for _, s := range states {
			next = step(s, b, next)
		}
		if next = m.settle(next, len(states)); m.err != nil {
			return m.err
		}
		if len(next) == 0 {
			return ErrRejected
		}
		states = next
	}
	m.states = states
	return nil
}
