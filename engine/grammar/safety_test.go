package grammar

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// crashSchemas overflowed the stack in startValue (issue 28): a reference
// that comes back to itself before any value opens.
var crashSchemas = []string{
	`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`,
	`{"$defs":{"n":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/n"}]}},"$ref":"#/$defs/n"}`,
	`{"oneOf":[{"allOf":[{"$ref":"#"}]},{"type":"integer"}]}`,
	`{"$ref":"#"}`,
	`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`,
	// c is compiled inside a's object first, then reached again beside
	// it: a and c are alternatives of each other.
	`{"$defs":{"a":{"anyOf":[{"type":"object","properties":{"x":{"$ref":"#/$defs/c"}}},{"$ref":"#/$defs/c"}]},"c":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`,
}

// unsatisfiable are schemas no value obeys (a 500, "every logit is -Inf",
// before), each with the keyword the error names.
var unsatisfiable = []struct{ schema, keyword string }{
	{`{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1}`, "minimum"},
	{`{"type":"integer","minimum":0.5,"maximum":0.6}`, "minimum"},
	{`{"type":"integer","minimum":1e308,"maximum":1e308}`, "minimum"},
	{`{"type":"number","minimum":1e308}`, "minimum"},
	{`{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1e-30}`, "minimum"},
	{`{"type":"number","maximum":-1e30}`, "minimum"},
	{`{"type":"array","minItems":3,"maxItems":2}`, "minItems"},
	{`{"type":"string","minLength":5,"maxLength":4}`, "minLength"},
	{`{"type":"string","enum":[1,2,null]}`, "enum"},
	{`{"type":"integer","minimum":5,"const":3}`, "const"},
	{`{"type":"object","properties":{"a":{"type":"integer","minimum":0.5,"maximum":0.6}},"required":["a"]}`, "minimum"},
	{`{"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]}`, "required"},
	{`{"type":"array","minItems":1,"items":{"type":"string","enum":[7]}}`, "enum"},
	{`{"anyOf":[{"type":"string","enum":[1]},{"type":"integer","enum":["x"]}]}`, "enum"},
	{`{"$defs":{"n":{"type":"object","properties":{"x":{"$ref":"#/$defs/n"}},"required":["x"]}},"$ref":"#/$defs/n"}`, "$ref"},
	{nested(maxFrames, true), ""},
}

// nested is MaxDepth-style nesting: depth objects, each the required
// property "x" of the one around it (or optional).
func nested(depth int, required bool) string {
	req := ""
	if required {
		req = `,"required":["x"]`
	}
	s := `{"type":"string"}`
	for range depth {
		s = `{"type":"object","properties":{"x":` + s + `}` + req + `}`
	}
	return s
}

func TestCyclesRefused(t *testing.T) {
	for _, s := range crashSchemas {
		_, err := Compile([]byte(s))
		var se *SchemaError
		if !errors.As(err, &se) || se.Keyword != "$ref" || !strings.Contains(se.Reason, "comes back to itself") {
			t.Errorf("%s: %v", s, err)
		}
	}
	// Recursion through a value is fine, and only what it allows is taken.
	g, err := Compile([]byte(`{"anyOf":[{"type":"array","items":{"$ref":"#"}},{"type":"null"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !matches(g, nil, `[[null],[],null]`) || matches(g, nil, `[1]`) {
		t.Error("recursive arrays")
	}
}

func TestUnsatisfiableRefused(t *testing.T) {
	for _, c := range unsatisfiable {
		_, err := Compile([]byte(c.schema))
		var se *SchemaError
		if !errors.As(err, &se) || se.Keyword != c.keyword {
			t.Errorf("%.120s: %v", c.schema, err)
		}
	}
	// What has no value is dropped where the schema allows leaving it out.
	for _, c := range []struct {
		schema       string
		good, broken []string
	}{
		{`{"type":"object","properties":{"a":{"type":"string","enum":[0]},"b":{"type":"null"}}}`,
			[]string{`{}`, `{"b":null}`}, []string{`{"a":0}`, `{"a":"0"}`}},
		{`{"type":"string","enum":["a",2]}`, []string{`"a"`}, []string{`2`}},
		{`{"type":"string","nullable":true,"enum":["a",null,2]}`, []string{`"a"`, `null`}, []string{`2`}},
		{`{"type":"integer","minimum":2,"enum":[1,2,3]}`, []string{`2`, `3`}, []string{`1`}},
		{`{"type":"number","minimum":0.25,"maximum":0.25}`, []string{`0.25`}, []string{`0.2`, `0.3`}},
		{`{"type":"integer","minimum":99999999999999999999}`, []string{`99999999999999999999`, `100000000000000000001`}, []string{`1`}},
		{nested(maxFrames-1, true), []string{strings.Repeat(`{"x":`, maxFrames-1) + `""` + strings.Repeat(`}`, maxFrames-1)}, nil},
		// An optional property too deep to fit is never opened.
		{nested(maxFrames, false), []string{`{}`, `{"x":{}}`}, []string{strings.Repeat(`{"x":`, maxFrames) + `""` + strings.Repeat(`}`, maxFrames)}},
	} {
		g, err := Compile([]byte(c.schema))
		if err != nil {
			t.Errorf("%.80s: %v", c.schema, err)
			continue
		}
		for _, text := range c.good {
			if !matches(g, nil, text) {
				t.Errorf("%.80s refuses %.80s", c.schema, text)
			}
		}
		for _, text := range c.broken {
			if matches(g, nil, text) {
				t.Errorf("%.80s takes %.80s", c.schema, text)
			}
		}
	}
}

// TestEveryStateCompletes: from every prefix of a value, a vocabulary of
// single bytes always has a token to offer (no empty mask, which was a
// 500), down to the deepest value the schema allows.
func TestEveryStateCompletes(t *testing.T) {
	v := byteVocab()
	mask := make([]uint64, (v.Size()+63)/64)
	for _, c := range []struct{ schema, text string }{
		{nested(maxFrames-1, true), strings.Repeat(`{"x":`, maxFrames-1) + `"ab"` + strings.Repeat(`}`, maxFrames-1)},
		{`{}`, strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth)},
		{`{"type":"integer","minimum":-7,"maximum":-3}`, `-5`},
		{`{"type":"number","exclusiveMinimum":0.5,"maximum":0.75}`, `0.625`},
	} {
		g, err := Compile([]byte(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		m := g.Matcher(v)
		for i := range len(c.text) {
			if err := m.Allowed(context.Background(), mask); err != nil {
				t.Fatalf("%.60s after %q: %v", c.schema, c.text[:i], err)
			}
			if id := int(c.text[i]); mask[id/64]&(1<<(id%64)) == 0 {
				t.Fatalf("%.60s after %q: %q is masked", c.schema, c.text[:i], c.text[i])
			}
			if err := m.Advance([]byte{c.text[i]}, false); err != nil {
				t.Fatalf("%.60s after %q: %v", c.schema, c.text[:i], err)
			}
		}
	}
}

// byteVocab has one token per byte value; id 256 ends the reply.
func byteVocab() *Vocab {
	return NewVocab(257, func(id int) ([]byte, bool) { return []byte{byte(id)}, id < 256 }, []int{256})
}

// branches is the schema of issue 28's exponential matcher: k alternatives
// nested through array items, identical unless distinct, when each takes
// a different maxItems (so that no two can be merged).
func branches(k int, distinct bool) string {
	alts := make([]string, k)
	for i := range alts {
		alts[i] = `{"type":"array","items":{"$ref":"#/$defs/a"}}`
		if distinct {
			alts[i] = fmt.Sprintf(`{"type":"array","items":{"$ref":"#/$defs/a"},"maxItems":%d}`, 100+i)
		}
	}
	return `{"$defs":{"a":{"anyOf":[` + strings.Join(alts, ",") + `]}},"$ref":"#/$defs/a"}`
}

// TestIdenticalAlternativesMerge: two or 256 identical alternatives are one
// reading at any depth (the states doubled at each '[', 3.6 GB after 240 s
// with two).
func TestIdenticalAlternativesMerge(t *testing.T) {
	_, v := qwen3(t)
	mask := make([]uint64, (v.Size()+63)/64)
	for _, k := range []int{2, 256} {
		g, err := Compile([]byte(branches(k, false)))
		if err != nil {
			t.Fatal(err)
		}
		m := g.Matcher(v)
		if err := m.Advance([]byte(strings.Repeat("[", MaxDepth*2-1)), false); err != nil {
			t.Fatalf("%d branches: %v", k, err)
		}
		if len(m.states) != 1 {
			t.Errorf("%d branches: %d states at depth %d", k, len(m.states), MaxDepth*2-1)
		}
		if err := m.Allowed(context.Background(), mask); err != nil {
			t.Errorf("%d branches: %v", k, err)
		}
	}
}

// TestStatesBounded: alternatives that cannot be merged end the reply with
// ErrTooManyStates once their readings pass MaxStates.
func TestStatesBounded(t *testing.T) {
	g, err := Compile([]byte(branches(2, true)))
	if err != nil {
		t.Fatal(err)
	}
	m := g.Matcher(nil)
	err = m.Advance([]byte(strings.Repeat("[", MaxDepth*2-1)), false)
	if !errors.Is(err, ErrTooManyStates) {
		t.Fatalf("%v, %d states", err, len(m.states))
	}
	if len(m.states) > MaxStates {
		t.Errorf("%d states kept", len(m.states))
	}
}

// countingCtx is a context whose Err turns to Canceled after its first
// call: Allowed looks at it once on entry, so a Canceled from Allowed
// proves it looked again inside the mask.
type countingCtx struct {
	context.Context
	calls int
}

func (c *countingCtx) Err() error {
	c.calls++
	if c.calls > 1 {
		return context.Canceled
	}
	return nil
}

func TestMaskNoticesContext(t *testing.T) {
	_, v := qwen3(t)
	mask := make([]uint64, (v.Size()+63)/64)
	// A string beside a const that is a string too: after the quote one
	// state is in the string and one in the literal, so every token is
	// walked.
	g, err := Compile([]byte(`{"anyOf":[{"type":"string","maxLength":1000},{"const":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := g.Matcher(v)
	if err := m.Advance([]byte(`"`), false); err != nil {
		t.Fatal(err)
	}
	ctx := &countingCtx{Context: context.Background()}
	if err := m.Allowed(ctx, mask); !errors.Is(err, context.Canceled) || ctx.calls < 2 {
		t.Fatalf("%v after %d looks", err, ctx.calls)
	}
	for _, w := range mask {
		if w != 0 {
			t.Fatal("a mask cut short is not cleared")
		}
	}
	// Past its deadline, the mask stops with ErrMaskTime.
	if err := m.allowed(context.Background(), mask, time.Now().Add(-time.Second), errMaskTime); !errors.Is(err, ErrMaskTime) {
		t.Fatalf("past the deadline: %v", err)
	}
	if err := m.Allowed(context.Background(), mask); err != nil {
		t.Fatal(err)
	}
}

// TestReplyMaskBudget: the masks of one reply share MaxReplyMaskTime. A
// schema whose masks each take a few hundred milliseconds (1,024 readings
// inside a string: 156-243 ms a token on Qwen3's vocabulary at load 11 on
// 2 cores) held the engine for that at every token of a reply as long as
// the context; once the reply's masks have taken the budget, the next
// mask that walks is cut short with ErrMaskTime.
func TestReplyMaskBudget(t *testing.T) {
	_, v := qwen3(t)
	mask := make([]uint64, (v.Size()+63)/64)
	g, err := Compile([]byte(`{"anyOf":[{"type":"string","maxLength":1000},{"const":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := g.Matcher(v)
	if err := m.Advance([]byte(`"`), false); err != nil {
		t.Fatal(err)
	}
	if err := m.Allowed(context.Background(), mask); err != nil {
		t.Fatal(err)
	}
	if m.spent <= 0 {
		t.Fatal("the mask's time is not counted against the reply")
	}
	m.spent = MaxReplyMaskTime
	err = m.Allowed(context.Background(), mask)
	if !errors.Is(err, ErrMaskTime) || !strings.Contains(err.Error(), "in all") {
		t.Fatalf("with the reply's budget spent: %v", err)
	}
}

func TestStuckVocabulary(t *testing.T) {
	v := NewVocab(2, func(id int) ([]byte, bool) { return []byte("a"), id == 0 }, []int{1})
	g, err := Compile([]byte(`{"type":"integer"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Matcher(v).Allowed(context.Background(), make([]uint64, 1)); !errors.Is(err, ErrStuck) {
		t.Fatal(err)
	}
}

// deepSchema is issue 28's quadratic compile: depth nested objects, each
// the one property, of a 200-character name, of the one around it.
func deepSchema(depth int) string {
	var b strings.Builder
	for i := range depth {
		fmt.Fprintf(&b, `{"type":"object","properties":{"%0200d":`, i)
	}
	b.WriteString(`{"type":"string"}`)
	for range depth {
		b.WriteString(`}}`)
	}
	return b.String()
}

// TestCompileMemoryLinear: 4,000 nested objects with 200-character names
// (about 944 KB) compile within a small multiple of their size; with the
// path copied at each level they took 1.75 GB.
func TestCompileMemoryLinear(t *testing.T) {
	schema := []byte(deepSchema(4000))
	const perByte = 40
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Compile(schema); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > perByte*uint64(len(schema)) {
		t.Errorf("compiling %d bytes allocated %d", len(schema), got)
	}
}
