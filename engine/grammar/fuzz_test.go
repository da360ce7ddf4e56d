package grammar

import (
	"encoding/json"
	"testing"
)

// FuzzGrammar: no schema or text panics the compiler or the matcher, and a
// text that free JSON takes is JSON.
func FuzzGrammar(f *testing.F) {
	for _, c := range schemas {
		f.Add(c.schema, `{"name":"a","age":3}`)
		for _, b := range c.bad {
			f.Add(c.schema, b)
		}
	}
	f.Add(`{}`, `{"a":[1,-0.5e3,"\u00e9\n"],"b":{"c":null}}`)
	f.Add(`{"$ref":"#"}`, `[[[[`)
	f.Fuzz(func(t *testing.T, schema, text string) {
		if g, err := Compile([]byte(schema)); err == nil {
			m := g.Matcher(nil)
			m.Advance([]byte(text), false)
			m.Done()
		}
		if any, _ := Compile([]byte(`{}`)); matches(any, nil, text) && !json.Valid([]byte(text)) {
			t.Errorf("free JSON takes %q", text)
		}
	})
}
