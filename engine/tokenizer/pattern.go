package tokenizer

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on a pre-tokenizer regex; real ones are under 200 bytes with 7
// alternatives.
const (
	// maxPatternBytes bounds the length of the regex.
	maxPatternBytes = 4096
	// maxAlternatives bounds the top-level alternatives; the first-byte
	// dispatch keeps one bit per alternative in a uint64.
	maxAlternatives = 64
	// maxItems bounds the items of one alternative, and so the depth of
	// the backtracking recursion.
	maxItems = 16
	// maxRepeat bounds the numbers in a {m,n} quantifier.
	maxRepeat = 1000
	// backtrackMemoAfter is the number of steps of one match attempt that
	// run without memoization; real split regexes take a handful.
	backtrackMemoAfter = 1 << 10
)

// pattern is a compiled pre-tokenizer regex: an ordered list of
// alternatives, tried leftmost-first at each position as Oniguruma (the
// library's regex engine) does.
//
// It understands what byte-level BPE split regexes are made of: literals,
// \s \S \r \n \t \f \v, \p{X} and \P{X} for Unicode general categories,
// bracket classes of those (negated or not, with ranges), the greedy
// quantifiers ? * + {m,n}, a case-insensitive group of literal alternatives
// forming a whole alternative, (?i:'s|'t), and a negative look-ahead at the
// end of an alternative, \s+(?!\S). Anything else is rejected.
type pattern struct {
	source string
	alts   []alternative
	// firstASCII[b] has bit i set when alternative i can start with the
	// ASCII byte b; alternatives are tried in order only where it is set.
	firstASCII [utf8.RuneSelf]uint64
	all        uint64
	// memoAfter is the number of backtracking steps of one match attempt
	// after which failed states are remembered; tests lower it.
	memoAfter int
}

// alternative is a sequence of quantified classes, optionally followed by a
// negative look-ahead of one class.
type alternative struct {
	items    []item
	notAhead *class // nil when the alternative has no look-ahead
}

type item struct {
	cls      *class
	min, max int
}

// class is a set of runes: the union of its members, complemented when
// negated. Membership of ASCII runes is precomputed.
type class struct {
	ascii   [2]uint64
	negated bool
	members []member
}

// member is a rune range [lo, hi], or a Unicode table (complemented when
// not is set).
type member struct {
	lo, hi rune
	table  *unicode.RangeTable
	not    bool
}

func (c *class) has(r rune) bool {
	if r < utf8.RuneSelf && r >= 0 {
		return c.ascii[r>>6]&(1<<(r&63)) != 0
	}
	return c.slowHas(r)
}

func (c *class) slowHas(r rune) bool {
	in := false
	for _, m := range c.members {
		if m.table != nil {
			in = unicode.Is(m.table, r) != m.not
		} else {
			in = m.lo <= r && r <= m.hi
		}
		if in {
			break
		}
	}
	return in != c.negated
}

func (c *class) finish() *class {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		if c.slowHas(r) {
			c.ascii[r>>6] |= 1 << (r & 63)
		}
	}
	return c
}

// compilePattern parses a pre-tokenizer regex.
func compilePattern(src string) (*pattern, error) {
	if len(src) > maxPatternBytes {
		return nil, unsupported("split regex of %d bytes (limit %d)", len(src), maxPatternBytes)
	}
	if !utf8.ValidString(src) {
		return nil, bad("split regex is not valid UTF-8")
	}
	p := &parser{src: src}
	alts, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("split regex %q: %w", src, err)
	}
	pat := &pattern{source: src, alts: alts, memoAfter: backtrackMemoAfter}
	for i, a := range alts {
		bit := uint64(1) << i
		pat.all |= bit
		for b := rune(0); b < utf8.RuneSelf; b++ {
			if a.canStartWith(b) {
				pat.firstASCII[b] |= bit
			}
		}
	}
	return pat, nil
}

func (a *alternative) canStartWith(r rune) bool {
	for _, it := range a.items {
		if it.cls.has(r) {
			return true
		}
		if it.min > 0 {
			return false
		}
	}
	return false
}

func (a *alternative) minLen() int {
	n := 0
	for _, it := range a.items {
		n += it.min
	}
	return n
}

// matcher runs a pattern over one text. An attempt matches one alternative
// at one position: greedily, giving back one rune at a time. Plain
// backtracking is exponential on regexes such as a*a*a*b, so past memoAfter
// steps of one attempt the matcher records which (alternative, item,
// position) states fail, for the rest of the text; that bounds the work on
// a text of n runes by alternatives × items × n states of O(n) each.
type matcher struct {
	p      *pattern
	s      string
	failed map[uint64]bool
	// The attempt under way.
	alt      *alternative
	altIndex int
	steps    int
}

func (p *pattern) matcher(s string) matcher { return matcher{p: p, s: s} }

// nextPiece returns the end of the pre-token that starts at pos: a match
// of the regex, or text that no alternative matches, which the Isolated
// behaviour keeps as a piece of its own.
func (m *matcher) nextPiece(pos int) int {
	start, end := m.find(pos)
	switch {
	case start < 0:
		return len(m.s)
	case start > pos:
		return start
	}
	return end
}

// find returns the first match at or after byte offset pos as [start, end),
// or start = -1 when there is none.
func (m *matcher) find(pos int) (start, end int) {
	for pos < len(m.s) {
		if e := m.matchAt(pos); e > pos {
			return pos, e
		}
		if m.s[pos] < utf8.RuneSelf {
			pos++
		} else {
			_, w := utf8.DecodeRuneInString(m.s[pos:])
			pos += w
		}
	}
	return -1, -1
}

// matchAt returns the end of the match of the first alternative that
// matches at pos, or -1.
func (m *matcher) matchAt(pos int) int {
	mask := m.p.all
	if m.s[pos] < utf8.RuneSelf {
		mask = m.p.firstASCII[m.s[pos]]
	}
	for i := range m.p.alts {
		if mask&(1<<i) == 0 {
			continue
		}
		m.alt, m.altIndex, m.steps = &m.p.alts[i], i, 0
		if e := m.match(0, pos); e >= 0 {
			return e
		}
	}
	return -1
}

// match matches items i... of the alternative from pos and returns the end
// of the match or -1.
func (m *matcher) match(i, pos int) int {
	items, s := m.alt.items, m.s
	if i == len(items) {
		if m.alt.notAhead != nil && pos < len(s) {
			r, _ := utf8.DecodeRuneInString(s[pos:])
			if m.alt.notAhead.has(r) {
				return -1
			}
		}
		return pos
	}
	if m.steps++; m.steps > m.p.memoAfter && m.failed == nil {
		m.failed = make(map[uint64]bool)
	}
	if m.failed != nil && m.failed[m.key(i, pos)] {
		return -1
	}
	it := items[i]
	p, n := pos, 0
	for n < it.max && p < len(s) {
		r, w := rune(s[p]), 1
		if r >= utf8.RuneSelf {
			r, w = utf8.DecodeRuneInString(s[p:])
		}
		if !it.cls.has(r) {
			break
		}
		p += w
		n++
	}
	for n >= it.min {
		if e := m.match(i+1, p); e >= 0 {
			return e
		}
		if n == it.min {
			break
		}
		_, w := utf8.DecodeLastRuneInString(s[pos:p])
		p -= w
		n--
	}
	if m.failed != nil {
		m.failed[m.key(i, pos)] = true
	}
	return -1
}

// key names the state of the current alternative at item i and pos.
func (m *matcher) key(i, pos int) uint64 {
	return uint64(m.altIndex)<<56 | uint64(i)<<48 | uint64(pos)
}

// parser is a recursive-descent parser of the regex subset pattern knows.
type parser struct {
	src string
	i   int
}

func (p *parser) eof() bool { return p.i >= len(p.src) }

func (p *parser) peek() byte { return p.src[p.i] }

func (p *parser) errorf(format string, args ...any) error {
	return unsupported("at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) parse() ([]alternative, error) {
	var alts []alternative
	for {
		more, err := p.parseAlternative()
		if err != nil {
			return nil, err
		}
		alts = append(alts, more...)
		if len(alts) > maxAlternatives {
			return nil, p.errorf("more than %d alternatives", maxAlternatives)
		}
		if p.eof() {
			break
		}
		if p.peek() != '|' {
			return nil, p.errorf("unexpected %q", p.peek())
		}
		p.i++
	}
	for i, a := range alts {
		if a.minLen() == 0 {
			return nil, unsupported("alternative %d can match the empty string", i+1)
		}
	}
	return alts, nil
}

// parseAlternative parses one top-level alternative, or the several that a
// case-insensitive group of literals stands for.
func (p *parser) parseAlternative() ([]alternative, error) {
	if strings.HasPrefix(p.src[p.i:], "(?i:") {
		p.i += len("(?i:")
		alts, err := p.parseFoldedLiterals()
		if err != nil {
			return nil, err
		}
		if !p.eof() && p.peek() != '|' {
			return nil, p.errorf("a case-insensitive group must be a whole alternative")
		}
		return alts, nil
	}
	var a alternative
	for !p.eof() && p.peek() != '|' {
		if a.notAhead != nil {
			return nil, p.errorf("a look-ahead must end its alternative")
		}
		if strings.HasPrefix(p.src[p.i:], "(?!") {
			p.i += len("(?!")
			c, err := p.parseAtom()
			if err != nil {
				return nil, err
			}
			if p.eof() || p.peek() != ')' {
				return nil, p.errorf("a look-ahead must hold one character class")
			}
			p.i++
			a.notAhead = c
			continue
		}
		c, err := p.parseAtom()
		if err != nil {
			return nil, err
		}
		lo, hi, err := p.parseQuantifier()
		if err != nil {
			return nil, err
		}
		a.items = append(a.items, item{cls: c, min: lo, max: hi})
		if len(a.items) > maxItems {
			return nil, p.errorf("more than %d items in one alternative", maxItems)
		}
	}
	if len(a.items) == 0 {
		return nil, p.errorf("empty alternative")
	}
	return []alternative{a}, nil
}

// parseFoldedLiterals parses the inside of (?i:...) up to its ')': literal
// alternatives, each matched with Unicode simple case folding.
func (p *parser) parseFoldedLiterals() ([]alternative, error) {
	var alts []alternative
	var cur alternative
	for {
		if p.eof() {
			return nil, p.errorf("unclosed group")
		}
		switch p.peek() {
		case '|', ')':
			if len(cur.items) == 0 {
				return nil, p.errorf("empty alternative in a case-insensitive group")
			}
			alts = append(alts, cur)
			cur = alternative{}
			closing := p.peek() == ')'
			p.i++
			if closing {
				return alts, nil
			}
			continue
		}
		r, err := p.parseLiteral()
		if err != nil {
			return nil, err
		}
		c := &class{}
		f := r
		for {
			c.members = append(c.members, member{lo: f, hi: f})
			if f = unicode.SimpleFold(f); f == r {
				break
			}
		}
		cur.items = append(cur.items, item{cls: c.finish(), min: 1, max: 1})
		if len(cur.items) > maxItems {
			return nil, p.errorf("more than %d items in one alternative", maxItems)
		}
	}
}

// parseLiteral reads one literal rune: a plain character or an escaped one.
func (p *parser) parseLiteral() (rune, error) {
	if p.peek() == '\\' {
		p.i++
		if p.eof() {
			return 0, p.errorf("trailing backslash")
		}
		if r, ok := escapedRune(p.peek()); ok {
			p.i++
			return r, nil
		}
		return 0, p.errorf("\\%c is not a literal", p.peek())
	}
	if strings.IndexByte(".^$*+?{}()[]|", p.peek()) >= 0 {
		return 0, p.errorf("%q is not a literal", p.peek())
	}
	r, w := utf8.DecodeRuneInString(p.src[p.i:])
	p.i += w
	return r, nil
}

// escapedRune is the rune that \b stands for when b is a control escape or
// escaped ASCII punctuation.
func escapedRune(b byte) (rune, bool) {
	switch b {
	case 'r':
		return '\r', true
	case 'n':
		return '\n', true
	case 't':
		return '\t', true
	case 'f':
		return '\f', true
	case 'v':
		return '\v', true
	}
	if b < utf8.RuneSelf && (unicode.IsPunct(rune(b)) || unicode.IsSymbol(rune(b)) || b == ' ') {
		return rune(b), true
	}
	return 0, false
}

func (p *parser) parseAtom() (*class, error) {
	if p.eof() {
		return nil, p.errorf("missing operand")
	}
	switch b := p.peek(); b {
	case '[':
		p.i++
		return p.parseBracket()
	case '\\':
		if p.i+1 < len(p.src) {
			if m, ok, err := p.parseClassEscape(); err != nil {
				return nil, err
			} else if ok {
				return (&class{members: []member{m}}).finish(), nil
			}
		}
	case '(':
		return nil, p.errorf("groups other than (?i:...) and (?!...) are not supported")
	case ')':
		return nil, p.errorf("unbalanced ')'")
	case '*', '+', '?', '{':
		return nil, p.errorf("quantifier %q without an operand", b)
	}
	r, err := p.parseLiteral()
	if err != nil {
		return nil, err
	}
	return (&class{members: []member{{lo: r, hi: r}}}).finish(), nil
}

// parseClassEscape parses \s, \S, \p{X} or \P{X} at p.i. ok is false, and
// nothing is consumed, when the escape is of another kind.
func (p *parser) parseClassEscape() (m member, ok bool, err error) {
	switch p.src[p.i+1] {
	case 's', 'S':
		m = member{table: unicode.White_Space, not: p.src[p.i+1] == 'S'}
		p.i += 2
		return m, true, nil
	case 'p', 'P':
		not := p.src[p.i+1] == 'P'
		p.i += 2
		var name string
		if strings.HasPrefix(p.src[p.i:], "{") {
			end := strings.IndexByte(p.src[p.i:], '}')
			if end < 0 {
				return m, false, p.errorf("unclosed \\p{")
			}
			name = p.src[p.i+1 : p.i+end]
			p.i += end + 1
		} else if !p.eof() {
			name = p.src[p.i : p.i+1]
			p.i++
		}
		t, found := unicode.Categories[name]
		if !found {
			return m, false, p.errorf("unknown Unicode category %q", name)
		}
		return member{table: t, not: not}, true, nil
	}
	return m, false, nil
}

// parseBracket parses a bracket class after its '['.
func (p *parser) parseBracket() (*class, error) {
	c := &class{}
	if !p.eof() && p.peek() == '^' {
		c.negated = true
		p.i++
	}
	for {
		if p.eof() {
			return nil, p.errorf("unclosed character class")
		}
		switch p.peek() {
		case ']':
			if len(c.members) == 0 {
				return nil, p.errorf("empty character class")
			}
			p.i++
			return c.finish(), nil
		case '[':
			return nil, p.errorf("nested or POSIX character classes are not supported")
		case '\\':
			if p.i+1 < len(p.src) {
				m, ok, err := p.parseClassEscape()
				if err != nil {
					return nil, err
				}
				if ok {
					c.members = append(c.members, m)
					continue
				}
			}
		}
		lo, err := p.parseClassLiteral()
		if err != nil {
			return nil, err
		}
		hi := lo
		if strings.HasPrefix(p.src[p.i:], "-") && !strings.HasPrefix(p.src[p.i:], "-]") {
			p.i++
			if p.eof() {
				return nil, p.errorf("unclosed character class")
			}
			if hi, err = p.parseClassLiteral(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("range %q-%q is reversed", lo, hi)
			}
		}
		c.members = append(c.members, member{lo: lo, hi: hi})
	}
}

// parseClassLiteral reads one literal rune inside brackets, where only
// '\\', '[' and ']' are special.
func (p *parser) parseClassLiteral() (rune, error) {
	if p.peek() == '\\' {
		return p.parseLiteral()
	}
	if p.peek() == '[' || p.peek() == ']' {
		return 0, p.errorf("unexpected %q in a character class", p.peek())
	}
	r, w := utf8.DecodeRuneInString(p.src[p.i:])
	p.i += w
	return r, nil
}

// parseQuantifier parses an optional greedy quantifier; a missing one means
// exactly once.
func (p *parser) parseQuantifier() (lo, hi int, err error) {
	lo, hi = 1, 1
	if p.eof() {
		return lo, hi, nil
	}
	switch p.peek() {
	case '?':
		lo, hi = 0, 1
		p.i++
	case '*':
		lo, hi = 0, math.MaxInt
		p.i++
	case '+':
		lo, hi = 1, math.MaxInt
		p.i++
	case '{':
		end := strings.IndexByte(p.src[p.i:], '}')
		if end < 0 {
			return 0, 0, p.errorf("unclosed {")
		}
		body := p.src[p.i+1 : p.i+end]
		if lo, hi, err = parseRepeat(body); err != nil {
			return 0, 0, p.errorf("quantifier {%s}: %v", body, err)
		}
		p.i += end + 1
	default:
		return lo, hi, nil
	}
	if !p.eof() && (p.peek() == '?' || p.peek() == '+') {
		return 0, 0, p.errorf("lazy and possessive quantifiers are not supported")
	}
	return lo, hi, nil
}

// parseRepeat parses the body of {n}, {n,} or {n,m}.
func parseRepeat(body string) (lo, hi int, err error) {
	a, b, comma := strings.Cut(body, ",")
	if lo, err = strconv.Atoi(a); err != nil || lo < 0 || lo > maxRepeat {
		return 0, 0, fmt.Errorf("bad or too large minimum (limit %d)", maxRepeat)
	}
	switch {
	case !comma:
		hi = lo
	case b == "":
		hi = math.MaxInt
	default:
		if hi, err = strconv.Atoi(b); err != nil || hi < lo || hi > maxRepeat {
			return 0, 0, fmt.Errorf("bad or too large maximum (limit %d)", maxRepeat)
		}
	}
	return lo, hi, nil
}
