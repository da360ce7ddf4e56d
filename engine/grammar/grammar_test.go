package grammar

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"petal/engine/tokenizer"
)

var (
	qwenOnce  sync.Once
	qwenTok   *tokenizer.Tokenizer
	qwenVocab *Vocab
	qwenErr   error
)

// eosID stands for the model's end of reply in the test vocabularies.
const eosID = 151645 // <|im_end|> in Qwen3's tokenizer

// qwen3 is the vocabulary of the Qwen3 tokenizer kept in the tokenizer
// package's testdata (151,669 ids).
func qwen3(t testing.TB) (*tokenizer.Tokenizer, *Vocab) {
	t.Helper()
	qwenOnce.Do(func() {
		f, err := os.Open(filepath.Join("..", "tokenizer", "testdata", "qwen3-tokenizer.json.gz"))
		if err != nil {
			qwenErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			qwenErr = err
			return
		}
		data, err := io.ReadAll(zr)
		if err != nil {
			qwenErr = err
			return
		}
		if qwenTok, qwenErr = tokenizer.Parse(data); qwenErr != nil {
			return
		}
		qwenVocab = NewVocab(qwenTok.MaxID()+1, func(id int) ([]byte, bool) {
			if qwenTok.IsSpecial(id) {
				return nil, false
			}
			return qwenTok.Bytes(id)
		}, []int{eosID})
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok, qwenVocab
}

// sample draws replies token by token from the grammar's allowed set, as a
// model would under the mask (a random model, biased to end), and returns
// the text.
func sample(t testing.TB, g *Grammar, v *Vocab, tok *tokenizer.Tokenizer, rng *rand.Rand, maxTokens int) (string, bool) {
	m := g.Matcher(v)
	mask := make([]uint64, (v.Size()+63)/64)
	var out []byte
	for range maxTokens {
		if err := m.Allowed(context.Background(), mask); err != nil {
			t.Fatalf("no mask after %q: %v", out, err)
		}
		if m.Done() {
			return string(out), true
		}
		allowed := func(id int) bool { return mask[id/64]&(1<<(id%64)) != 0 }
		// Draw a few allowed tokens, by probing when most are allowed and
		// from the list when few are, and prefer one that closes things
		// or is short, so that replies end.
		var picks []int
		for range 256 {
			if id := rng.IntN(v.Size()); allowed(id) {
				picks = append(picks, id)
				if len(picks) == 4 {
					break
				}
			}
		}
		if len(picks) == 0 {
			var ids []int
			for id := range v.Size() {
				if allowed(id) {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				t.Fatalf("no token allowed after %q", out)
			}
			for range 4 {
				picks = append(picks, ids[rng.IntN(len(ids))])
			}
		}
		id := picks[0]
		for _, c := range picks[1:] {
			if b, _ := tok.Bytes(c); len(b) < 3 || bytes.ContainsAny(b, "}]\"") {
				id = c
			}
		}
		b, _ := tok.Bytes(id)
		if err := m.Advance(b, id == eosID); err != nil {
			t.Fatalf("an allowed token %q was rejected after %q", b, out)
		}
		out = append(out, b...)
	}
	return string(out), false
}

// schemas are what structured-output clients send: zod via the openai SDK
// and the AI SDK, pydantic, LangChain; each with the JSON texts that must
// be refused.
var schemas = []struct {
	name, schema string
	bad          []string
}{
	{"person", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],"additionalProperties":false}`,
		[]string{`{"name":"a"}`, `{"name":"a","age":-1}`, `{"name":"a","age":151}`, `{"name":"a","age":1.5}`, `{"name":"a","age":1,"x":1}`, `[]`}},
	{"enum and const", `{"type":"object","properties":{"color":{"enum":["red","green",3,null]},"v":{"const":"x"}},"required":["color","v"]}`,
		[]string{`{"color":"blue","v":"x"}`, `{"color":"red","v":"y"}`}},
	{"arrays", `{"type":"array","items":{"type":"string","minLength":2,"maxLength":4},"minItems":1,"maxItems":3}`,
		[]string{`[]`, `["a"]`, `["abcde"]`, `["ab","ab","ab","ab"]`}},
	{"nullable and anyOf", `{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"anyOf":[{"type":"number","exclusiveMinimum":0},{"type":"boolean"}]}},"required":["a","b"],"additionalProperties":false}`,
		[]string{`{"a":1,"b":true}`, `{"a":null,"b":0}`, `{"a":null,"b":"x"}`}},
	{"refs", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
		[]string{`{"v":1,"next":{"v":2}}`, `{"v":1}`}},
	{"free object", `{"type":"object","additionalProperties":{"type":"number"}}`,
		[]string{`{"a":"x"}`, `{"a":[1]}`}},
	{"bounded number", `{"type":"number","minimum":-2.5,"maximum":10}`, []string{`-3`, `10.5`, `11`, `1e3`}},
}

// TestGeneratedRepliesObeyTheSchema: every reply drawn under the mask parses
// and is valid by another implementation of JSON Schema
// (santhosh-tekuri/jsonschema); the texts the schema refuses are refused by
// the matcher too.
func TestGeneratedRepliesObeyTheSchema(t *testing.T) {
	tok, v := qwen3(t)
	for _, c := range schemas {
		t.Run(c.name, func(t *testing.T) {
			g, err := Compile([]byte(c.schema))
			if err != nil {
				t.Fatal(err)
			}
			oracle := compileOracle(t, c.schema)
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			complete := 0
			const replies = 12
			for range replies {
				text, done := sample(t, g, v, tok, rng, 200)
				if !done {
					continue
				}
				complete++
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
				if err != nil {
					t.Fatalf("reply %q is not JSON: %v", text, err)
				}
				if err := oracle.Validate(inst); err != nil {
					t.Errorf("reply %q breaks the schema: %v", text, err)
				}
			}
			// A random model under the mask wanders (a free object takes
			// key after key); a third of its replies must still close.
			if complete < replies/3 {
				t.Errorf("only %d of %d replies closed within 200 tokens", complete, replies)
			}
			for _, bad := range c.bad {
				if matches(g, v, bad) {
					t.Errorf("the matcher takes %s", bad)
				}
			}
		})
	}
}

// matches feeds text byte by byte and reports whether it is a complete
// value of g.
func matches(g *Grammar, v *Vocab, text string) bool {
	m := g.Matcher(v)
	return m.Advance([]byte(text), false) == nil && m.Done()
}

func compileOracle(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestValidTextsMatch: texts a client would expect accepted are, with
// whitespace up to the bound.
func TestValidTextsMatch(t *testing.T) {
	_, v := qwen3(t)
	for _, c := range []struct{ schema, text string }{
		{schemas[0].schema, `{"age":30,"name":"Ann \"A\" \u00e9"}`},
		{schemas[0].schema, "{\n  \"name\": \"x\",\n  \"age\": 0\n}"},
		{schemas[2].schema, `["ab", "abcd"]`},
		{schemas[4].schema, `{"v":1,"next":{"v":-2,"next":null}}`},
		{schemas[6].schema, `-2.5`},
		{schemas[6].schema, `9.99`},
		{`{}`, `{"a":[1,{"b":null}],"c":"d"}`},
		{`{"type":"object"}`, `{}`},
	} {
		g, err := Compile([]byte(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		if !matches(g, v, c.text) {
			t.Errorf("%s refuses %s", c.schema, c.text)
		}
	}
	if matches(JSONObject(), v, `[1]`) || !matches(JSONObject(), v, `{"a":1}`) {
		t.Error("json_object mode")
	}
	if g, _ := Compile([]byte(`{}`)); matches(g, v, "{"+strings.Repeat(" ", MaxWhitespace+1)+"}") || !matches(g, v, "{"+strings.Repeat(" ", MaxWhitespace)+"}") {
		t.Error("whitespace beyond the bound is taken")
	}
}

// TestUnsupportedKeywords: what cannot be compiled is refused naming the
// keyword.
func TestUnsupportedKeywords(t *testing.T) {
	for _, c := range []struct{ schema, keyword string }{
		{`{"type":"string","pattern":"^a+$"}`, "pattern"},
		{`{"type":"string","format":"email"}`, "format"},
		{`{"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{"x":{}}}`, "patternProperties"},
		{`{"type":"integer","multipleOf":3}`, "multipleOf"},
		{`{"$ref":"https://example.com/s.json"}`, "$ref"},
		// Beside a $ref a keyword says more of the same value (JSON
		// Schema 2019-09 on); it was ignored, and the integer of the
		// reference generated for a string.
		{`{"$defs":{"a":{"type":"integer"}},"$ref":"#/$defs/a","type":"string"}`, "type"},
		{`{"type":"object","properties":{"s":{"$ref":"#/$defs/s","maxLength":3}},"$defs":{"s":{"type":"string"}}}`, "maxLength"},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, "required"},
		{`{"type":"strange"}`, "type"},
		{`{"type":[]}`, "type"}, // was taken as any value
		{`{"not":{"type":"string"}}`, "not"},
		{`false`, "false"},
	} {
		_, err := Compile([]byte(c.schema))
		var se *SchemaError
		if !errors.As(err, &se) || se.Keyword != c.keyword || !errors.Is(err, ErrSchema) {
			t.Errorf("%s: %v", c.schema, err)
		}
	}
	if _, err := Compile([]byte(`{`)); !errors.Is(err, ErrSchema) {
		t.Errorf("broken JSON: %v", err)
	}
}

var _ = json.Valid
