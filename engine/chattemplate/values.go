package chattemplate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"

	"petal/engine/jsonquote"
)

// decodeOrdered decodes JSON into template values, keeping the key order of
// objects: objects become *exec.Dict, arrays []any, integers int (as Python
// keeps them apart from floats), other numbers float64.
//
// It checks ctx every few thousand tokens: a request's tools and kwargs are
// decoded before it joins the queue, and a client that has gone must not
// keep a core busy.
func decodeOrdered(ctx context.Context, raw []byte) (any, error) {
	dec := &ctxDecoder{Decoder: json.NewDecoder(bytes.NewReader(raw)), ctx: ctx}
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("chattemplate: trailing data after JSON value")
	}
	return v, nil
}

// ctxDecoder is a json.Decoder whose Token fails once ctx is done.
type ctxDecoder struct {
	*json.Decoder
	ctx    context.Context
	tokens int
}

// ctxCheckEvery is how many tokens pass between checks of the context: a
// check costs about as much as decoding a token.
const ctxCheckEvery = 4096

func (d *ctxDecoder) Token() (json.Token, error) {
	d.tokens++
	if d.tokens%ctxCheckEvery == 0 {
		if err := d.ctx.Err(); err != nil {
			return nil, err
		}
	}
	return d.Decoder.Token()
}

func decodeValue(dec *ctxDecoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := newDictBuilder()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				d.set(k.(string), v)
			}
			_, err := dec.Token()
			return d.dict, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("chattemplate: unexpected %v in JSON", t)
	case json.Number:
		return jsonNumber(t), nil
	default:
		return t, nil
	}
}

func jsonNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return int(i)
	}
	f, _ := strconv.ParseFloat(string(n), 64)
	return f
}

// dictBuilder fills a dict in order, replacing an earlier value of a
// repeated key as Python's json.loads does while keeping its first position.
// Its index makes n keys cost O(n): a hostile body of 100k properties used
// to take minutes with a scan per key.
type dictBuilder struct {
	dict *exec.Dict
	at   map[string]*exec.Pair
}

func newDictBuilder() *dictBuilder {
	return &dictBuilder{dict: exec.NewDict(), at: map[string]*exec.Pair{}}
}

func (b *dictBuilder) set(k string, v any) {
	if p, ok := b.at[k]; ok {
		p.Value = exec.AsValue(v)
		return
	}
	p := &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)}
	b.at[k] = p
	b.dict.Pairs = append(b.dict.Pairs, p)
}

// setKey sets a key of a small dict the renderer builds itself (a message's
// few fields), with the same replacement rule as dictBuilder.
func setKey(d *exec.Dict, k string, v any) {
	for _, p := range d.Pairs {
		if p.Key.String() == k {
			p.Value = exec.AsValue(v)
			return
		}
	}
	d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
}

// unwrap returns the Go value under any number of *exec.Value wrappers,
// with named string types (gonja's Python strings) as plain strings.
func unwrap(v any) any {
	for {
		ev, ok := v.(*exec.Value)
		if !ok {
			if _, plain := v.(string); !plain && v != nil {
				if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
					return rv.String()
				}
			}
			return v
		}
		if ev == nil || !ev.Val.IsValid() {
			return nil
		}
		if !ev.Val.CanInterface() {
			return nil
		}
		v = ev.Val.Interface()
	}
}

// messageValue is the message as the template sees it: the fields that are
// set, in OpenAI order.
func messageValue(ctx context.Context, m Message) (*exec.Dict, error) {
	d := exec.NewDict()
	setKey(d, "role", m.Role)
	if m.Content != nil {
		switch {
		case m.Content.Text != nil:
			setKey(d, "content", *m.Content.Text)
		case m.Content.Parts != nil:
			parts := make([]any, 0, len(m.Content.Parts))
			for _, p := range m.Content.Parts {
				raw, err := p.MarshalJSON()
				if err != nil {
					return nil, err
				}
				v, err := decodeOrdered(ctx, raw)
				if err != nil {
					return nil, fmt.Errorf("content part: %w", err)
				}
				parts = append(parts, v)
			}
			setKey(d, "content", parts)
		default:
			setKey(d, "content", nil)
		}
	}
	if m.ReasoningContent != nil {
		setKey(d, "reasoning_content", *m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, 0, len(m.ToolCalls))
		for _, c := range m.ToolCalls {
			cd := exec.NewDict()
			if c.ID != "" {
				setKey(cd, "id", c.ID)
			}
			if c.Type != "" {
				setKey(cd, "type", c.Type)
			}
			fd := exec.NewDict()
			setKey(fd, "name", c.Function.Name)
			if len(c.Function.Arguments) > 0 {
				args, err := argumentsValue(ctx, c.Function.Arguments)
				if err != nil {
					return nil, fmt.Errorf("tool call %q arguments: %w", c.Function.Name, err)
				}
				setKey(fd, "arguments", args)
			}
			setKey(cd, "function", fd)
			calls = append(calls, cd)
		}
		setKey(d, "tool_calls", calls)
	}
	if m.ToolCallID != "" {
		setKey(d, "tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		setKey(d, "name", m.Name)
	}
	return d, nil
}

// argumentsValue decodes call arguments. A JSON string that holds a JSON
// object is decoded into that object (OpenAI clients send arguments that
// way, and Qwen3.5+ templates iterate them with |items); an empty string is
// an empty object (a call without arguments, as some clients send it); any
// other string stays a string.
func argumentsValue(ctx context.Context, raw json.RawMessage) (any, error) {
	v, err := decodeOrdered(ctx, raw)
	if err != nil {
		return nil, err
	}
	s, ok := v.(string)
	if !ok {
		return v, nil
	}
	if strings.TrimSpace(s) == "" {
		return exec.NewDict(), nil
	}
	if firstByte([]byte(s)) != '{' {
		return s, nil
	}
	obj, err := decodeOrdered(ctx, []byte(s))
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return s, nil
	}
	return obj, nil
}

// jsonOptions are the arguments of Python's json.dumps that tojson takes.
type jsonOptions struct {
	indent    string
	hasIndent bool
	itemSep   string
	keySep    string
	sortKeys  bool
}

// pyJSON writes v as Python's json.dumps(v, ensure_ascii=False) does.
func pyJSON(b *strings.Builder, v any, o *jsonOptions, depth int) error {
	if depth > maxValueDepth {
		return fmt.Errorf("%w: value nested deeper than %d", ErrLimit, maxValueDepth)
	}
	v = unwrap(v)
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		jsonquote.Write(b, x)
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloat(x))
		}
	case *exec.Dict:
		return pyJSONObject(b, dictPairs(x), o, depth)
	case exec.Dict:
		return pyJSONObject(b, dictPairs(&x), o, depth)
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b.WriteString(strconv.FormatInt(rv.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b.WriteString(strconv.FormatUint(rv.Uint(), 10))
		case reflect.Float32:
			b.WriteString(pyFloat(rv.Float()))
		case reflect.Slice, reflect.Array:
			items := make([]any, rv.Len())
			for i := range items {
				items[i] = rv.Index(i).Interface()
			}
			return pyJSONArray(b, items, o, depth)
		case reflect.Map:
			return pyJSONObject(b, mapPairs(rv), o, depth)
		default:
			//lint:ignore ST1005 Python's message, which a template may show
			return fmt.Errorf("Object of type %T is not JSON serializable", v)
		}
	}
	return nil
}

type pair struct {
	key string
	val any
}

func dictPairs(d *exec.Dict) []pair {
	out := make([]pair, 0, len(d.Pairs))
	for _, p := range d.Pairs {
		out = append(out, pair{p.Key.String(), p.Value})
	}
	return out
}

// mapDict is a Go map as a dict, in mapPairs' order (a Go map has no
// repeated keys, so no lookup is needed).
func mapDict(rv reflect.Value) *exec.Dict {
	d := exec.NewDict()
	for _, p := range mapPairs(rv) {
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(p.key), Value: exec.AsValue(p.val)})
	}
	return d
}

// mapPairs lists a Go map (a namespace or dict() result) in key order, since
// Go keeps no insertion order.
func mapPairs(rv reflect.Value) []pair {
	out := make([]pair, 0, rv.Len())
	for _, k := range rv.MapKeys() {
		out = append(out, pair{fmt.Sprint(k.Interface()), rv.MapIndex(k).Interface()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

func (o *jsonOptions) newline(b *strings.Builder, depth int) {
	if o.hasIndent {
		b.WriteByte('\n')
		for range depth {
			b.WriteString(o.indent)
		}
	}
}

func pyJSONArray(b *strings.Builder, items []any, o *jsonOptions, depth int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		o.newline(b, depth+1)
		if err := pyJSON(b, it, o, depth+1); err != nil {
			return err
		}
	}
	o.newline(b, depth)
	b.WriteByte(']')
	return nil
}

func pyJSONObject(b *strings.Builder, pairs []pair, o *jsonOptions, depth int) error {
	if len(pairs) == 0 {
		b.WriteString("{}")
		return nil
	}
	if o.sortKeys {
		pairs = append([]pair(nil), pairs...)
		sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].key < pairs[j].key })
	}
	b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		o.newline(b, depth+1)
		jsonquote.Write(b, p.key)
		b.WriteString(o.keySep)
		if err := pyJSON(b, p.val, o, depth+1); err != nil {
			return err
		}
	}
	o.newline(b, depth)
	b.WriteByte('}')
	return nil
}

// pyFloat formats f as Python's repr(float) does: the shortest digits that
// round-trip, exponent form below 1e-4 and from 1e16, and ".0" on integers.
func pyFloat(f float64) string {
	// Python's repr writes a float without an exponent from 1e-4 up to,
	// not including, 1e16.
	const pyFloatMinPlainExp, pyFloatMaxPlainExp = -4, 16
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < pyFloatMinPlainExp || exp >= pyFloatMaxPlainExp {
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// pyStr converts a value to text as Jinja's output and Python's str() do;
// nil stands for both None and undefined and prints as undefined does.
func pyStr(v any) (string, error) {
	v = unwrap(v)
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	}
	var b strings.Builder
	if err := pyRepr(&b, v, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

// pyRepr writes Python's repr of v.
func pyRepr(b *strings.Builder, v any, depth int) error {
	if depth > maxValueDepth {
		return fmt.Errorf("%w: value nested deeper than %d", ErrLimit, maxValueDepth)
	}
	if b.Len() > MaxStringBytes {
		return fmt.Errorf("%w: text of a value over %d bytes", ErrLimit, MaxStringBytes)
	}
	v = unwrap(v)
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case string:
		pyQuote(b, x)
	case float64:
		b.WriteString(pyFloat(x))
	case *exec.Dict:
		return pyReprPairs(b, dictPairs(x), depth)
	case exec.Dict:
		return pyReprPairs(b, dictPairs(&x), depth)
	case fmt.Stringer:
		// Macro results and loop helpers print themselves.
		b.WriteString(x.String())
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b.WriteString(strconv.FormatInt(rv.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b.WriteString(strconv.FormatUint(rv.Uint(), 10))
		case reflect.Slice, reflect.Array:
			b.WriteByte('[')
			for i := range rv.Len() {
				if i > 0 {
					b.WriteString(", ")
				}
				if err := pyRepr(b, rv.Index(i).Interface(), depth+1); err != nil {
					return err
				}
			}
			b.WriteByte(']')
		case reflect.Map:
			return pyReprPairs(b, mapPairs(rv), depth)
		default:
			fmt.Fprintf(b, "%v", v)
		}
	}
	return nil
}

func pyReprPairs(b *strings.Builder, pairs []pair, depth int) error {
	b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(", ")
		}
		pyQuote(b, p.key)
		b.WriteString(": ")
		if err := pyRepr(b, p.val, depth+1); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// pyQuote writes Python's repr of a string: single quotes unless the text
// holds a single quote and no double quote.
func pyQuote(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case !unicode.IsPrint(r) && r != ' ':
			switch {
			case r <= 0xff:
				fmt.Fprintf(b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}
