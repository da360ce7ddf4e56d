package reply

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// renderCall writes a call the way the Qwen3.5/3.6 chat template writes
// assistant tool calls in the history: mappings and lists as JSON, other
// values through Jinja's |string (Python str: True, False, None, 1.0).
func renderCall(name string, keys []string, args map[string]any) string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + name + ">\n")
	for _, k := range keys {
		b.WriteString("<parameter=" + k + ">\n")
		switch v := args[k].(type) {
		case map[string]any, []any:
			js, _ := json.Marshal(v)
			b.Write(js)
		case bool:
			b.WriteString(map[bool]string{true: "True", false: "False"}[v])
		case nil:
			b.WriteString("None")
		case float64:
			s := strconv.FormatFloat(v, 'g', -1, 64)
			if !strings.ContainsAny(s, ".e") {
				s += ".0"
			}
			b.WriteString(s)
		default:
			fmt.Fprint(&b, v)
		}
		b.WriteString("\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

// TestTemplateRoundTrip: arguments rendered as the chat template renders
// them parse back to the same JSON values, whatever the split.
func TestTemplateRoundTrip(t *testing.T) {
	tools, err := ToolsFromOpenAI([]byte(`[{"type":"function","function":{"name":"act","parameters":{"type":"object","properties":{
		"text":{"type":"string"},"n":{"type":"integer"},"x":{"type":"number"},"flag":{"type":"boolean"},
		"obj":{"type":"object"},"list":{"type":"array"},"maybe":{"type":["integer","null"]}}}}}]`))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	pieces := []string{"a", " ", "\n", "<", ">", "</", "é", "\"", "\\", "{", "}", "</parameter", "<tool_call>", "\t", "null", "True"}
	randText := func() string {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	for range 2000 {
		args := map[string]any{}
		var keys []string
		add := func(k string, v any) {
			if r.IntN(3) > 0 {
				args[k] = v
				keys = append(keys, k)
			}
		}
		add("text", randText())
		add("n", r.IntN(2000)-1000)
		add("x", r.NormFloat64()*1e3)
		add("flag", r.IntN(2) == 0)
		add("obj", map[string]any{"k": randText(), "v": []any{1.0, "two", nil}})
		add("list", []any{randText(), 3.5, true})
		if r.IntN(2) == 0 {
			add("maybe", nil)
		} else {
			add("maybe", r.IntN(9))
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		text := "Calling.\n\n" + renderCall("act", keys, args)
		opts := Options{Thinking: false, Tools: tools, NewID: testID}
		whole, err := Parse(text, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(whole.ToolCalls) != 1 || whole.Content != "Calling." {
			t.Fatalf("%q: parsed %+v", text, whole)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(whole.ToolCalls[0].Arguments), &got); err != nil {
			t.Fatalf("%q: arguments %s: %v", text, whole.ToolCalls[0].Arguments, err)
		}
		var want map[string]any // args as JSON sees them: ints become float64
		js, _ := json.Marshal(args)
		if err := json.Unmarshal(js, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ngot  %v\nwant %v", text, got, want)
		}
		if split := parseSplit(t, text, opts, randomCuts(r, len(text), 10)); !equalResults(split, whole) {
			t.Fatalf("%q: split parse differs", text)
		}
	}
}
