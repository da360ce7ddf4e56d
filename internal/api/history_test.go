package api

import (
	"encoding/json"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestLooseToolArguments replays histories whose tool calls carry
// arguments that are empty, not JSON or not an object, through each API:
// each is answered, and the prompt shows the call as it was made (empty
// arguments as none, other text under the one parameter "arguments"),
// where the template used to fail with "Can only get item pairs from a
// mapping".
func TestLooseToolArguments(t *testing.T) {
	var seen prompts
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, seen.record(func(p string) string {
		return "</think>\n\nok"
	}))
	chat := func(args string) string {
		return `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":` + args + `}}]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`
	}
	responses := func(args string) string {
		return `{"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":` + args + `},{"type":"function_call_output","call_id":"c1","output":"r"}]}`
	}
	messages := func(input string) string {
		return `{"max_tokens":10,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":` + input + `}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"r"}]}]}`
	}
	const none = "<function=f>\n</function>"
	for _, tc := range []struct {
		name, route, body, want string
	}{
		{"chat empty", "/v1/chat/completions", chat(`""`), none},
		{"chat not JSON", "/v1/chat/completions", chat(`"{\"city\": \"Par"`), "<parameter=arguments>\n{\"city\": \"Par\n</parameter>"},
		{"chat a list", "/v1/chat/completions", chat(`"[1, 2]"`), "<parameter=arguments>\n[1, 2]\n</parameter>"},
		{"chat a number", "/v1/chat/completions", chat(`42`), "<parameter=arguments>\n42\n</parameter>"},
		{"chat an object still", "/v1/chat/completions", chat(`"{\"city\":\"Paris\"}"`), "<parameter=city>\nParis\n</parameter>"},
		{"responses empty", "/v1/responses", responses(`""`), none},
		{"responses not JSON", "/v1/responses", responses(`"city=Paris"`), "<parameter=arguments>\ncity=Paris\n</parameter>"},
		{"messages a list", "/v1/messages", messages(`[1]`), "<parameter=arguments>\n[1]\n</parameter>"},
		{"messages a string", "/v1/messages", messages(`"Paris"`), "<parameter=arguments>\nParis\n</parameter>"},
	} {
		resp, text := do(t, post(t, ts.URL+tc.route, tc.body))
		prompt := seen.take()
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d: %s", tc.name, resp.StatusCode, text)
			continue
		}
		if !strings.Contains(prompt, tc.want) {
			t.Errorf("%s: the prompt lacks %q:\n%s", tc.name, tc.want, prompt)
		}
	}
}

// TestImagesRefusedAlike checks that an image is refused with the same
// words wherever it comes: in a user turn or inside a tool's result, on
// each API, since the loaded model is text-only.
func TestImagesRefusedAlike(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	const png = `"data:image/png;base64,iVBORw0KGgo="`
	img := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`
	for _, tc := range []struct{ name, route, body string }{
		{"messages user turn", "/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":[` + img + `]}]}`},
		{"messages tool_result", "/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"Read","input":{"file_path":"a.png"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[` + img + `]}]}]}`},
		{"chat user turn", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":` + png + `}}]}]}`},
		{"chat tool message", "/v1/chat/completions", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"read","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":[{"type":"image_url","image_url":{"url":` + png + `}}]}]}`},
		{"responses function output", "/v1/responses", `{"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c","name":"read","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":` + png + `}]}]}`},
	} {
		resp, text := do(t, post(t, ts.URL+tc.route, tc.body))
		var e struct {
			Error struct{ Message string }
		}
		json.Unmarshal([]byte(text), &e)
		if resp.StatusCode != 400 || !strings.Contains(e.Error.Message, `is an image, but the loaded model "qwen-test" is text-only`) {
			t.Errorf("%s: status %d: %s", tc.name, resp.StatusCode, text)
		}
	}
}
