package reply

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Options configure a [Parser].
type Options struct {
	// Thinking says the prompt ended inside "<think>", so the text starts
	// as reasoning. Without it the text starts as content.
	Thinking bool
	// Tools are the functions offered to the model; their schemas decide
	// how parameter values are converted. Calls are parsed without them too.
	Tools []Tool
	// NewID returns the id of call index (0, 1, ...). If nil, ids are
	// "call_" and 24 random hex digits.
	NewID func(index int) string
	// CallsAsText reads a call the model writes as content, for a request
	// that allows none (tool_choice "none").
	CallsAsText bool
}

// state is where in the format the parser is.
type state uint8

const (
	inText     state = iota // reasoning or content, per Parser.mode
	inFunction              // inside <function=...>, between parameters
	inValue                 // inside a parameter's value
	afterCall               // after </function>, expecting </tool_call>
)

// channel is one of the two text outputs. Whitespace is held back until
// text follows it, so that whitespace next to markup or at either end of
// the channel is dropped.
type channel struct {
	kind    Kind
	started bool   // some text has been emitted
	pending string // whitespace waiting for text to follow
}

// Parser parses one generated reply incrementally. It is not safe for
// concurrent use.
type Parser struct {
	tools       map[string]*function
	newID       func(int) string
	callsAsText bool

	buf    string // text received but not yet decided
	st     state
	mode   Kind // KindReasoning or KindContent: where text goes in inText
	chans  [2]channel
	events []Event // settled since the last Feed or Close
	tail   []byte  // the text of the last event, still growing
	done   bool

	// The call being parsed.
	calls        int       // calls started so far; the current one is calls-1
	fn           *function // its schema, nil if the tool is unknown
	seen         map[string]bool
	args         int       // parameters emitted so far
	param        paramType // type of the current value
	value        []byte    // the current value's text, when it cannot stream
	valueStarted bool      // the current value has some text
}

// New returns a parser for one reply. It fails only if a tool's parameters
// are not JSON.
func New(opts Options) (*Parser, error) {
	tools, err := compileTools(opts.Tools)
	if err != nil {
		return nil, err
	}
	p := &Parser{tools: tools, newID: opts.NewID, mode: KindContent, callsAsText: opts.CallsAsText}
	if p.newID == nil {
		p.newID = randomID
	}
	if opts.Thinking {
		p.mode = KindReasoning
	}
	p.chans[0].kind = KindReasoning
	p.chans[1].kind = KindContent
	return p, nil
}

// Parse parses a whole reply; it gives what the events of a [Parser] fed
// the same text in any pieces add up to.
func Parse(text string, opts Options) (Result, error) {
	p, err := New(opts)
	if err != nil {
		return Result{}, err
	}
	var r Result
	for _, e := range p.Feed(text) {
		r.Add(e)
	}
	for _, e := range p.Close() {
		r.Add(e)
	}
	return r, nil
}

// idRandomBytes is how many random bytes a default call id holds.
const idRandomBytes = 12

func randomID(int) string {
	var b [idRandomBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "call_" + hex.EncodeToString(b[:])
}

// Feed parses the next piece of generated text and returns the events it
// settles. After Close it returns nothing.
func (p *Parser) Feed(delta string) []Event {
	if p.done {
		return nil
	}
	p.buf += delta
	for p.buf != "" && p.step(false) {
	}
	return p.flush()
}

// Close ends the reply: held-back text is decided as if nothing follows,
// and an unfinished call is closed.
func (p *Parser) Close() []Event {
	if p.done {
		return nil
	}
	for p.buf != "" && p.step(true) {
	}
	if p.st != inText {
		p.endCall()
	}
	p.done = true
	return p.flush()
}

func (p *Parser) flush() []Event {
	p.seal()
	out := p.events
	p.events = nil
	p.tail = p.tail[:0]
	return out
}

// emit appends an event, merging text into the previous event of the same
// kind and call. The last event's text grows in p.tail, so that merging
// many small pieces costs linear time.
func (p *Parser) emit(e Event) {
	if n := len(p.events); n > 0 && e.Kind != KindToolStart && e.Kind != KindToolEnd {
		if last := p.events[n-1]; last.Kind == e.Kind && last.Index == e.Index {
			p.tail = append(p.tail, e.Text...)
			return
		}
	}
	p.seal()
	p.events = append(p.events, e)
	p.tail = append(p.tail[:0], e.Text...)
}

// seal stores the text grown in p.tail into the last event.
func (p *Parser) seal() {
	if n := len(p.events); n > 0 {
		p.events[n-1].Text = string(p.tail)
	}
}

func (p *Parser) consume(n int) { p.buf = p.buf[n:] }

// passText sends the buffer's first n bytes to the current channel.
func (p *Parser) passText(n int) {
	p.text(p.buf[:n])
	p.consume(n)
}

// passValue adds the buffer's first n bytes to the current value.
func (p *Parser) passValue(n int) {
	p.valueText(p.buf[:n])
	p.consume(n)
}

// take matches tag at the start of the buffer and consumes it on yes.
func (p *Parser) take(tag string, eof bool) verdict {
	v := lit(p.buf, 0, tag, eof)
	if v == yes {
		p.consume(len(tag))
	}
	return v
}

// text sends reasoning or content text to the current channel.
func (p *Parser) text(s string) {
	ch := &p.chans[0]
	if p.mode == KindContent {
		ch = &p.chans[1]
	}
	end := len(s)
	for end > 0 && isSpace(s[end-1]) {
		end--
	}
	if end == 0 {
		if ch.started {
			ch.pending += s
		}
		return
	}
	head := s[:end]
	if !ch.started {
		head = head[skipSpace(head, 0):]
		ch.started = true
	}
	out := ch.pending + head
	ch.pending = s[end:]
	p.emit(Event{Kind: ch.kind, Text: out})
}

// boundary drops whitespace held before markup.
func (p *Parser) boundary() {
	p.chans[0].pending = ""
	p.chans[1].pending = ""
}

// step decides a prefix of the buffer. It returns false when it needs more
// text to decide (never when eof is set) or has used up the buffer.
func (p *Parser) step(eof bool) bool {
	switch p.st {
	case inFunction:
		return p.stepFunction(eof)
	case inValue:
		return p.stepValue(eof)
	case afterCall:
		return p.stepAfterCall(eof)
	}
	return p.stepText(eof)
}

func (p *Parser) stepText(eof bool) bool {
	s := p.buf
	i := strings.IndexByte(s, '<')
	if i < 0 {
		p.passText(len(s))
		return false
	}
	if i > 0 {
		p.passText(i)
		return true
	}
	vOpen := p.take(tagThinkOpen, eof)
	if vOpen == yes {
		p.boundary()
		p.mode = KindReasoning
		return true
	}
	vClose := p.take(tagThinkClose, eof)
	if vClose == yes {
		p.boundary()
		p.mode = KindContent
		return true
	}
	vCall, name, n := callOpen(s, 0, eof)
	if p.callsAsText {
		vCall = no
	}
	if vCall == yes {
		p.consume(n)
		p.startCall(name)
		return true
	}
	if first(vOpen, vClose, vCall) == more {
		return false
	}
	if lit(s, 0, tagCallOpen, eof) == yes {
		p.passText(len(tagCallOpen)) // a call tag with no function: plain text
		return true
	}
	p.passText(literalRun(s, "<"))
	return true
}

func (p *Parser) stepFunction(eof bool) bool {
	s := p.buf
	if s[0] != '<' {
		// Text in a call that belongs to no parameter. The layout newlines
		// between parameters come here too, and markup drops them.
		i := strings.IndexByte(s, '<')
		if i < 0 {
			i = len(s)
		}
		p.passText(i)
		return true
	}
	vParam, name, n := openTag(s, 0, tagParamOpen, eof)
	if vParam == yes {
		if n == len(s) && !eof {
			return false // a newline may follow that belongs to the markup
		}
		if n < len(s) && s[n] == '\n' {
			n++
		}
		p.consume(n)
		p.startParam(name)
		return true
	}
	vFunc := p.take(tagFunctionClose, eof)
	if vFunc == yes {
		p.boundary()
		p.st = afterCall
		return true
	}
	vCall := p.take(tagCallClose, eof)
	if vCall == yes {
		p.endCall()
		return true
	}
	vOut := first(lit(s, 0, tagCallOpen, eof), lit(s, 0, tagThinkOpen, eof), lit(s, 0, tagThinkClose, eof))
	if vOut == yes {
		p.endCall() // the call ended without its closing tags
		return true
	}
	if first(vParam, vFunc, vCall, vOut) == more {
		return false
	}
	p.passText(literalRun(s, "<"))
	return true
}

func (p *Parser) stepValue(eof bool) bool {
	s := p.buf
	i := strings.IndexAny(s, "<\n")
	if i < 0 {
		p.passValue(len(s))
		return false
	}
	if i > 0 {
		p.passValue(i)
		return true
	}
	implicitParam := !p.valueStarted
	if s[0] == '\n' {
		// The newline before the value's end is markup.
		i, implicitParam = 1, true
	}
	switch p.valueEnd(s, i, eof, implicitParam) {
	case yes:
		return true
	case more:
		return false
	}
	p.passValue(literalRun(s, "<\n"))
	return true
}

// literalRun returns the length of the text at s that is decided to be
// literal: its first byte, which matched no tag, and what follows up to
// the next byte of marks.
func literalRun(s, marks string) int {
	if i := strings.IndexAny(s[1:], marks); i >= 0 {
		return 1 + i
	}
	return len(s)
}

// valueEnd matches the end of a value at s[i:], where s[:i] is markup (the
// value's last newline) if the value ends there. On yes it has consumed
// s[:i] and the end tag and moved on to the next state.
func (p *Parser) valueEnd(s string, i int, eof, implicitParam bool) verdict {
	if i == len(s) {
		if !eof {
			return more
		}
		if i > 0 { // the value's last newline, at the end of the text
			p.consume(i)
			p.endValue()
			return yes
		}
		return no
	}
	vParam := p.takeClose(s, i, tagParamClose, eof,
		followParam|followFunctionClose|followCallClose|followCallOpen|followThinkClose|followEnd)
	if vParam == yes {
		p.endValue()
		return yes
	}
	vFunc := p.takeClose(s, i, tagFunctionClose, eof, followCallClose|followCallOpen|followThinkClose|followEnd)
	if vFunc == yes {
		p.endValue()
		p.st = afterCall
		return yes
	}
	vCall := p.takeClose(s, i, tagCallClose, eof, followCallOpen|followThinkClose|followEnd)
	if vCall == yes {
		p.endCall()
		return yes
	}
	vNext := no
	if implicitParam {
		// A parameter the call has not had yet, on a line of its own:
		// the model forgot "</parameter>".
		var name string
		vNext, name, _ = openTag(s, i, tagParamOpen, eof)
		if vNext == yes && (p.seen[name] || !p.fn.knows(name)) {
			vNext = no
		}
		if vNext == yes {
			p.consume(i)
			p.endValue()
			return yes
		}
	}
	return first(vParam, vFunc, vCall, vNext)
}

// takeClose matches the closing tag at s[i:] when one of the followers in
// set comes after it, and on yes consumes s[:i] and the tag: a value's text
// may hold what looks like its closing tag, so the tag alone decides nothing.
func (p *Parser) takeClose(s string, i int, tag string, eof bool, set follower) verdict {
	v := lit(s, i, tag, eof)
	if v == yes {
		v = p.follows(s, i+len(tag), eof, set)
		if v == yes {
			p.consume(i + len(tag))
		}
	}
	return v
}

func (p *Parser) stepAfterCall(eof bool) bool {
	s := p.buf
	if j := skipSpace(s, 0); j > 0 {
		p.consume(j)
		return true
	}
	vClose := p.take(tagCallClose, eof)
	if vClose == yes {
		p.endCall()
		return true
	}
	vFunc, name, n := openTag(s, 0, tagFunctionOpen, eof)
	if vFunc == yes {
		// Another function in the same <tool_call>: a second call.
		p.consume(n)
		p.endCall()
		p.startCall(name)
		return true
	}
	if first(vClose, vFunc) == more {
		return false
	}
	p.endCall() // "</tool_call>" is missing
	return true
}

func (p *Parser) startCall(name string) {
	p.boundary()
	index := p.calls
	p.calls++
	p.fn = p.tools[name]
	p.seen = map[string]bool{}
	p.args = 0
	p.st = inFunction
	p.emit(Event{Kind: KindToolStart, Index: index, ID: p.newID(index), Name: name})
	p.emit(Event{Kind: KindToolArgs, Index: index, Text: "{"})
}

func (p *Parser) startParam(name string) {
	p.boundary()
	p.seen[name] = true
	p.param = p.fn.typeOf(name)
	var b []byte
	if p.args > 0 {
		b = append(b, ',')
	}
	p.args++
	b = appendString(b, name)
	b = append(b, ':')
	if p.param.streams() {
		b = append(b, '"')
	}
	p.argsText(string(b))
	p.value = p.value[:0]
	p.valueStarted = false
	p.st = inValue
}

// argsText emits an arguments fragment of the current call.
func (p *Parser) argsText(s string) {
	p.emit(Event{Kind: KindToolArgs, Index: p.calls - 1, Text: s})
}

// valueText adds text to the current value.
func (p *Parser) valueText(s string) {
	p.valueStarted = true
	if p.param.streams() {
		// Escape straight into the growing arguments event.
		if n := len(p.events); n == 0 || p.events[n-1].Kind != KindToolArgs || p.events[n-1].Index != p.calls-1 {
			p.argsText("")
		}
		p.tail = appendEscaped(p.tail, s)
		return
	}
	p.value = append(p.value, s...)
}

// endValue finishes the current value and returns to the function body.
func (p *Parser) endValue() {
	if p.param.streams() {
		p.argsText(`"`)
	} else {
		p.argsText(string(convert(string(p.value), p.param)))
	}
	p.st = inFunction
}

// endCall closes the current call, and its value if one is open.
func (p *Parser) endCall() {
	if p.st == inValue {
		p.endValue()
	}
	p.argsText("}")
	p.emit(Event{Kind: KindToolEnd, Index: p.calls - 1})
	p.st = inText
	p.boundary()
}
