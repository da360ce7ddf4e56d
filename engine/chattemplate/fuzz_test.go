package chattemplate

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzRender renders the Qwen3.5 template over messages built from
// arbitrary strings: it must never panic, and a failure must be one of the
// package's error classes.
func FuzzRender(f *testing.F) {
	f.Add("user", "hello", "thinking", `{"a": 1}`, "tool output")
	f.Add("assistant", "<think>\nx\n</think>\n\ny", "", `"{\"q\": [1, 2]}"`, "")
	f.Add("system", "\x00\xff\xfe{{ 1 }}{% raw %}", "\n", `not json`, "<tool_response>")
	f.Add("tool", "</think>", "</think>", `{}`, "\u2028")
	tp := loadTemplate(f, "qwen3.5")
	f.Fuzz(func(t *testing.T, role, content, reasoning, args, tool string) {
		in := Input{
			Messages: []Message{
				{Role: "user", Content: TextContent(tool)},
				{Role: role, Content: TextContent(content), ReasoningContent: &reasoning,
					ToolCalls: []ToolCall{{Function: FunctionCall{Name: content, Arguments: argsJSON(args)}}}},
				{Role: "tool", Content: TextContent(tool)},
				{Role: "user", Content: TextContent(content)},
			},
			AddGenerationPrompt: true,
		}
		_, err := tp.Render(t.Context(), in)
		var raised *RaiseError
		if err != nil && !errors.As(err, &raised) && !errors.Is(err, ErrRender) && !errors.Is(err, ErrBadInput) && !errors.Is(err, ErrLimit) {
			t.Fatalf("error of no class: %v", err)
		}
	})
}

// argsJSON uses s as arguments when it is JSON, else as a JSON string.
func argsJSON(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// FuzzParse parses and renders arbitrary template source: errors are fine,
// panics and unbounded work are not.
func FuzzParse(f *testing.F) {
	f.Add("{{ messages[0].content }}")
	f.Add("{% for m in messages %}{{ m.role ~ m.content * 2 }}{% endfor %}")
	f.Add("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}")
	f.Add("{{ (((( }}{% if %}{% endfor %}")
	f.Add("{% set ns = namespace(a=[1]) %}{{ ns.a + [2] }}{{ {'k': 1}|tojson(indent=2) }}")
	in := Input{Messages: []Message{{Role: "user", Content: TextContent("hi")}}}
	f.Fuzz(func(t *testing.T, src string) {
		tp, err := Parse(src)
		if err != nil {
			if !errors.Is(err, ErrBadTemplate) {
				t.Fatalf("parse error of no class: %v", err)
			}
			return
		}
		_, _ = tp.Render(t.Context(), in)
	})
}
