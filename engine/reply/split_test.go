package reply

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// parseSplit feeds text cut at the given ascending offsets and checks that
// the event stream is well formed while folding it into a Result.
func parseSplit(t testing.TB, text string, opts Options, cuts []int) Result {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	open := -1 // the call whose events may come now
	check := func(events []Event) {
		for _, e := range events {
			switch e.Kind {
			case KindReasoning, KindContent:
				if e.Text == "" {
					t.Fatalf("empty %v event", e.Kind)
				}
			case KindToolStart:
				if open != -1 || e.Index != len(r.ToolCalls) || e.ID == "" || e.Name == "" {
					t.Fatalf("bad tool start %+v (open call %d, %d calls)", e, open, len(r.ToolCalls))
				}
				open = e.Index
			case KindToolArgs:
				if e.Index != open || e.Text == "" {
					t.Fatalf("arguments %+v outside call %d", e, open)
				}
			case KindToolEnd:
				if e.Index != open {
					t.Fatalf("end %+v outside call %d", e, open)
				}
				open = -1
			default:
				t.Fatalf("unknown event %+v", e)
			}
			r.Add(e)
		}
	}
	prev := 0
	for _, c := range cuts {
		check(p.Feed(text[prev:c]))
		prev = c
	}
	check(p.Feed(text[prev:]))
	check(p.Close())
	if open != -1 {
		t.Fatalf("call %d never ended", open)
	}
	if p.Feed("more") != nil || p.Close() != nil {
		t.Fatal("events after Close")
	}
	return r
}

func equalResults(a, b Result) bool {
	if len(a.ToolCalls) == 0 && len(b.ToolCalls) == 0 {
		a.ToolCalls, b.ToolCalls = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// randomCuts returns up to n sorted distinct offsets in (0, len).
func randomCuts(r *rand.Rand, length, n int) []int {
	if length < 2 {
		return nil
	}
	set := map[int]bool{}
	for range n {
		set[1+r.IntN(length-1)] = true
	}
	cuts := make([]int, 0, len(set))
	for c := range set {
		cuts = append(cuts, c)
	}
	sort.Ints(cuts)
	return cuts
}

// propertyTools is the schema the generated documents call.
const propertyTools = `[
 {"type":"function","function":{"name":"edit","parameters":{"type":"object","properties":{
   "path":{"type":"string"},"line":{"type":"integer"},"scale":{"type":"number"},
   "force":{"type":"boolean"},"opts":{"type":"object"},"tags":{"type":"array"},
   "note":{"type":["string","null"]}}}}},
 {"type":"function","function":{"name":"run","parameters":{"type":"object","properties":{
   "cmd":{"type":"string"},"timeout":{"anyOf":[{"type":"integer"},{"type":"null"}]}}}}}]`

// Pieces the document generator draws from: prose, markup, near-markup and
// the whitespace the model puts around tags.
var (
	prose = []string{"Let me think", " about it.", "日本語", "é", "👩‍💻", " x < y ", "a>b", "\n", "\n\n", "  ", "\t",
		"code: if (a<b) {}", "</para", "</parameter", "<param", "<function", "</think", "<tool", "null", "42", "-3.5", "true",
		"{\"k\": [1, 2]}", "[1,2]", "None", "</parameter>", "</function>", "<parameter=path>", "<"}
	paramNames = []string{"path", "line", "scale", "force", "opts", "tags", "note", "cmd", "timeout", "unknown"}
	funcNames  = []string{"edit", "run", "missing_tool", "ns/tool.v2"}
)

// genDocument writes a random reply: reasoning, a close of thinking in one of
// its spacings, content, and tool calls well formed or broken in the ways
// models break them.
func genDocument(r *rand.Rand) string {
	var b strings.Builder
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	proseRun := func() {
		for range r.IntN(5) {
			b.WriteString(pick(prose))
		}
	}
	call := func() {
		if r.IntN(8) > 0 {
			b.WriteString("<tool_call>")
			b.WriteString(pick([]string{"\n", "", " \n", "\n\n"}))
		}
		b.WriteString("<function=" + pick(funcNames) + ">")
		if r.IntN(6) == 0 {
			proseRun() // junk inside the function
		}
		for range r.IntN(4) {
			b.WriteString(pick([]string{"\n", "", "\n\n"}))
			b.WriteString("<parameter=" + pick(paramNames) + ">")
			b.WriteString(pick([]string{"\n", ""}))
			proseRun()
			switch r.IntN(8) {
			case 0: // missing </parameter>
			case 1:
				b.WriteString("</parameter>")
			default:
				b.WriteString("\n</parameter>")
			}
		}
		switch r.IntN(6) {
		case 0: // missing </function> and </tool_call>
		case 1:
			b.WriteString("\n</tool_call>")
		default:
			b.WriteString("\n</function>\n</tool_call>")
		}
	}
	for range 1 + r.IntN(6) {
		switch r.IntN(7) {
		case 0, 1, 2:
			proseRun()
		case 3:
			b.WriteString(pick([]string{"\n</think>\n\n", "</think>", "\n\n</think>\n", "</think>\n\n\n", "<think>\n", "<think>"}))
		case 4, 5:
			call()
		case 6:
			b.WriteString(pick([]string{"<tool_call>\n{\"name\": \"run\"}\n</tool_call>", "<tool_call>", "</tool_call>", "<function=", "<tool_call>\n<function=a b>"}))
		}
	}
	return b.String()
}

func TestSplitInvariance(t *testing.T) {
	tools, err := ToolsFromOpenAI([]byte(propertyTools))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(4, 2026))
	const documents = 3000
	calls := 0
	for d := range documents {
		doc := genDocument(r)
		opts := Options{Thinking: d%2 == 0, Tools: tools, NewID: testID}
		whole, err := Parse(doc, opts)
		if err != nil {
			t.Fatal(err)
		}
		calls += len(whole.ToolCalls)
		for i, c := range whole.ToolCalls {
			if !json.Valid([]byte(c.Arguments)) {
				t.Fatalf("document %q: call %d arguments not JSON: %s", doc, i, c.Arguments)
			}
		}
		for _, cuts := range [][]int{everyByte(len(doc)), randomCuts(r, len(doc), 3), randomCuts(r, len(doc), 20)} {
			if got := parseSplit(t, doc, opts, cuts); !equalResults(got, whole) {
				t.Fatalf("document %q cut at %v:\ngot  %+v\nwant %+v", doc, cuts, got, whole)
			}
		}
		if !utf8.ValidString(whole.Reasoning) || !utf8.ValidString(whole.Content) {
			t.Fatalf("document %q: parse split a character", doc)
		}
	}
	if calls < documents/2 {
		t.Fatalf("generator produced only %d calls in %d documents; the property is not exercised", calls, documents)
	}
}
