package tokenizer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id      int
	content string
	// special tokens are skipped by DecodeSkipSpecial.
	special bool
	// singleWord tokens only match between non-word characters.
	singleWord bool
	// lstrip and rstrip tokens take the white space before or after them.
	lstrip, rstrip bool
	// normalized tokens are matched in the normalized text, others in the
	// raw text.
	normalized bool
}

// addedMatcher finds added tokens in text, leftmost first and longest
// among those starting at the same byte (the library's Aho-Corasick
// LeftmostLongest).
type addedMatcher struct {
	// byFirst lists, for each first byte, the tokens starting with it,
	// longest first.
	byFirst [256][]*addedToken
	// onlyFirst is the first byte of every token when they all share one
	// (Qwen's all start with '<'), for a fast IndexByte; -1 otherwise.
	onlyFirst int
}

func newAddedMatcher(tokens []*addedToken) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{onlyFirst: int(tokens[0].content[0])}
	for _, t := range tokens {
		b := t.content[0]
		if int(b) != m.onlyFirst {
			m.onlyFirst = -1
		}
		m.byFirst[b] = append(m.byFirst[b], t)
	}
	for i := range m.byFirst {
		slices.SortStableFunc(m.byFirst[i], func(a, b *addedToken) int { return len(b.content) - len(a.content) })
	}
	return m
}

// find returns the leftmost-longest token occurrence at or after from.
func (m *addedMatcher) find(s string, from int) (t *addedToken, start int) {
	for at := from; at < len(s); at++ {
		if m.onlyFirst >= 0 {
			i := strings.IndexByte(s[at:], byte(m.onlyFirst))
			if i < 0 {
				break
			}
			at += i
		}
		for _, t := range m.byFirst[s[at]] {
			if strings.HasPrefix(s[at:], t.content) {
				return t, at
			}
		}
	}
	return nil, -1
}

// addedSplitter walks the text around the added tokens found in it,
// applying their single_word, lstrip and rstrip rules as the library does.
type addedSplitter struct {
	m    *addedMatcher
	s    string
	scan int // where the search for the next occurrence resumes
	done int // end of the text already handed out
}

// next returns the text before the next accepted token and the token (nil
// at the end, with the rest of the text).
func (a *addedSplitter) next() (text string, t *addedToken) {
	for a.m != nil && a.scan < len(a.s) {
		t, start := a.m.find(a.s, a.scan)
		if t == nil {
			break
		}
		stop := start + len(t.content)
		a.scan = stop
		if t.singleWord && (endsWithWord(a.s[:start]) || startsWithWord(a.s[stop:])) {
			continue
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(a.s[:start], unicode.IsSpace)), a.done)
		}
		if t.rstrip {
			stop = len(a.s) - len(strings.TrimLeftFunc(a.s[stop:], unicode.IsSpace))
			a.scan = stop
		}
		text = a.s[a.done:start]
		a.done = stop
		return text, t
	}
	text = a.s[a.done:]
	a.done = len(a.s)
	a.scan = len(a.s)
	return text, nil
}

// isWordRune is the Unicode \w of the library's word-boundary check.
func isWordRune(r rune) bool {
	return unicode.In(r, unicode.L, unicode.Nl, unicode.Other_Alphabetic, unicode.M, unicode.Nd, unicode.Pc, unicode.Join_Control)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}
