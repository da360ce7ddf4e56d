package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestLegacyFunctions: the legacy functions API (functions,
// function_call, role function) is served like tools, and answered in its
// own shape: message.function_call and finish_reason "function_call",
// streamed or not.
func TestLegacyFunctions(t *testing.T) {
	var seen prompts
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, seen.record(func(p string) string {
		return "</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
	}))
	body := `{"functions":[{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],"function_call":"auto",
		"messages":[{"role":"user","content":"Weather in Rome?"},{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}},
		{"role":"function","name":"get_weather","content":"18 C"},{"role":"user","content":"And Paris?"}]}`
	resp, text := do(t, post(t, ts.URL+"/v1/chat/completions", body))
	var c struct {
		Choices []struct {
			Message struct {
				FunctionCall *struct{ Name, Arguments string } `json:"function_call"`
				ToolCalls    []any                             `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(text), &c) != nil || len(c.Choices) != 1 {
		t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	ch := c.Choices[0]
	if ch.FinishReason != "function_call" || ch.Message.ToolCalls != nil || ch.Message.FunctionCall == nil ||
		ch.Message.FunctionCall.Name != "get_weather" || ch.Message.FunctionCall.Arguments != `{"city":"Paris"}` {
		t.Errorf("reply %s", text)
	}
	p := seen.last()
	for _, want := range []string{"Weather of a city", "<function=get_weather>\n<parameter=city>\nRome", "<tool_response>\n18 C\n</tool_response>"} {
		if !strings.Contains(p, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, p)
		}
	}

	resp, text = do(t, post(t, ts.URL+"/v1/chat/completions", strings.Replace(body, "{", `{"stream":true,`, 1)))
	data, _ := sseEvents(t, text)
	var name, args, finish string
	for _, d := range data[:len(data)-1] {
		var chunk struct {
			Choices []struct {
				Delta struct {
					FunctionCall *struct{ Name, Arguments string } `json:"function_call"`
					ToolCalls    []any                             `json:"tool_calls"`
				}
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(d), &chunk); err != nil || len(chunk.Choices) != 1 {
			t.Fatalf("chunk %s", d)
		}
		ch := chunk.Choices[0]
		if ch.Delta.ToolCalls != nil {
			t.Errorf("a legacy stream carries tool_calls: %s", d)
		}
		if f := ch.Delta.FunctionCall; f != nil {
			name += f.Name
			args += f.Arguments
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	if resp.StatusCode != 200 || name != "get_weather" || args != `{"city":"Paris"}` || finish != "function_call" {
		t.Errorf("stream: %q %q %q: %s", name, args, finish, text)
	}
}

// TestAnthropicModels: Anthropic's SDK lists models in its own shape (it
// sends anthropic-version, or x-api-key); other clients get OpenAI's.
func TestAnthropicModels(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for _, header := range []string{"anthropic-version", "x-api-key"} {
		r := get(t, ts.URL+"/v1/models?limit=20")
		r.Header.Set(header, "2023-06-01")
		resp, text := do(t, r)
		var list struct {
			Data []struct {
				Type, ID, DisplayName, CreatedAt string
			}
			FirstID, LastID *string
			HasMore         *bool
			Object          *string
		}
		json.Unmarshal([]byte(strings.NewReplacer("display_name", "DisplayName", "created_at", "CreatedAt", "first_id", "FirstID", "last_id", "LastID", "has_more", "HasMore").Replace(text)), &list)
		if resp.StatusCode != 200 || len(list.Data) != 1 || list.Data[0].Type != "model" || list.Data[0].ID != "qwen-test" ||
			list.Data[0].DisplayName == "" || list.Data[0].CreatedAt == "" || list.HasMore == nil || *list.HasMore ||
			list.FirstID == nil || *list.FirstID != "qwen-test" || list.Object != nil {
			t.Errorf("with %s: %d %s", header, resp.StatusCode, text)
		}
		r = get(t, ts.URL+"/v1/models/claude-sonnet-4")
		r.Header.Set(header, "2023-06-01")
		if resp, text := do(t, r); resp.StatusCode != 200 || !strings.Contains(text, `"type":"model"`) || !strings.Contains(text, `"created_at":"`) {
			t.Errorf("one model with %s: %d %s", header, resp.StatusCode, text)
		}
	}
	resp, text := do(t, get(t, ts.URL+"/v1/models"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(text, `"object":"list"`) || strings.Contains(text, "has_more") {
		t.Errorf("OpenAI's shape: %s", text)
	}
}

// TestCodexTools: Codex's namespace and custom tools are offered and their
// calls answered as OpenAI defines them (a namespaced function_call, a
// custom_tool_call with its input); its custom_tool_call and
// local_shell_call history items are taken; hosted tools are echoed as
// sent.
func TestCodexTools(t *testing.T) {
	var seen prompts
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, seen.record(func(p string) string {
		if strings.Contains(lastUser(p), "patch") {
			return "</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n*** End Patch\n</parameter>\n</function>\n</tool_call>"
		}
		return "</think>\n\n<tool_call>\n<function=mcp__gh__create_issue>\n<parameter=title>\nBug\n</parameter>\n</function>\n</tool_call>"
	}))
	tools := `[{"type":"namespace","name":"mcp__gh","description":"GitHub","tools":[{"type":"function","name":"create_issue","description":"Opens an issue","parameters":{"type":"object","properties":{"title":{"type":"string"}}}}]},
		{"type":"custom","name":"apply_patch","description":"Applies a patch","format":{"type":"grammar","syntax":"lark","definition":"start: begin_patch"}},
		{"type":"web_search","search_context_size":"high","user_location":{"type":"approximate","country":"FR"}}]`
	r := bothResponses(t, ts, `{"store":false,"tools":`+tools+`,"input":"Apply the patch."}`)
	out := r["output"].([]any)
	call := out[len(out)-1].(map[string]any)
	if call["type"] != "custom_tool_call" || call["name"] != "apply_patch" || call["input"] != "*** Begin Patch\n*** End Patch" || call["call_id"] == "" {
		t.Errorf("custom tool call %v", call)
	}
	echo, _ := json.Marshal(r["tools"])
	var sent any
	json.Unmarshal([]byte(tools), &sent)
	if js, _ := json.Marshal(sent); string(js) != string(echo) {
		t.Errorf("tools echoed as\n%s\nnot as sent\n%s", echo, js)
	}
	p := seen.last()
	for _, want := range []string{"mcp__gh__create_issue", "Opens an issue", "apply_patch", "start: begin_patch"} {
		if !strings.Contains(p, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, p)
		}
	}

	r = bothResponses(t, ts, `{"store":false,"tools":`+tools+`,"input":"File a bug."}`)
	out = r["output"].([]any)
	call = out[len(out)-1].(map[string]any)
	if call["type"] != "function_call" || call["name"] != "create_issue" || call["namespace"] != "mcp__gh" || call["arguments"] != `{"title":"Bug"}` {
		t.Errorf("namespaced call %v", call)
	}

	history := `[{"role":"user","content":"Fix it."},
		{"type":"custom_tool_call","call_id":"c1","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},
		{"type":"custom_tool_call_output","call_id":"c1","output":"Done!"},
		{"type":"local_shell_call","id":"ls1","call_id":"c2","status":"completed","action":{"type":"exec","command":["ls","-la"],"timeout_ms":1000}},
		{"type":"local_shell_call_output","id":"c2","output":"README.md"},
		{"type":"function_call","call_id":"c3","name":"create_issue","namespace":"mcp__gh","arguments":"{\"title\":\"Old\"}"},
		{"type":"function_call_output","call_id":"c3","output":"#12"},
		{"role":"user","content":"File a bug."}]`
	bothResponses(t, ts, `{"store":false,"tools":`+tools+`,"input":`+history+`}`)
	p = seen.last()
	for _, want := range []string{"<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n*** End Patch\n</parameter>", "<tool_response>\nDone!\n</tool_response>",
		"<function=local_shell>\n<parameter=type>\nexec\n</parameter>\n<parameter=command>\n[\"ls\", \"-la\"]", "<tool_response>\nREADME.md\n</tool_response>",
		"<function=mcp__gh__create_issue>\n<parameter=title>\nOld"} {
		if !strings.Contains(p, want) {
			t.Errorf("the history prompt lacks %q:\n%s", want, p)
		}
	}
}
