package reply

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSchemaType(t *testing.T) {
	cases := []struct {
		schema string
		want   paramType
	}{
		{`{"type":"string"}`, paramType{kind: kindString}},
		{`{"type":"integer"}`, paramType{kind: kindInteger}},
		{`{"type":"int64"}`, paramType{kind: kindInteger}},
		{`{"type":"number"}`, paramType{kind: kindNumber}},
		{`{"type":"float"}`, paramType{kind: kindNumber}},
		{`{"type":"boolean"}`, paramType{kind: kindBoolean}},
		{`{"type":"object"}`, paramType{kind: kindObject}},
		{`{"type":"dict"}`, paramType{kind: kindObject}},
		{`{"type":"array"}`, paramType{kind: kindArray}},
		{`{"type":"null"}`, paramType{kind: kindNull, nullable: true}},
		{`{"type":"mystery"}`, paramType{kind: kindAny}},
		{`{"type":["integer","null"]}`, paramType{kind: kindInteger, nullable: true}},
		{`{"type":["null","string"]}`, paramType{kind: kindString, nullable: true}},
		{`{"anyOf":[{"type":"null"},{"type":"number"}]}`, paramType{kind: kindNumber, nullable: true}},
		{`{"oneOf":[{"type":"boolean"},{"type":"string"}]}`, paramType{kind: kindBoolean}},
		{`{"enum":["a","b"]}`, paramType{kind: kindString}},
		{`{"enum":[1,2]}`, paramType{kind: kindAny}},
		{`{"properties":{"a":{}}}`, paramType{kind: kindObject}},
		{`{"items":{"type":"string"}}`, paramType{kind: kindArray}},
		{`{"description":"no type"}`, paramType{kind: kindString}},
		{`true`, paramType{kind: kindAny}},
	}
	for _, c := range cases {
		if got := schemaType(json.RawMessage(c.schema)); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.schema, got, c.want)
		}
	}
}

func TestConvert(t *testing.T) {
	str := paramType{kind: kindString}
	cases := []struct {
		value string
		typ   paramType
		want  string
	}{
		{"hello\nworld", str, `"hello\nworld"`},
		{"  spaced  ", str, `"  spaced  "`},
		{"null", str, `"null"`},
		{"None", paramType{kind: kindString, nullable: true}, `null`},
		{"tab\there \"q\" \\ \x01", str, `"tab\there \"q\" \\ \u0001"`},
		{" 42 ", paramType{kind: kindInteger}, `42`},
		{"+007", paramType{kind: kindInteger}, `7`},
		{"-0", paramType{kind: kindInteger}, `0`},
		{"123456789012345678901234567890", paramType{kind: kindInteger}, `123456789012345678901234567890`},
		{"4.5", paramType{kind: kindInteger}, `"4.5"`},
		{"null", paramType{kind: kindInteger}, `null`},
		{"NONE", paramType{kind: kindInteger}, `null`},
		{"2.50", paramType{kind: kindNumber}, `2.5`},
		{"3.0", paramType{kind: kindNumber}, `3`},
		{"1e3", paramType{kind: kindNumber}, `1000`},
		{"1e-7", paramType{kind: kindNumber}, `1e-7`},
		{"1e400", paramType{kind: kindNumber}, `"1e400"`},
		{"NaN", paramType{kind: kindNumber}, `"NaN"`},
		{"0x10", paramType{kind: kindNumber}, `"0x10"`},
		{"TRUE", paramType{kind: kindBoolean}, `true`},
		{"False", paramType{kind: kindBoolean}, `false`},
		{"yes", paramType{kind: kindBoolean}, `"yes"`},
		{`{"a": [1, 2], "b": "x y"}`, paramType{kind: kindObject}, `{"a":[1,2],"b":"x y"}`},
		{`{'a': 1}`, paramType{kind: kindObject}, `"{'a': 1}"`},
		{"[1,\n 2]", paramType{kind: kindArray}, `[1,2]`},
		{"", paramType{kind: kindArray}, `""`},
		{"null", paramType{kind: kindNull, nullable: true}, `null`},
		{"12", paramType{kind: kindAny}, `12`},
		{"plain words", paramType{kind: kindAny}, `"plain words"`},
	}
	for _, c := range cases {
		got := string(convert(c.value, c.typ))
		if got != c.want {
			t.Errorf("convert(%q, %+v) = %s, want %s", c.value, c.typ, got, c.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("convert(%q) = %s is not JSON", c.value, got)
		}
	}
}

func TestToolsFromOpenAI(t *testing.T) {
	tools, err := ToolsFromOpenAI([]byte(`[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}},
		{"type":"retrieval"},{"function":{"name":"b"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 2 || tools[0].Name != "a" || tools[1].Name != "b" {
		t.Fatalf("got %+v", tools)
	}
	if _, err := ToolsFromOpenAI([]byte(`{"not":"a list"}`)); err == nil || !strings.Contains(err.Error(), "reply: reading tools") {
		t.Fatalf("want a reading-tools error, got %v", err)
	}
}

func TestNewRejectsBadSchema(t *testing.T) {
	_, err := New(Options{Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{"properties": [1]}`)}}})
	if err == nil || !strings.Contains(err.Error(), `tool "f"`) {
		t.Fatalf("want an error naming the tool, got %v", err)
	}
}

func TestDefaultIDs(t *testing.T) {
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	events := append(p.Feed("<tool_call>\n<function=a>\n</function>\n</tool_call><tool_call>\n<function=b>\n"), p.Close()...)
	var ids []string
	for _, e := range events {
		if e.Kind == KindToolStart {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) != 2 || ids[0] == ids[1] || !strings.HasPrefix(ids[0], "call_") || len(ids[0]) != len("call_")+2*idRandomBytes {
		t.Fatalf("ids %q: want two distinct call_<24 hex>", ids)
	}
}

// TestStreamingHoldsBackOnlyPossibleTags checks how early text comes out:
// plain text at once, a string value as it is written, and a possible tag
// only once it is decided.
func TestStreamingHoldsBackOnlyPossibleTags(t *testing.T) {
	p, err := New(Options{Thinking: true, NewID: testID})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		delta string
		want  []Event
	}{
		{"Thinking a", []Event{{Kind: KindReasoning, Text: "Thinking a"}}},
		{"bout it\n</th", []Event{{Kind: KindReasoning, Text: "bout it"}}},
		{"ink>\n\nSure", []Event{{Kind: KindContent, Text: "Sure"}}},
		{". <tool", []Event{{Kind: KindContent, Text: "."}}},
		{"_call>\n<function=f>\n<parameter=q>\nab", []Event{
			{Kind: KindToolStart, Index: 0, ID: "call_0", Name: "f"},
			{Kind: KindToolArgs, Index: 0, Text: `{"q":"ab`}}},
		{"c\n", []Event{{Kind: KindToolArgs, Index: 0, Text: "c"}}},
		{"d</para", []Event{{Kind: KindToolArgs, Index: 0, Text: `\nd`}}},
		{"meter>x", []Event{{Kind: KindToolArgs, Index: 0, Text: `</parameter>x`}}},
		{"\n</parameter>\n</function>", []Event{{Kind: KindToolArgs, Index: 0, Text: `"`}}},
		{"\n</tool_call>", []Event{{Kind: KindToolArgs, Index: 0, Text: "}"}, {Kind: KindToolEnd, Index: 0}}},
	}
	for i, s := range steps {
		got := p.Feed(s.delta)
		if len(got) != len(s.want) {
			t.Fatalf("step %d (%q): got %+v, want %+v", i, s.delta, got, s.want)
		}
		for j := range got {
			if got[j] != s.want[j] {
				t.Fatalf("step %d (%q): got %+v, want %+v", i, s.delta, got, s.want)
			}
		}
	}
	if rest := p.Close(); len(rest) != 0 {
		t.Fatalf("Close: got %+v, want nothing", rest)
	}
}
