package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	const tmpl = `{{ bos_token }}|{{ eos_token }}|{{ messages[0].content }}`
	cfgString, _ := json.Marshal(map[string]any{"chat_template": tmpl, "eos_token": "<e>", "bos_token": map[string]any{"content": "<b>"}})
	cfgList, _ := json.Marshal(map[string]any{"chat_template": []map[string]string{{"name": "tool_use", "template": "T"}, {"name": "default", "template": tmpl}}, "eos_token": "<e>"})
	cfgNone, _ := json.Marshal(map[string]any{"eos_token": "<e>"})
	in := Input{Messages: []Message{{Role: "user", Content: TextContent("hi")}}}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
		err   error
	}{
		{"jinja file wins", map[string]string{TemplateFile: "J{{ eos_token }}", TokenizerConfigFile: string(cfgString)}, "J<e>", nil},
		{"config string", map[string]string{TokenizerConfigFile: string(cfgString)}, "<b>|<e>|hi", nil},
		{"config list takes default", map[string]string{TokenizerConfigFile: string(cfgList)}, "|<e>|hi", nil},
		{"jinja file alone", map[string]string{TemplateFile: "{{ messages|length }}"}, "1", nil},
		{"no template", map[string]string{TokenizerConfigFile: string(cfgNone)}, "", ErrNoTemplate},
		{"empty folder", map[string]string{}, "", ErrNoTemplate},
		{"bad config", map[string]string{TokenizerConfigFile: "{"}, "", ErrBadTemplate},
		{"oversized template", map[string]string{TemplateFile: strings.Repeat("x", MaxTemplateBytes+1)}, "", ErrBadTemplate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := Load(writeFiles(t, tc.files))
			if err == nil {
				var got string
				got, err = tp.Render(t.Context(), in)
				if err == nil && got != tc.want {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("got error %v, want %v", err, tc.err)
			}
		})
	}
}

func TestRenderInputErrors(t *testing.T) {
	tp, err := Parse("{{ messages|length }}")
	if err != nil {
		t.Fatal(err)
	}
	user := []Message{{Role: "user", Content: TextContent("hi")}}
	for name, in := range map[string]Input{
		"no messages":       {},
		"reserved kwarg":    {Messages: user, Kwargs: map[string]json.RawMessage{"messages": json.RawMessage(`[]`)}},
		"kwarg not json":    {Messages: user, Kwargs: map[string]json.RawMessage{"x": json.RawMessage(`{`)}},
		"arguments invalid": {Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{"a":`)}}}}}},
	} {
		if _, err := tp.Render(t.Context(), in); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: got %v, want ErrBadInput", name, err)
		}
	}
}

// TestDecodeMessages checks that OpenAI-shaped JSON keeps its shape and key
// order on the way to the template.
func TestDecodeMessages(t *testing.T) {
	const msgs = `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]},
	{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"z\":1,\"a\":{\"y\":[true,null],\"b\":1.50}}"}}]}]`
	var in Input
	if err := json.Unmarshal([]byte(msgs), &in.Messages); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`[{"function":{"parameters":{"z":1,"a":2},"name":"f"},"type":"function","strict":true}]`), &in.Tools); err != nil {
		t.Fatal(err)
	}
	if in.Tools[0].Function.Name != "f" || in.Messages[0].Content.Parts[1].Type != "image_url" {
		t.Fatalf("typed fields not read: %+v %+v", in.Tools[0], in.Messages[0])
	}
	tp, err := Parse(`{{ messages[0].content|tojson }}|{{ messages[1].content is none }}|{{ messages[1].tool_calls[0].function.arguments|tojson }}|{{ tools[0]|tojson }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Render(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}]|True|{"z": 1, "a": {"y": [true, null], "b": 1.5}}|{"function": {"parameters": {"z": 1, "a": 2}, "name": "f"}, "type": "function", "strict": true}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
