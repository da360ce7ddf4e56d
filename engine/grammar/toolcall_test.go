package grammar

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"petal/engine/reply"
)

var weatherTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}`)},
	{Name: "ping", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
}

func call(name string, params ...[2]string) string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + name + ">\n")
	for _, p := range params {
		b.WriteString("<parameter=" + p[0] + ">\n" + p[1] + "\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

// TestToolCallTexts: the grammar takes calls in the template's form to
// the tools offered, with each value obeying its schema, and nothing else.
func TestToolCallTexts(t *testing.T) {
	g, err := ToolCall(weatherTools)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		ok   bool
	}{
		{call("get_weather", [2]string{"city", "Paris"}, [2]string{"days", "3"}), true},
		{call("get_weather", [2]string{"city", "New\nYork <b>"}, [2]string{"unit", "f"}, [2]string{"days", "7"}), true},
		{call("get_weather", [2]string{"city", ""}, [2]string{"days", "1"}), true},
		{call("get_weather", [2]string{"city", "Zürich"}, [2]string{"days", "2"}), true},
		{call("ping"), true},
		{"\n\n" + call("ping"), true},
		{"\n\n\n" + call("ping"), false},
		{call("get_weather", [2]string{"city", "Paris"}), false}, // days is required
		{call("get_weather", [2]string{"city", "Paris"}, [2]string{"days", "8"}), false},                         // above the maximum
		{call("get_weather", [2]string{"city", "Paris"}, [2]string{"days", "three"}), false},                     // not JSON
		{call("get_weather", [2]string{"city", "Paris"}, [2]string{"unit", "k"}, [2]string{"days", "3"}), false}, // not in the enum
		{call("get_weather", [2]string{"days", "3"}, [2]string{"city", "Paris"}), false},                         // out of order
		{call("get_weather", [2]string{"city", "a</parameter>b"}, [2]string{"days", "3"}), false},                // a closing tag in a value
		{call("get_weather", [2]string{"city", "Paris"}, [2]string{"days", "3"}, [2]string{"mood", "x"}), false},
		{call("get_time"), false},
		{"Sure! " + call("ping"), false},
		{call("ping") + "\nDone.", false},
		{call("get_weather", [2]string{"city", "\xff"}, [2]string{"days", "3"}), false}, // not UTF-8
	} {
		m := g.Matcher(nil)
		got := m.Advance([]byte(c.text), false) == nil && m.Done()
		if got != c.ok {
			t.Errorf("%q: taken %v, want %v", c.text, got, c.ok)
		}
	}
	// A prefix is taken but not done.
	m := g.Matcher(nil)
	if err := m.Advance([]byte("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"), false); err != nil || m.Done() {
		t.Errorf("a prefix: %v, done %v", err, m.Done())
	}
	if err := m.Advance([]byte("is\n</parameter>\n</function>"), false); !errors.Is(err, ErrRejected) {
		t.Errorf("a call without its required days: %v", err)
	}
}

// TestToolCallMask: over a vocabulary of single bytes, the mask at each
// point of a call is the bytes that may come next.
func TestToolCallMask(t *testing.T) {
	g, err := ToolCall(weatherTools)
	if err != nil {
		t.Fatal(err)
	}
	v := byteVocab()
	mask := make([]uint64, (v.Size()+63)/64)
	allowed := func(prefix string) string {
		t.Helper()
		m := g.Matcher(v)
		if err := m.Advance([]byte(prefix), false); err != nil {
			t.Fatalf("%q: %v", prefix, err)
		}
		if err := m.Allowed(context.Background(), mask); err != nil {
			t.Fatalf("%q: %v", prefix, err)
		}
		var out []byte
		for id := range 256 {
			if mask[id/64]&(1<<(id%64)) != 0 {
				out = append(out, byte(id))
			}
		}
		if mask[256/64]&(1<<(256%64)) != 0 {
			out = append(out, "<EOS>"...)
		}
		return string(out)
	}
	for _, c := range []struct{ prefix, want string }{
		{"", "\n<"},
		{"\n\n", "<"},
		{"<tool_call>\n<function=", "gp"},
		{"<tool_call>\n<function=get_weather>\n", "<"},
		{"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=", "du"},
		{"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\n", "cf"},
		{"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n", "\t\n\r 1234567"},
		{"<tool_call>\n<function=ping>\n</function>\n</tool_call>", "<EOS>"},
	} {
		if got := allowed(c.prefix); got != c.want {
			t.Errorf("after %q: %q, want %q", c.prefix, got, c.want)
		}
	}
	// Inside a raw value every byte that keeps it UTF-8 is allowed, and
	// '<' after "</parameter" is not.
	if got := allowed("<tool_call>\n<function=get_weather>\n<parameter=city>\nPa"); strings.ContainsRune(got, 0x80) || !strings.Contains(got, "<") || len(got) != 0x80+(0xF5-0xC2) {
		t.Errorf("inside a value: %d bytes allowed (%q)", len(got), got)
	}
	if got := allowed("<tool_call>\n<function=get_weather>\n<parameter=city>\nPa</parameter"); strings.Contains(got, ">") {
		t.Errorf("a value may hold its closing tag: %q", got)
	}
}

// TestToolCallParses: replies drawn at random under the grammar's masks
// (a vocabulary of every byte and some pieces of markup, the longest
// allowed token drawn one time in four) are calls that engine/reply reads
// as one call of an offered tool whose arguments obey its schema.
func TestToolCallParses(t *testing.T) {
	g, err := ToolCall(weatherTools)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for b := range 256 {
		tokens = append(tokens, string([]byte{byte(b)}))
	}
	tokens = append(tokens, "<tool_call>", "\n<function=", "get_weather", "ping", ">\n", "<parameter=", "city", "days", "unit",
		"\n</parameter>\n", "</function>", "\n</tool_call>", "Paris", " the", "\n</parameter", "</", "12")
	eos := len(tokens)
	v := NewVocab(eos+1, func(id int) ([]byte, bool) {
		if id >= eos {
			return nil, false
		}
		return []byte(tokens[id]), true
	}, []int{eos})
	rng := rand.New(rand.NewPCG(1, 2))
	tools := make([]reply.Tool, len(weatherTools))
	args := map[string]*Grammar{}
	for i, tl := range weatherTools {
		tools[i] = reply.Tool{Name: tl.Name, Parameters: tl.Parameters}
		if args[tl.Name], err = Compile(tl.Parameters); err != nil {
			t.Fatal(err)
		}
	}
	const replies, maxTokens = 50, 2000
	mask := make([]uint64, (v.Size()+63)/64)
	names := map[string]int{}
	for range replies {
		m := g.Matcher(v)
		var text []byte
		for n := 0; ; n++ {
			if n == maxTokens {
				t.Fatalf("no end within %d tokens: %q", maxTokens, text)
			}
			if err := m.Allowed(context.Background(), mask); err != nil {
				t.Fatalf("after %q: %v", text, err)
			}
			var ids []int
			longest := -1
			for id := range v.Size() {
				if mask[id/64]&(1<<(id%64)) != 0 {
					ids = append(ids, id)
					if id < eos && (longest < 0 || len(tokens[id]) > len(tokens[longest])) {
						longest = id
					}
				}
			}
			id := ids[rng.IntN(len(ids))]
			if longest >= 0 && rng.IntN(4) == 0 {
				id = longest
			}
			if id == eos {
				break
			}
			if err := m.Advance([]byte(tokens[id]), false); err != nil {
				t.Fatalf("an allowed token %q was rejected after %q: %v", tokens[id], text, err)
			}
			text = append(text, tokens[id]...)
		}
		r, err := reply.Parse(string(text), reply.Options{Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.ToolCalls) != 1 || r.Content != "" {
			t.Fatalf("%q: %d calls, content %q", text, len(r.ToolCalls), r.Content)
		}
		c := r.ToolCalls[0]
		names[c.Name]++
		ag := args[c.Name]
		if ag == nil {
			t.Fatalf("%q: a call of %q", text, c.Name)
		}
		if m := ag.Matcher(nil); m.Advance([]byte(c.Arguments), false) != nil || !m.Done() {
			t.Errorf("%q: arguments %s break the schema", text, c.Arguments)
		}
	}
	if names["get_weather"] == 0 || names["ping"] == 0 {
		t.Errorf("calls drawn: %v, want both tools", names)
	}
}

// TestToolCallRefused: what cannot be written as a call is a SchemaError.
func TestToolCallRefused(t *testing.T) {
	for _, tools := range [][]Tool{
		nil,
		{{Name: "a>b"}},
		{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer","minimum":2,"maximum":1}}}`)}},
		{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}},"required":["y"]}`)}},
		{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"a>b":{"type":"string"}}}`)}},
	} {
		if _, err := ToolCall(tools); !errors.Is(err, ErrSchema) {
			t.Errorf("%v: %v", tools, err)
		}
	}
}

// TestRawMaskTable: inside a raw value, the mask from the tables of
// rawTable is the mask of the whole trie's walk, over Qwen's vocabulary.
func TestRawMaskTable(t *testing.T) {
	_, v := qwen3(t)
	g, err := ToolCall(weatherTools)
	if err != nil {
		t.Fatal(err)
	}
	words := (v.Size() + 63) / 64
	for _, p := range []string{"", "Par", "Z\xc3", "\xe2\x82", "a\nb", "a<", "x</par"} {
		prefix := "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + p
		m := g.Matcher(v)
		if err := m.Advance([]byte(prefix), false); err != nil {
			t.Fatalf("%q: %v", prefix, err)
		}
		fast := make([]uint64, words)
		if err := m.Allowed(context.Background(), fast); err != nil {
			t.Fatal(err)
		}
		walked := make([]uint64, words)
		m.ctx = context.Background()
		m.walk(&v.all, 0, m.states, 0, walked)
		n := 0
		for i := range fast {
			if fast[i] != walked[i] {
				t.Errorf("%q: the masks differ in tokens %d to %d: %x, walked %x", p, 64*i, 64*i+63, fast[i], walked[i])
			}
			for w := fast[i]; w != 0; w &= w - 1 {
				n++
			}
		}
		if n < v.Size()/2 && p != "Z\xc3" && p != "\xe2\x82" {
			t.Errorf("%q: only %d tokens allowed", p, n)
		}
	}
	// A token that ends a closing tag begun is not taken from the tables.
	tokens := []string{"a", "<", "/parameter>", "/par"}
	small := NewVocab(len(tokens), func(id int) ([]byte, bool) { return []byte(tokens[id]), true }, nil)
	m := g.Matcher(small)
	for _, p := range []string{"<tool_call>\n<function=get_weather>\n<parameter=city>\n", "a", "<"} {
		if err := m.Advance([]byte(p), false); err != nil {
			t.Fatal(err)
		}
	}
	mask := make([]uint64, 1)
	if err := m.Allowed(context.Background(), mask); err != nil || mask[0] != 0b1011 {
		t.Errorf("after \"a<\" in a value: mask %b (%v), want a, < and /par", mask[0], err)
	}
}

// TestToolCallLoose: a tool whose schema holds keywords Compile does not
// enforce (pydantic's format, a pattern) can still be forced: those
// properties take any string, or any JSON value, and the rest keep their
// schemas.
func TestToolCallLoose(t *testing.T) {
	g, err := ToolCall([]Tool{{Name: "book", Parameters: json.RawMessage(`{"type":"object","$defs":{"n":{"type":"integer","minimum":1}},
		"properties":{"when":{"type":"string","format":"date-time"},"code":{"type":"integer","multipleOf":5},"ref":{"type":"string","pattern":"^[A-Z]+$"},"seats":{"$ref":"#/$defs/n"}},"required":["when","seats"]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		ok   bool
	}{
		{call("book", [2]string{"when", "2026-12-03T10:00"}, [2]string{"seats", "2"}), true},
		{call("book", [2]string{"when", "now"}, [2]string{"code", "10"}, [2]string{"ref", "AB-1"}, [2]string{"seats", "2"}), true},
		{call("book", [2]string{"code", "10"}, [2]string{"when", "now"}, [2]string{"seats", "2"}), false},  // out of order
		{call("book", [2]string{"when", "now"}, [2]string{"code", "ten"}, [2]string{"seats", "2"}), false}, // not JSON
		{call("book", [2]string{"when", "now"}, [2]string{"seats", "0"}), false},                           // below $defs' minimum
		{call("book", [2]string{"when", "now"}), false},                                                    // seats is required
	} {
		m := g.Matcher(nil)
		if got := m.Advance([]byte(c.text), false) == nil && m.Done(); got != c.ok {
			t.Errorf("%q: taken %v, want %v", c.text, got, c.ok)
		}
	}
}
