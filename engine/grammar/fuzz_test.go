package grammar

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzGrammar: no schema or text panics the compiler or the matcher or
// overflows its stack; a text that free JSON takes is JSON; and after any
// prefix a compiled grammar takes, a vocabulary of single bytes has a
// token to offer (no schema leaves the sampler an empty mask).
func FuzzGrammar(f *testing.F) {
	for _, c := range schemas {
		f.Add(c.schema, `{"name":"a","age":3}`)
		for _, b := range c.bad {
			f.Add(c.schema, b)
		}
	}
	f.Add(`{}`, `{"a":[1,-0.5e3,"\u00e9\n"],"b":{"c":null}}`)
	f.Add(`{"$ref":"#"}`, `[[[[`)
	// Issue 28's schemas.
	for _, s := range crashSchemas {
		f.Add(s, `null`)
	}
	for _, c := range unsatisfiable {
		f.Add(c.schema, `0`)
	}
	f.Add(branches(2, false), `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`)
	f.Add(branches(256, false), `[[[],[[]]`)
	f.Add(branches(2, true), `[[[[[[[[[[[[[[[[`)
	f.Add(deepSchema(100), `{"`)
	f.Add(nested(maxFrames-1, true), `{"x":{"x":`)
	v := byteVocab()
	mask := make([]uint64, (v.Size()+63)/64)
	f.Fuzz(func(t *testing.T, schema, text string) {
		if g, err := Compile([]byte(schema)); err == nil {
			m := g.Matcher(v)
			if m.Advance([]byte(text), false) == nil {
				if err := m.Allowed(context.Background(), mask); errors.Is(err, ErrStuck) {
					t.Errorf("no byte continues %q", text)
				}
			}
			m.Done()
		}
		if any, _ := Compile([]byte(`{}`)); matches(any, nil, text) && !json.Valid([]byte(text)) {
			t.Errorf("free JSON takes %q", text)
		}
	})
}
