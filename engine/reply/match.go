package reply

import "strings"

// Limits on how far the parser looks ahead before deciding what text means.
const (
	// MaxNameLen is the longest function or parameter name, in bytes;
	// "<function=" or "<parameter=" followed by a longer name is text.
	MaxNameLen = 256
	// MaxTagGap is the most whitespace, in bytes, allowed between a tag and
	// the tag that confirms it (e.g. "</parameter>" and "</function>").
	MaxTagGap = 64
)

// The tags of the format.
const (
	tagThinkOpen     = "<think>"
	tagThinkClose    = "</think>"
	tagCallOpen      = "<tool_call>"
	tagCallClose     = "</tool_call>"
	tagFunctionOpen  = "<function="
	tagFunctionClose = "</function>"
	tagParamOpen     = "<parameter="
	tagParamClose    = "</parameter>"
)

// verdict is the answer of a look-ahead match.
type verdict uint8

const (
	no   verdict = iota // the text does not match
	yes                 // the text matches
	more                // the text so far is a prefix of a match: wait for more
)

// lit matches tag at s[i:]. At the end of the text (eof) a prefix is no.
func lit(s string, i int, tag string, eof bool) verdict {
	rest := s[i:]
	if len(rest) >= len(tag) {
		if rest[:len(tag)] == tag {
			return yes
		}
		return no
	}
	if !eof && strings.HasPrefix(tag, rest) {
		return more
	}
	return no
}

// isSpace reports ASCII whitespace. Only ASCII counts, so that a split
// inside a multi-byte character cannot change what is whitespace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// skipSpace returns the index after the whitespace at s[i:].
func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// nameEnd matches a function or parameter name at s[i:] ending in '>' and
// returns the index of the '>'. Names are 1 to MaxNameLen bytes without
// whitespace, quotes, braces or angle brackets, which keeps stray template
// syntax and prose from being taken for a call.
func nameEnd(s string, i int, eof bool) (verdict, int) {
	for j := i; j < len(s); j++ {
		c := s[j]
		if c == '>' {
			if j == i {
				return no, 0
			}
			return yes, j
		}
		if j-i >= MaxNameLen || isSpace(c) || strings.IndexByte(`{}<"'`, c) >= 0 {
			return no, 0
		}
	}
	if eof {
		return no, 0
	}
	return more, 0
}

// openTag matches prefix+NAME+">" (e.g. "<parameter=x>") at s[i:] and
// returns the name and the index after the '>'.
func openTag(s string, i int, prefix string, eof bool) (verdict, string, int) {
	if v := lit(s, i, prefix, eof); v != yes {
		return v, "", 0
	}
	start := i + len(prefix)
	v, end := nameEnd(s, start, eof)
	if v != yes {
		return v, "", 0
	}
	return yes, s[start:end], end + 1
}

// callOpen matches "<tool_call>", whitespace and "<function=NAME>" at s[i:].
func callOpen(s string, i int, eof bool) (verdict, string, int) {
	if v := lit(s, i, tagCallOpen, eof); v != yes {
		return v, "", 0
	}
	j := skipSpace(s, i+len(tagCallOpen))
	if j-i-len(tagCallOpen) > MaxTagGap {
		return no, "", 0
	}
	return openTag(s, j, tagFunctionOpen, eof)
}

// first combines alternatives: yes if one matches, else more if one may
// still match, else no.
func first(vs ...verdict) verdict {
	out := no
	for _, v := range vs {
		if v == yes {
			return yes
		}
		if v == more {
			out = more
		}
	}
	return out
}

// Followers: what may come after a closing tag to confirm it.
type follower uint8

const (
	followParam         follower = 1 << iota // "<parameter=NAME>" with a name the tool has
	followFunctionClose                      // "</function>"
	followCallClose                          // "</tool_call>"
	followCallOpen                           // "<tool_call>"
	followThinkClose                         // "</think>"
	followEnd                                // the end of the text
)

// follows matches, after at most MaxTagGap bytes of whitespace at s[i:],
// one of the followers in set.
func (p *Parser) follows(s string, i int, eof bool, set follower) verdict {
	j := skipSpace(s, i)
	if j-i > MaxTagGap {
		return no
	}
	if j == len(s) {
		if !eof {
			return more
		}
		if set&followEnd != 0 {
			return yes
		}
		return no
	}
	var vs [5]verdict
	if set&followParam != 0 {
		v, name, _ := openTag(s, j, tagParamOpen, eof)
		if v == yes && !p.fn.knows(name) {
			v = no
		}
		vs[0] = v
	}
	if set&followFunctionClose != 0 {
		vs[1] = lit(s, j, tagFunctionClose, eof)
	}
	if set&followCallClose != 0 {
		vs[2] = lit(s, j, tagCallClose, eof)
	}
	if set&followCallOpen != 0 {
		vs[3] = lit(s, j, tagCallOpen, eof)
	}
	if set&followThinkClose != 0 {
		vs[4] = lit(s, j, tagThinkClose, eof)
	}
	return first(vs[:]...)
}
