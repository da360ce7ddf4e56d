package grammar

import (
	"math"
	"strconv"
)

// The phases of a frame.
const (
	stValue uint8 = iota // a value of n is next; nothing read yet

	stObjOpen  // after '{': a key or '}'
	stObjKey   // inside a listed key
	stObjColon // after a key: ':'
	stObjAfter // after a value: ',' or '}'
	stObjComma // after ',': a key

	stArrOpen  // after '[': a value or ']'
	stArrAfter // after a value: ',' or ']'
	stArrComma // after ',': a value

	stString  // inside a string, after the opening quote
	stNumber  // inside a number
	stLiteral // inside a literal or markup text
	stSeq     // inside a sequence of markup, before its element count
	stRaw     // inside a raw value
)

// frame is one open value. Frames are values and stacks are never changed
// in place, so a state can be stepped along many tokens at once.
type frame struct {
	n     *node
	st    uint8
	ws    uint8  // whitespace bytes in the current gap
	esc   uint8  // strings: 1 after a backslash, 2 to 5 while reading \u hex digits
	cont  uint8  // strings: UTF-8 continuation bytes still due
	count int32  // items, characters, literal or key position, number bytes
	seen  uint64 // objects: the listed properties given so far
	cands uint64 // objects: the listed keys that match the key read so far
	num   string // numbers: the text so far
	key   bool   // strings: this string is a key of a free-key object
}

// stack is a state: its open values, innermost first, as an immutable
// list. States are stepped along many tokens at once and share their
// outer frames, so a step allocates the frames it changes, not a copy of
// the stack; nil is the empty stack, a complete value.
type stack = *link

type link struct {
	f     frame
	up    *link
	depth int32 // the frames from here down, this one included
	// hash is of the frames from here down, for deduplication; 0 until
	// sum computes it, as most states are never compared.
	hash uint64
}

// on makes the link of f on up.
func on(f frame, up *link) *link {
	if up == nil {
		return &link{f: f, depth: 1}
	}
	return &link{f: f, up: up, depth: up.depth + 1}
}

// sum is s's hash, computed once.
func (s *link) sum() uint64 {
	if s == nil {
		return 0
	}
	if s.hash == 0 {
		s.hash = s.f.hash() ^ (s.up.sum()*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019) | 1
	}
	return s.hash
}

func newStack(n *node) stack { return on(frame{n: n}, nil) }

// hash mixes f's fields (FNV-1a over their bytes, the node by id).
func (f *frame) hash() uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for range 8 {
			h = (h ^ v&0xff) * 1099511628211
			v >>= 8
		}
	}
	mix(uint64(uint32(f.n.id)) | uint64(f.st)<<32 | uint64(f.ws)<<40 | uint64(f.esc)<<48 | uint64(f.cont)<<56)
	mix(uint64(uint32(f.count)))
	mix(f.seen)
	mix(f.cands)
	for i := 0; i < len(f.num); i++ {
		h = (h ^ uint64(f.num[i])) * 1099511628211
	}
	if f.key {
		h = ^h
	}
	return h
}

// same reports whether a and b hold the same frames.
func same(a, b *link) bool {
	for a != b {
		if a == nil || b == nil || a.sum() != b.sum() || a.f != b.f {
			return false
		}
		a, b = a.up, b.up
	}
	return true
}

// len is the number of open values.
func (s *link) len() int {
	if s == nil {
		return 0
	}
	return int(s.depth)
}

func (s *link) top() frame { return s.f }

// with returns s with its top replaced by f.
func (s *link) with(f frame) stack { return on(f, s.up) }

// push returns s with top replaced by parent and f on it.
func (s *link) push(parent, f frame) stack {
	return on(f, s.with(parent))
}

// pop drops the top.
func (s *link) pop() stack { return s.up }

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// space takes a whitespace byte in the gap f is in, if the bound allows.
func space(s stack, f frame, out []stack) []stack {
	if f.ws >= MaxWhitespace {
		return out
	}
	f.ws++
	return append(out, s.with(f))
}

// step appends to out the stacks that s becomes after byte b; none if b
// is not allowed.
func step(s stack, b byte, out []stack) []stack {
	if s == nil {
		return out // the value is complete: nothing may follow
	}
	f := s.top()
	switch f.st {
	case stValue:
		return startValue(s, f, b, out)
	case stString:
		return stepString(s, f, b, out)
	case stNumber:
		return stepNumber(s, f, b, out)
	case stSeq:
		return stepSeq(s, f, b, out)
	case stRaw:
		return stepRaw(s, f, b, out)
	case stLiteral:
		if f.n.text[f.count] != b {
			return out
		}
		f.count++
		if int(f.count) == len(f.n.text) {
			return append(out, s.pop())
		}
		return append(out, s.with(f))
	case stObjOpen, stObjComma:
		switch {
		case isSpace(b):
			return space(s, f, out)
		case b == '}' && f.st == stObjOpen:
			if f.seen&f.n.required != f.n.required {
				return out
			}
			return append(out, s.pop())
		case b != '"':
			return out
		}
		f.ws = 0
		if f.n.props == nil {
			if f.n.extra == nil || !fits(s, f.n.extra) {
				return out
			}
			f.st = stObjColon
			return append(out, s.push(f, frame{n: keyNode, st: stString, key: true}))
		}
		f.st, f.count, f.cands = stObjKey, 1, 0
		for i, p := range f.n.props {
			if f.seen&(1<<i) == 0 && len(p.key) > 1 && fits(s, p.node) {
				f.cands |= 1 << i
			}
		}
		if f.cands == 0 {
			return out
		}
		return append(out, s.with(f))
	case stObjKey:
		var cands uint64
		done := -1
		for i, p := range f.n.props {
			if f.cands&(1<<i) != 0 && p.key[f.count] == b {
				cands |= 1 << i
				if int(f.count)+1 == len(p.key) {
					done = i
				}
			}
		}
		if cands == 0 {
			return out
		}
		if done >= 0 {
			f.st, f.seen, f.count = stObjColon, f.seen|1<<done, int32(done)
			return append(out, s.with(f))
		}
		f.cands = cands
		f.count++
		return append(out, s.with(f))
	case stObjColon:
		if isSpace(b) {
			return space(s, f, out)
		}
		if b != ':' {
			return out
		}
		val := f.n.extra
		if f.n.props != nil {
			val = f.n.props[f.count].node
		}
		f.st, f.ws = stObjAfter, 0
		return append(out, s.push(f, frame{n: val})) // the key was let in where val fits
	case stObjAfter:
		switch {
		case isSpace(b):
			return space(s, f, out)
		case b == '}':
			if f.seen&f.n.required != f.n.required {
				return out
			}
			return append(out, s.pop())
		case b == ',':
			if f.n.props != nil && f.seen == 1<<len(f.n.props)-1 {
				return out // every property is given
			}
			f.st, f.ws = stObjComma, 0
			return append(out, s.with(f))
		}
		return out
	case stArrOpen, stArrComma:
		switch {
		case isSpace(b):
			return space(s, f, out)
		case b == ']' && f.st == stArrOpen:
			if f.n.minItems > 0 {
				return out
			}
			return append(out, s.pop())
		case f.n.maxItems >= 0 && int(f.count) >= f.n.maxItems, !fits(s, f.n.items):
			return out
		}
		f.st, f.ws = stArrAfter, 0
		f.count++
		return step(s.push(f, frame{n: f.n.items}), b, out)
	case stArrAfter:
		switch {
		case isSpace(b):
			return space(s, f, out)
		case b == ']':
			if int(f.count) < f.n.minItems {
				return out
			}
			return append(out, s.pop())
		case b == ',':
			if f.n.maxItems >= 0 && int(f.count) >= f.n.maxItems {
				return out
			}
			f.st, f.ws = stArrComma, 0
			return append(out, s.with(f))
		}
	}
	return out
}

// fits reports whether a value of n, pushed on s, can be completed within
// maxFrames. Checked wherever a value may open, it keeps every state the
// matcher holds completable: the need of what is already open was checked
// when it opened.
func fits(s stack, n *node) bool { return s.len()+int(n.need) <= maxFrames }

// startValue reads the first byte of a value of f.n.
func startValue(s stack, f frame, b byte, out []stack) []stack {
	if f.n.kind >= kSeq {
		return startMarkup(s, f, b, out)
	}
	if isSpace(b) {
		return space(s, f, out)
	}
	n := f.n
	switch n.kind {
	case kAlt:
		// The alternatives are no alternatives themselves (Compile
		// flattened them); f is on s already, so one that fits in its
		// place fits.
		for _, a := range n.alts {
			if s.len()-1+int(a.need) <= maxFrames {
				g := f
				g.n = a
				out = startValue(s, g, b, out)
			}
		}
		return out
	case kAny:
		switch {
		case b == '{':
			n = anyObject
		case b == '[':
			n = anyArray
		case b == '"':
			n = anyString
		case b == '-' || b >= '0' && b <= '9':
			n = anyNumber
		case b == 't':
			n = trueNode
		case b == 'f':
			n = falseNode
		case b == 'n':
			n = nullNode
		default:
			return out
		}
		g := f
		g.n = n
		return startValue(s, g, b, out)
	case kObject:
		if b != '{' {
			return out
		}
		return append(out, s.with(frame{n: n, st: stObjOpen}))
	case kArray:
		if b != '[' {
			return out
		}
		return append(out, s.with(frame{n: n, st: stArrOpen}))
	case kString:
		if b != '"' {
			return out
		}
		return append(out, s.with(frame{n: n, st: stString}))
	case kNumber, kInteger:
		return stepNumber(s, frame{n: n, st: stNumber}, b, out)
	case kLiteral:
		return step(s.with(frame{n: n, st: stLiteral}), b, out)
	}
	return out
}

// The nodes of free JSON values, shared by every grammar, with their ids
// below firstID.
var (
	anyNode   = &node{kind: kAny, id: 1, need: 1, maxItems: -1, maxLen: -1}
	anyObject = &node{kind: kObject, id: 2, need: 1, extra: anyNode, maxItems: -1, maxLen: -1}
	anyArray  = &node{kind: kArray, id: 3, need: 1, items: anyNode, maxItems: -1, maxLen: -1}
	anyString = &node{kind: kString, id: 4, need: 1, maxItems: -1, maxLen: -1}
	anyNumber = &node{kind: kNumber, id: 5, need: 1, maxItems: -1, maxLen: -1, min: math.Inf(-1), max: math.Inf(1)}
	trueNode  = &node{kind: kLiteral, id: 6, need: 1, text: "true"}
	falseNode = &node{kind: kLiteral, id: 7, need: 1, text: "false"}
	nullNode  = &node{kind: kLiteral, id: 8, need: 1, text: "null"}
	keyNode   = &node{kind: kString, id: 9, need: 1, maxLen: -1, maxItems: -1} // a free-key object's key
)

func isHex(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F' }

// free reports a string whose length is not bounded: its content bytes
// leave its state as it is.
func (n *node) free() bool { return n.minLen == 0 && n.maxLen < 0 }

// stringByte is the effect of byte b inside a string whose escape and
// UTF-8 state are esc and cont: the new state, whether b starts a new
// character, whether it closes the string, and false if b is not allowed.
func stringByte(esc, cont, b byte) (esc2, cont2 byte, char, closes, ok bool) {
	switch {
	case esc == 1:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			return 0, 0, false, false, true
		case 'u':
			return 2, 0, false, false, true
		}
		return 0, 0, false, false, false
	case esc >= 2:
		if !isHex(b) {
			return 0, 0, false, false, false
		}
		if esc == 5 {
			return 0, 0, false, false, true
		}
		return esc + 1, 0, false, false, true
	case b&0xC0 == 0x80: // a continuation byte
		return 0, cont - 1, false, false, cont > 0
	case cont != 0 || b < 0x20 || b >= 0xF5 || b == 0xC0 || b == 0xC1:
		return 0, 0, false, false, false // a character cut short, a control byte, never UTF-8
	case b == '"':
		return 0, 0, false, true, true
	case b == '\\':
		return 1, 0, true, false, true
	case b >= 0xF0:
		return 0, 3, true, false, true
	case b >= 0xE0:
		return 0, 2, true, false, true
	case b >= 0xC2:
		return 0, 1, true, false, true
	}
	return 0, 0, true, false, true
}

func stepString(s stack, f frame, b byte, out []stack) []stack {
	esc, cont, char, closes, ok := stringByte(f.esc, f.cont, b)
	switch {
	case !ok:
		return out
	case closes:
		if int(f.count) < f.n.minLen {
			return out
		}
		return append(out, s.pop())
	case char && !f.n.free():
		if f.n.maxLen >= 0 && int(f.count) >= f.n.maxLen {
			return out
		}
		f.count++
	case esc == f.esc && cont == f.cont:
		return append(out, s) // a free string's state is unchanged
	}
	f.esc, f.cont = esc, cont
	return append(out, s.with(f))
}

// numberNext is the next phase of a number's text after b, or -1.
func numberNext(text string, b byte, integer bool) int {
	digit := b >= '0' && b <= '9'
	phase := numberPhase(text)
	switch phase {
	case 0: // start
		if b == '-' || digit {
			return 1
		}
	case 1: // after '-'
		if digit {
			return 1
		}
	case 2: // after a leading 0
		if !integer && (b == '.' || b == 'e' || b == 'E') {
			return 1
		}
	case 3: // integer digits
		if digit || !integer && (b == '.' || b == 'e' || b == 'E') {
			return 1
		}
	case 4: // after '.'
		if digit {
			return 1
		}
	case 5: // fraction digits
		if digit || b == 'e' || b == 'E' {
			return 1
		}
	case 6: // after 'e'
		if digit || b == '+' || b == '-' {
			return 1
		}
	case 7, 8: // after the exponent's sign, exponent digits
		if digit {
			return 1
		}
	}
	return -1
}

// numberPhase reads where a number's text stands.
func numberPhase(text string) int {
	if text == "" {
		return 0
	}
	last := text[len(text)-1]
	body := text
	if body[0] == '-' {
		body = body[1:]
	}
	switch {
	case body == "":
		return 1
	case body == "0":
		return 2
	case last == '.':
		return 4
	case last == 'e' || last == 'E':
		return 6
	case last == '+' || last == '-':
		return 7
	}
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case 'e', 'E':
			return 8
		case '.':
			return 5
		}
	}
	return 3
}

// numberDone reports whether a number may end after text.
func numberDone(n *node, text string) bool {
	switch numberPhase(text) {
	case 2, 3, 5, 8:
	default:
		return false
	}
	if !n.bounded {
		return true
	}
	v := parseDecimal(text)
	return above(v, n.min, n.exclMin) && below(v, n.max, n.exclMax)
}

func above(v, lo float64, excl bool) bool { return v > lo || !excl && v == lo }
func below(v, hi float64, excl bool) bool { return v < hi || !excl && v == hi }

func stepNumber(s stack, f frame, b byte, out []stack) []stack {
	integer := f.n.kind == kInteger
	if numberNext(f.num, b, integer) >= 0 && len(f.num) < MaxNumberBytes && !(f.n.bounded && (b == 'e' || b == 'E')) {
		text := f.num + string(b)
		if (!f.n.bounded || reachable(f.n, text)) && (len(text) < MaxNumberBytes || numberDone(f.n, text)) {
			f.num = text
			return append(out, s.with(f))
		}
	}
	if f.num == "" || !numberDone(f.n, f.num) {
		return out
	}
	return step(s.pop(), b, out) // the number ended; b is the parent's
}

// reachable reports whether some number that starts with text obeys n's
// bounds. Without an exponent (bounded numbers have none), the numbers
// that start with an integer prefix I are I itself, I followed by more
// digits (I*10^k to (I+1)*10^k), and, for non-integers, I with a fraction;
// those with a fraction prefix x lie in [x, x+10^-digits).
func reachable(n *node, text string) bool {
	neg := text[0] == '-'
	body := text
	if neg {
		body = body[1:]
	}
	var spans [][2]float64
	switch {
	case body == "":
		spans = [][2]float64{{0, math.Inf(1)}}
	case body == "0":
		spans = [][2]float64{{0, 1}}
	default:
		dot := -1
		for i := 0; i < len(body); i++ {
			if body[i] == '.' {
				dot = i
			}
		}
		if dot >= 0 {
			x := parseDecimal(body)
			spans = [][2]float64{{x, x + math.Pow(10, -float64(len(body)-dot-1))}}
			break
		}
		i := parseDecimal(body)
		for k := 0; k+len(body) <= MaxNumberBytes; k++ {
			p := math.Pow(10, float64(k))
			spans = append(spans, [2]float64{i * p, (i + 1) * p})
		}
	}
	for _, sp := range spans {
		if meets(n, sp[0], sp[1], neg) {
			return true
		}
	}
	return false
}

// meets reports whether numbers of n's kind between lo and hi (both
// absolute values, hi excluded; negated when neg) obey n's bounds.
func meets(n *node, lo, hi float64, neg bool) bool {
	if n.kind == kInteger {
		imin, imax := math.Ceil(n.min), math.Floor(n.max)
		if n.exclMin && imin == n.min {
			imin++
		}
		if n.exclMax && imax == n.max {
			imax--
		}
		a, b := lo, math.Max(lo, math.Ceil(hi)-1)
		if neg {
			a, b = -b, -a
		}
		return a <= imax && b >= imin
	}
	if !neg { // [lo, hi)
		return math.Max(lo, n.min) < hi && (lo < n.max || lo == n.max && !n.exclMax)
	}
	a, b := -hi, -lo // (a, b]
	return math.Min(b, n.max) > a && (b > n.min || b == n.min && !n.exclMin)
}

// parseDecimal reads a number's text, which is valid JSON up to its end.
func parseDecimal(text string) float64 {
	v, neg, frac, scale := 0.0, false, false, 1.0
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '-':
			neg = true
		case c == '.':
			frac = true
		case c >= '0' && c <= '9':
			if frac {
				scale /= 10
				v += float64(c-'0') * scale
			} else {
				v = v*10 + float64(c-'0')
			}
		}
	}
	if neg {
		return -v
	}
	return v
}

// accepting reports a stack whose value is complete.
func accepting(s stack) bool {
	if s == nil {
		return true
	}
	f := s.top()
	return s.len() == 1 && f.st == stNumber && numberDone(f.n, f.num)
}

// hasNumber reports whether some number the matcher may write for n, at
// most MaxNumberBytes long and without an exponent when n is bounded, obeys
// n's bounds. Such a number, if any, is among the shortest decimals at or
// next to a bound, at each count of fraction digits.
func hasNumber(n *node) bool {
	if !n.bounded || numberDone(n, "0") {
		return true
	}
	places := MaxNumberBytes
	if n.kind == kInteger {
		places = 0
	}
	for _, b := range []float64{n.min, n.max} {
		if math.IsInf(b, 0) {
			continue
		}
		for k := 0; k <= places; k++ {
			scale := math.Pow(10, float64(k))
			for _, v := range []float64{math.Floor(b*scale) - 1, math.Floor(b * scale), math.Ceil(b * scale), math.Ceil(b*scale) + 1} {
				text := strconv.FormatFloat(v/scale, 'f', k, 64)
				if len(text) <= MaxNumberBytes && numberDone(n, text) {
					return true
				}
			}
		}
	}
	return false
}

// matchText reports whether text is a complete value of n, as a matcher
// reads it.
func matchText(n *node, text string) bool {
	var m Matcher
	m.states = []stack{newStack(n)}
	return m.Advance([]byte(text), false) == nil && m.Done()
}
