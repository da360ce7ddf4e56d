package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Tool is a function a forced tool call may name: its name and the JSON
// Schema of its arguments object (OpenAI's "parameters").
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// The markup of a call in the Qwen3.5/3.6 chat templates: the template
// writes each argument's value as raw text, strings as they are and other
// values as JSON, and engine/reply reads it back the same way.
const (
	callOpen       = "<tool_call>\n<function="
	callNameEnd    = ">\n"
	paramOpen      = "<parameter="
	paramNameEnd   = ">\n"
	paramClose     = "\n</parameter>\n"
	callClose      = "</function>\n</tool_call>"
	forbiddenOpen  = '<'
	markupNameStop = ">\n"
)

// rawForbidden are the closing tags a raw value may not hold: engine/reply
// ends a value at any of them, so a value holding one would be cut there.
var rawForbidden = [...]string{"</parameter>", "</function>", "</tool_call>"}

// toolFrames is the depth of the markup around a parameter's JSON value:
// the function's body and the parameter's sequence.
const toolFrames = 2

// ToolCall is the grammar of one call of one of tools, in the chat
// template's form, after at most two newlines: the function named, its
// required parameters each once, its optional ones at will, in the order
// the schema lists them, each value obeying its schema (a string
// parameter as raw text, an enum of strings as one of them, anything else
// as JSON). A property with a keyword Compile does not enforce is loosened
// (see argumentsNode); a schema Compile finds wrong is refused with its
// SchemaError, under the tool's name.
func ToolCall(tools []Tool) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, &SchemaError{Reason: "a forced tool call needs at least one tool"}
	}
	choice := &node{kind: kChoice, need: 1}
	for _, t := range tools {
		body, err := toolBody(t)
		if err != nil {
			return nil, err
		}
		choice.alts = append(choice.alts, body)
		choice.need = max(choice.need, body.need)
	}
	// Up to two newlines may come first, as after "</think>".
	lead := []*node{textNode("\n"), textNode("\n")}
	for _, n := range lead {
		n.optional = true
	}
	root := &node{kind: kSeq, alts: append(lead, textNode(callOpen), choice)}
	root.need = 1 + choice.need
	numberMarkup(root, map[*node]bool{})
	return &Grammar{root: root}, nil
}

func textNode(s string) *node { return &node{kind: kText, need: 1, text: s} }

// firstMarkupID is the first id of a markup node, above any a compiled
// schema's nodes take (at most MaxNodes from firstID), so that states are
// told apart by hash.
const firstMarkupID = firstID + MaxNodes

// numberMarkup gives the markup nodes under n their ids.
func numberMarkup(n *node, seen map[*node]bool) {
	if n.kind < kSeq || seen[n] {
		return
	}
	seen[n] = true
	n.id = int32(firstMarkupID + len(seen))
	for _, c := range append([]*node{n.items}, n.alts...) {
		if c != nil {
			numberMarkup(c, seen)
		}
	}
}

// toolBody is the grammar of one tool's call after "<function=".
func toolBody(t Tool) (*node, error) {
	if t.Name == "" || strings.ContainsAny(t.Name, markupNameStop) {
		return nil, &SchemaError{Keyword: "name", Reason: fmt.Sprintf("the tool name %q cannot be written in a call", t.Name)}
	}
	body := &node{kind: kSeq, need: 1, alts: []*node{textNode(t.Name + callNameEnd)}}
	params := bytes.TrimSpace(t.Parameters)
	if len(params) > 0 && string(params) != "null" {
		root, err := argumentsNode(params)
		if err != nil {
			if se := (*SchemaError)(nil); errors.As(err, &se) {
				return nil, &SchemaError{Keyword: se.Keyword, Path: se.Path, Reason: fmt.Sprintf("tool %q: %s", t.Name, se.Reason)}
			}
			return nil, err
		}
		if root.kind == kObject && root.props != nil {
			for _, name := range propertyOrder(params, root.props) {
				i := propIndex(root.props, name)
				p := root.props[i]
				if strings.ContainsAny(p.name, markupNameStop) {
					return nil, &SchemaError{Keyword: "properties", Path: "/properties/" + escapePointer(p.name), Reason: fmt.Sprintf("tool %q: the parameter name cannot be written in a call", t.Name)}
				}
				if int(p.node.need)+toolFrames+1 > maxFrames {
					return nil, &SchemaError{Keyword: "properties", Path: "/properties/" + escapePointer(p.name), Reason: fmt.Sprintf("tool %q: the value nests deeper than a call may hold open", t.Name)}
				}
				param := paramNode(p)
				param.optional = root.required&(1<<i) == 0
				body.alts = append(body.alts, param)
				body.need = max(body.need, 1+param.need)
			}
		}
	}
	body.alts = append(body.alts, textNode(callClose))
	return body, nil
}

// argumentsNode compiles a tool's parameters. Tool schemas are written
// for prompts, not for Compile's subset (pydantic's "format": "date-time",
// a "pattern"), and a forced call must still be possible: where the whole
// schema does not compile, each property is compiled by itself (beside the
// schema's $defs), and one that does not compile either takes any string
// when its type is string, else any JSON value.
func argumentsNode(params []byte) (*node, error) {
	g, err := Compile(params)
	switch {
	case err == nil:
		return g.root, nil
	case !unsupported(err):
		return nil, err
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(params, &doc) != nil {
		return nil, err
	}
	var props map[string]json.RawMessage
	var required []string
	if json.Unmarshal(doc["properties"], &props) != nil || len(props) > MaxProperties {
		return nil, err
	}
	if raw, ok := doc["required"]; ok && json.Unmarshal(raw, &required) != nil {
		return nil, err
	}
	root := &node{kind: kObject, need: 1, maxItems: -1, maxLen: -1}
	for name, sub := range props {
		n, err := looseValue(sub, doc)
		if err != nil {
			return nil, err
		}
		root.props = append(root.props, prop{name: name, node: n})
	}
	slices.SortFunc(root.props, func(a, b prop) int { return strings.Compare(a.name, b.name) })
	for _, r := range required {
		i := propIndex(root.props, r)
		if i < 0 {
			return nil, err
		}
		root.required |= 1 << i
		root.need = max(root.need, 1+root.props[i].node.need)
	}
	return root, nil
}

// looseValue compiles one property's schema, with the $defs and
// definitions of the schema it is in; see argumentsNode.
func looseValue(sub json.RawMessage, doc map[string]json.RawMessage) (*node, error) {
	var s map[string]json.RawMessage
	if json.Unmarshal(sub, &s) != nil {
		return anyNode, nil
	}
	for _, k := range []string{"$defs", "definitions"} {
		if _, ok := s[k]; !ok && doc[k] != nil {
			s[k] = doc[k]
		}
	}
	text, err := json.Marshal(s)
	if err != nil {
		return anyNode, nil
	}
	g, err := Compile(text)
	switch {
	case err == nil:
		return g.root, nil
	case !unsupported(err):
		return nil, err // a schema no value obeys stays refused
	case string(bytes.TrimSpace(s["type"])) == `"string"`:
		return anyString, nil
	}
	return anyNode, nil
}

// unsupported reports a SchemaError naming a keyword Compile does not
// read, rather than one that says the schema is wrong.
func unsupported(err error) bool {
	var se *SchemaError
	return errors.As(err, &se) && se.Keyword != "" && !handled[se.Keyword] && !annotations[se.Keyword]
}

func propIndex(props []prop, name string) int {
	for i, p := range props {
		if p.name == name {
			return i
		}
	}
	return -1
}

// paramNode is the grammar of one parameter: its tag, its value, its end.
func paramNode(p prop) *node {
	open := textNode(paramOpen + p.name + paramNameEnd)
	seq := &node{kind: kSeq, alts: []*node{open}}
	switch words, ok := stringEnum(p.node); {
	case p.node.kind == kString:
		seq.alts = append(seq.alts, &node{kind: kRaw, need: 1, items: textNode(paramClose)})
	case ok:
		choice := &node{kind: kChoice, need: 1}
		for _, w := range words {
			choice.alts = append(choice.alts, textNode(w+paramClose))
		}
		seq.alts = append(seq.alts, choice)
	default:
		seq.alts = append(seq.alts, p.node, textNode(paramClose))
	}
	seq.need = 1 + p.node.need
	return seq
}

// stringEnum reads an enum or const whose values are all strings: the
// template writes them unquoted.
func stringEnum(n *node) ([]string, bool) {
	alts := []*node{n}
	if n.kind == kAlt {
		alts = n.alts
	}
	var words []string
	for _, a := range alts {
		var w string
		if a.kind != kLiteral || json.Unmarshal([]byte(a.text), &w) != nil {
			return nil, false
		}
		words = append(words, w)
	}
	return words, true
}

// propertyOrder lists the names of props in the order the schema's
// "properties" writes them, which is the order the model was shown; the
// compiled object keeps them sorted.
func propertyOrder(schema []byte, props []prop) []string {
	var s struct {
		Properties json.RawMessage `json:"properties"`
	}
	var names []string
	if json.Unmarshal(schema, &s) == nil {
		dec := json.NewDecoder(bytes.NewReader(s.Properties))
		if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
			for dec.More() {
				tok, err := dec.Token()
				key, ok := tok.(string)
				var skip json.RawMessage
				if err != nil || !ok || dec.Decode(&skip) != nil {
					break
				}
				if propIndex(props, key) >= 0 && !slices.Contains(names, key) {
					names = append(names, key)
				}
			}
		}
	}
	for _, p := range props { // any the walk missed, sorted
		if !slices.Contains(names, p.name) {
			names = append(names, p.name)
		}
	}
	return names
}

// startMarkup reads the first byte of a node of the call's markup, which,
// unlike a JSON value, takes no whitespace before it.
func startMarkup(s stack, f frame, b byte, out []stack) []stack {
	switch n := f.n; n.kind {
	case kText:
		return step(s.with(frame{n: n, st: stLiteral}), b, out)
	case kRaw: // its end is paramClose, which rawTable marks
		f = frame{n: n, st: stRaw}
		return stepRaw(s.with(f), f, b, out)
	case kChoice:
		for _, a := range n.alts {
			out = startValue(s.with(frame{n: a}), frame{n: a}, b, out)
		}
		return out
	case kSeq:
		return stepSeq(s, frame{n: n, st: stSeq}, b, out)
	}
	return out
}

// stepSeq starts the sequence's element f.count with b, or an optional
// one after it. The last element, never optional in what ToolCall builds,
// takes the sequence's place, so the sequence is done when it is.
func stepSeq(s stack, f frame, b byte, out []stack) []stack {
	elems := f.n.alts
	for i := int(f.count); i < len(elems); i++ {
		e := elems[i]
		next := s.with(frame{n: e})
		if i < len(elems)-1 {
			g := f
			g.count = int32(i + 1)
			next = s.push(g, frame{n: e})
		}
		out = startValue(next, frame{n: e}, b, out)
		if !e.optional {
			break
		}
	}
	return out
}

// stepRaw reads a byte of a raw value: any UTF-8 text without the tags
// of rawForbidden, then its end (f.n.items). f.count is how much of a
// forbidden tag the text ends with, f.cands which tags that may be.
func stepRaw(s stack, f frame, b byte, out []stack) []stack {
	if end := f.n.items; f.cont == 0 && b == end.text[0] {
		if len(end.text) == 1 {
			out = append(out, s.pop())
		} else {
			out = append(out, s.with(frame{n: end, st: stLiteral, count: 1}))
		}
	}
	g := f
	var ok bool
	if g.cont, ok = utf8Byte(f.cont, b); !ok {
		return out
	}
	var cands uint64
	if f.count > 0 {
		for i, tag := range rawForbidden {
			if f.cands&(1<<i) != 0 && tag[f.count] == b {
				if int(f.count)+1 == len(tag) {
					return out
				}
				cands |= 1 << i
			}
		}
	}
	switch {
	case cands != 0:
		g.count, g.cands = f.count+1, cands
	case b == forbiddenOpen:
		g.count, g.cands = 1, 1<<len(rawForbidden)-1
	default:
		g.count, g.cands = 0, 0
	}
	if g == f {
		return append(out, s) // plain text leaves the state as it is
	}
	return append(out, s.with(g))
}
