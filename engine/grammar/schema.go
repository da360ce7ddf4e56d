package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Limits of a compiled grammar.
const (
	// MaxSchemaBytes bounds the schema's JSON.
	MaxSchemaBytes = 1 << 20
	// MaxNodes bounds the compiled schema nodes ($ref targets are compiled
	// once).
	MaxNodes = 10_000
	// MaxProperties bounds the properties of one object.
	MaxProperties = 64
	// MaxAlternatives bounds the alternatives of an anyOf or enum.
	MaxAlternatives = 256
	// MaxDepth bounds the nesting of the values a grammar allows, where a
	// schema leaves it open (free JSON, recursive $refs).
	MaxDepth = 32
	// MaxWhitespace bounds the whitespace between two tokens of the JSON
	// text, so that a reply cannot spend its tokens on blank space.
	MaxWhitespace = 8
	// MaxNumberBytes bounds the length of a number.
	MaxNumberBytes = 24
	// MaxFlatAlternatives bounds the alternatives of an anyOf once the
	// anyOfs, enums and references nested in it are merged into it.
	MaxFlatAlternatives = 1024
)

// maxFrames bounds a matcher's stack: a value's frame and, inside an
// object, its key's; MaxDepth values nest in it.
const maxFrames = 2 * MaxDepth

// noValue is the need of a node no value obeys within maxFrames.
const noValue = maxFrames + 1

// ErrSchema marks a schema that cannot be compiled; the error is a
// *SchemaError.
var ErrSchema = errors.New("grammar: schema cannot be compiled")

// SchemaError names the keyword of the schema that cannot be compiled.
type SchemaError struct {
	Keyword string // the JSON Schema keyword, such as "pattern"
	Path    string // where, as a JSON pointer into the schema
	Reason  string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("schema keyword %q at %q: %s", e.Keyword, e.Path, e.Reason)
}

// Is makes a SchemaError match ErrSchema.
func (e *SchemaError) Is(target error) bool { return target == ErrSchema }

type kind uint8

const (
	kAny kind = iota // any JSON value
	kObject
	kArray
	kString
	kNumber
	kInteger
	kLiteral // one JSON text: true, false, null, an enum or const value
	kAlt     // any one of alts
	kRef     // a $ref, until Compile resolves it to its target

	// The markup of a tool call (ToolCall), which takes no whitespace
	// around it as JSON does.
	kSeq    // alts, one after the other (those marked optional may be left out)
	kText   // text, byte for byte
	kRaw    // raw text up to and including items, a kText (see stepRaw)
	kChoice // any one of alts, which are markup
)

// node is one compiled schema.
type node struct {
	kind kind
	// id names the node in a matcher's state keys: nodes that accept the
	// same texts share one (Compile merges them), so readings that differ
	// only by which of two identical alternatives they took are one.
	id int32
	// need is the frames the smallest value of the node takes on a
	// matcher's stack, its own included; noValue when none fits.
	need uint8
	// at is where the node is in the schema, for errors.
	at *loc
	// objects: the listed properties (only they may appear, each once,
	// in any order) or, with none listed, keys of any name whose values
	// obey extra.
	props    []prop
	required uint64
	extra    *node
	// arrays
	items              *node
	minItems, maxItems int // maxItems < 0: no bound
	// strings
	minLen, maxLen int // maxLen < 0: no bound
	// numbers
	min, max         float64
	exclMin, exclMax bool
	bounded          bool
	// literals: the text, and the rest of the schema of an enum or const,
	// which the value must obey too (nil: none). References: the $ref.
	text   string
	within *node
	// alternatives; a reference's target is alts[0]; a sequence's elements
	alts []*node
	// optional: an element of a sequence that may be left out
	optional bool
}

type prop struct {
	name string
	key  string // the name as a JSON string, quotes included
	node *node
}

// loc is a place in the schema: a JSON pointer kept as a chain of
// segments, so that compiling a deep schema does not copy its path at
// every level; the pointer is written out only for an error.
type loc struct {
	parent *loc
	seg    string // a member name, unescaped, or a reference's pointer (raw)
	index  int    // an array index when seg is "", else -1
	raw    bool
}

func (l *loc) child(seg string) *loc        { return &loc{parent: l, seg: seg, index: -1} }
func (l *loc) element(i int) *loc           { return &loc{parent: l, index: i} }
func (l *loc) keyword(k string, i int) *loc { return l.child(k).element(i) }

// String writes l as a JSON pointer.
func (l *loc) String() string {
	var segs []*loc
	for p := l; p != nil; p = p.parent {
		segs = append(segs, p)
		if p.raw {
			break
		}
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		p := segs[i]
		switch {
		case p.raw:
			b.WriteString(p.seg)
		case p.seg == "" && p.index >= 0:
			fmt.Fprintf(&b, "/%d", p.index)
		default:
			b.WriteString("/" + escapePointer(p.seg))
		}
	}
	return b.String()
}

// Grammar is a compiled schema: the JSON texts a reply may be.
type Grammar struct {
	root *node
}

// JSONObject is the grammar of json_object mode: any JSON object.
func JSONObject() *Grammar { return &Grammar{root: anyObject} }

// Compile compiles a JSON Schema: the subset that structured-output clients
// send (type, properties, required, additionalProperties, items, minItems,
// maxItems, enum, const, minLength, maxLength, minimum, maximum and their
// exclusive forms, anyOf, oneOf, allOf of one schema, $ref into $defs or
// definitions; beside anyOf, oneOf or $ref only annotations). A keyword
// outside it that changes what is valid is an error naming it;
// annotations (title, description, default, examples, $schema, strict)
// are ignored. So is a schema that no value obeys, or
// none within MaxDepth levels, and a reference that comes back to itself
// before any value opens (it would recurse without reading a byte).
func Compile(schema []byte) (*Grammar, error) {
	if len(schema) > MaxSchemaBytes {
		return nil, &SchemaError{Keyword: "", Path: "", Reason: fmt.Sprintf("the schema has %d bytes, more than %d", len(schema), MaxSchemaBytes)}
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, &SchemaError{Path: "", Reason: "the schema is not JSON: " + err.Error()}
	}
	c := &compiler{doc: doc, refs: map[string]*node{}}
	root, err := c.compile(doc, nil)
	if err != nil {
		return nil, err
	}
	if root, err = c.finish(root); err != nil {
		return nil, err
	}
	return &Grammar{root: root}, nil
}

type compiler struct {
	doc  any
	refs map[string]*node
	// all are the nodes compiled, children before their parents but for
	// references.
	all []*node
}

// annotations change nothing that is valid.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true, "$id": true,
	"$comment": true, "strict": true, "$defs": true, "definitions": true, "deprecated": true, "readOnly": true,
	"writeOnly": true, "name": true, "propertyOrdering": true, "nullable": true,
}

func fail(keyword string, at *loc, format string, args ...any) error {
	return &SchemaError{Keyword: keyword, Path: at.String(), Reason: fmt.Sprintf(format, args...)}
}

func (c *compiler) newNode(n node, at *loc) (*node, error) {
	if len(c.all) >= MaxNodes {
		return nil, fail("", at, "the schema compiles to more than %d nodes", MaxNodes)
	}
	n.at = at
	c.all = append(c.all, &n)
	return &n, nil
}

func (c *compiler) compile(v any, at *loc) (*node, error) {
	switch s := v.(type) {
	case bool:
		if !s {
			return nil, fail("false", at, "a schema that allows nothing cannot be generated")
		}
		return anyNode, nil
	case map[string]any:
		return c.compileObject(s, at)
	}
	return nil, fail("", at, "a schema must be an object or a boolean")
}

func (c *compiler) compileObject(s map[string]any, at *loc) (*node, error) {
	if ref, ok := s["$ref"]; ok {
		// Beside a $ref, a keyword says more of the same value; only
		// annotations are taken there.
		if k := firstNot(s, "$ref"); k != "" {
			return nil, fail(k, at, "this keyword beside $ref is not supported")
		}
		return c.ref(ref, at)
	}
	for k := range s {
		if !annotations[k] && !handled[k] {
			return nil, fail(k, at, "this keyword is not supported for structured outputs")
		}
	}
	if raw, ok := s["const"]; ok {
		return c.literals("const", []any{raw}, s, at)
	}
	if raw, ok := s["enum"]; ok {
		list, ok := raw.([]any)
		if !ok || len(list) == 0 || len(list) > MaxAlternatives {
			return nil, fail("enum", at, "enum must list 1 to %d values", MaxAlternatives)
		}
		return c.literals("enum", list, s, at)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if raw, ok := s[k]; ok {
			// oneOf is taken as anyOf: the branches real clients send
			// (a type or null, tagged variants) do not overlap.
			return c.alternatives(k, raw, s, at)
		}
	}
	if raw, ok := s["allOf"]; ok {
		list, ok := raw.([]any)
		if !ok || len(list) != 1 {
			return nil, fail("allOf", at, "only an allOf of exactly one schema is supported")
		}
		return c.compile(list[0], at.keyword("allOf", 0))
	}
	types, err := typeList(s, at)
	if err != nil {
		return nil, err
	}
	if nullable, _ := s["nullable"].(bool); nullable && len(types) > 0 && !slices.Contains(types, "null") {
		types = append(types, "null")
	}
	if len(types) == 0 {
		types = inferType(s)
	}
	if len(types) == 0 {
		return anyNode, nil
	}
	alts := make([]*node, 0, len(types))
	for _, t := range types {
		n, err := c.typed(t, s, at)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.newNode(node{kind: kAlt, alts: alts}, at)
}

// handled are the keywords the compiler reads.
var handled = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true,
	"minItems": true, "maxItems": true, "enum": true, "const": true, "minLength": true, "maxLength": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"anyOf": true, "oneOf": true, "allOf": true, "$ref": true,
}

func typeList(s map[string]any, at *loc) ([]string, error) {
	switch t := s["type"].(type) {
	case nil:
		return nil, nil
	case string:
		return []string{t}, nil
	case []any:
		if len(t) == 0 {
			// Nothing has no type: JSON Schema requires at least one.
			return nil, fail("type", at, "type must name at least one type")
		}
		var out []string
		for _, e := range t {
			name, ok := e.(string)
			if !ok {
				return nil, fail("type", at, "type must be a name or a list of names")
			}
			out = append(out, name)
		}
		return out, nil
	}
	return nil, fail("type", at, "type must be a name or a list of names")
}

// inferType reads the type from the keywords when "type" is missing, as
// clients leave it out of objects with properties.
func inferType(s map[string]any) []string {
	switch {
	case s["properties"] != nil || s["additionalProperties"] != nil || s["required"] != nil:
		return []string{"object"}
	case s["items"] != nil:
		return []string{"array"}
	}
	return nil
}

func (c *compiler) typed(t string, s map[string]any, at *loc) (*node, error) {
	switch t {
	case "object":
		return c.object(s, at)
	case "array":
		n := node{kind: kArray, maxItems: -1, maxLen: -1}
		var err error
		if n.minItems, n.maxItems, err = bounds(s, "minItems", "maxItems", at); err != nil {
			return nil, err
		}
		n.items = anyNode
		if raw, ok := s["items"]; ok {
			if n.items, err = c.compile(raw, at.child("items")); err != nil {
				return nil, err
			}
		}
		return c.newNode(n, at)
	case "string":
		n := node{kind: kString, maxItems: -1}
		var err error
		if n.minLen, n.maxLen, err = bounds(s, "minLength", "maxLength", at); err != nil {
			return nil, err
		}
		return c.newNode(n, at)
	case "number", "integer":
		n := node{kind: kNumber, maxItems: -1, maxLen: -1, min: math.Inf(-1), max: math.Inf(1)}
		if t == "integer" {
			n.kind = kInteger
		}
		for _, b := range []struct {
			key   string
			dst   *float64
			excl  *bool
			isMax bool
		}{{"minimum", &n.min, nil, false}, {"maximum", &n.max, nil, true},
			{"exclusiveMinimum", &n.min, &n.exclMin, false}, {"exclusiveMaximum", &n.max, &n.exclMax, true}} {
			raw, ok := s[b.key]
			if !ok {
				continue
			}
			num, ok := raw.(json.Number)
			f, err := num.Float64()
			if !ok || err != nil {
				return nil, fail(b.key, at, "%s must be a number", b.key)
			}
			*b.dst = f
			if b.excl != nil {
				*b.excl = true
			}
			n.bounded = true
		}
		if !hasNumber(&n) {
			return nil, fail("minimum", at, "no %s of at most %d characters (bounded numbers have no exponent) lies between the bounds", t, MaxNumberBytes)
		}
		return c.newNode(n, at)
	case "boolean":
		return c.newNode(node{kind: kAlt, alts: []*node{trueNode, falseNode}}, at)
	case "null":
		return nullNode, nil
	}
	return nil, fail("type", at, "unknown type %q", t)
}

func bounds(s map[string]any, lo, hi string, at *loc) (int, int, error) {
	minV, maxV := 0, -1
	for _, b := range []struct {
		key string
		dst *int
	}{{lo, &minV}, {hi, &maxV}} {
		raw, ok := s[b.key]
		if !ok {
			continue
		}
		num, _ := raw.(json.Number)
		v, err := num.Int64()
		if err != nil || v < 0 || v > math.MaxInt32 {
			return 0, 0, fail(b.key, at, "%s must be a non-negative integer", b.key)
		}
		*b.dst = int(v)
	}
	if maxV >= 0 && minV > maxV {
		return 0, 0, fail(lo, at, "%s %d exceeds %s %d", lo, minV, hi, maxV)
	}
	return minV, maxV, nil
}

func (c *compiler) object(s map[string]any, at *loc) (*node, error) {
	n := node{kind: kObject, maxItems: -1, maxLen: -1}
	props, _ := s["properties"].(map[string]any)
	if s["properties"] != nil && props == nil {
		return nil, fail("properties", at, "properties must be an object")
	}
	if len(props) > MaxProperties {
		return nil, fail("properties", at, "%d properties are more than the %d supported", len(props), MaxProperties)
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names) // any order is allowed; this one is stable
	var propsAt *loc
	if len(names) > 0 {
		propsAt = at.child("properties")
	}
	for _, name := range names {
		sub, err := c.compile(props[name], propsAt.child(name))
		if err != nil {
			return nil, err
		}
		key, _ := json.Marshal(name)
		n.props = append(n.props, prop{name: name, key: string(key), node: sub})
	}
	if raw, ok := s["required"]; ok {
		list, ok := raw.([]any)
		if !ok {
			return nil, fail("required", at, "required must be a list of names")
		}
		for _, r := range list {
			name, _ := r.(string)
			i := slices.IndexFunc(n.props, func(p prop) bool { return p.name == name })
			if i < 0 {
				return nil, fail("required", at, "required names %q, which is not among the properties", name)
			}
			n.required |= 1 << i
		}
	}
	if len(n.props) == 0 {
		// Keys of any name; their values obey additionalProperties.
		n.extra = anyNode
		switch extra := s["additionalProperties"].(type) {
		case nil:
		case bool:
			if !extra {
				n.extra = nil // only {}
			}
		default:
			sub, err := c.compile(extra, at.child("additionalProperties"))
			if err != nil {
				return nil, err
			}
			n.extra = sub
		}
	}
	// With properties listed, only they are generated: that obeys the
	// schema whatever additionalProperties says.
	return c.newNode(n, at)
}

// firstNot is the first keyword of s, in sorted order, other than keyword
// and the annotations; "" if none.
func firstNot(s map[string]any, keyword string) string {
	first := ""
	for k := range s {
		if k != keyword && !annotations[k] && (first == "" || k < first) {
			first = k
		}
	}
	return first
}

func (c *compiler) alternatives(keyword string, raw any, s map[string]any, at *loc) (*node, error) {
	list, ok := raw.([]any)
	if !ok || len(list) == 0 || len(list) > MaxAlternatives {
		return nil, fail(keyword, at, "%s must list 1 to %d schemas", keyword, MaxAlternatives)
	}
	if k := firstNot(s, keyword); k != "" {
		return nil, fail(k, at, "this keyword beside %s is not supported", keyword)
	}
	alts := make([]*node, 0, len(list))
	for i, sub := range list {
		n, err := c.compile(sub, at.keyword(keyword, i))
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	return c.newNode(node{kind: kAlt, alts: alts}, at)
}

// ref compiles a local reference once, to a node that stands for its
// target until Compile resolves it: a reference met again while its target
// compiles gets that node, which is what makes recursion possible.
func (c *compiler) ref(raw any, at *loc) (*node, error) {
	ref, _ := raw.(string)
	if n, ok := c.refs[ref]; ok {
		return n, nil
	}
	target, ok := c.resolve(ref)
	if !ok {
		return nil, fail("$ref", at, "%q is no local reference into $defs or definitions", ref)
	}
	n, err := c.newNode(node{kind: kRef, text: ref}, at.child("$ref"))
	if err != nil {
		return nil, err
	}
	c.refs[ref] = n
	compiled, err := c.compile(target, &loc{seg: ref[1:], index: -1, raw: true})
	if err != nil {
		return nil, err
	}
	n.alts = []*node{compiled}
	return n, nil
}

func (c *compiler) resolve(ref string) (any, bool) {
	if ref == "#" {
		return c.doc, true
	}
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, false
	}
	cur := c.doc
	for part := range strings.SplitSeq(rest, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// literals compiles the values of a const or an enum to their compact JSON
// texts; the rest of the schema beside them, when it says more than they
// do, is compiled too, and Compile keeps only the values that obey it.
func (c *compiler) literals(keyword string, values []any, s map[string]any, at *loc) (*node, error) {
	var within *node
	rest := map[string]any{}
	for k, v := range s {
		if k != "enum" && k != "const" && !annotations[k] {
			rest[k] = v
		}
	}
	if len(rest) > 0 {
		if nullable, ok := s["nullable"]; ok {
			rest["nullable"] = nullable // it widens the type the values obey
		}
		var err error
		if within, err = c.compileObject(rest, at); err != nil {
			return nil, err
		}
	}
	alts := make([]*node, 0, len(values))
	for i, v := range values {
		vat := at.child(keyword)
		if keyword == "enum" {
			vat = vat.element(i)
		}
		text, err := json.Marshal(v)
		if err != nil {
			return nil, fail(keyword, vat, "the value cannot be written as JSON")
		}
		n, err := c.newNode(node{kind: kLiteral, text: string(text), within: within, maxItems: -1}, vat)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.newNode(node{kind: kAlt, alts: alts}, at)
}
