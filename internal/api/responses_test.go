package api

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"

	"petal/internal/service"
)

// responsesEvents splits a Responses stream into (event name, data) pairs;
// each event's name must equal its data's type, as the SDKs read either.
func responsesEvents(t *testing.T, body string) (names []string, data []map[string]any) {
	t.Helper()
	for _, block := range strings.Split(strings.TrimSpace(body), "\n\n") {
		if strings.HasPrefix(block, ": ") {
			continue
		}
		lines := strings.SplitN(block, "\n", 2)
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("bad event %q", block)
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &d); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(lines[0], "event: ")
		if d["type"] != name || int(d["sequence_number"].(float64)) != len(names) {
			t.Fatalf("event %s: type %v, sequence_number %v after %d events", name, d["type"], d["sequence_number"], len(names))
		}
		names, data = append(names, name), append(data, d)
	}
	return names, data
}

// accumulate rebuilds the output from the stream's events as the openai
// SDK's ResponseStream does, failing where it would throw.
func accumulate(t *testing.T, data []map[string]any) []any {
	t.Helper()
	var out []map[string]any
	at := func(d map[string]any) map[string]any {
		i := int(d["output_index"].(float64))
		if i >= len(out) {
			t.Fatalf("%s names output %d of %d", d["type"], i, len(out))
		}
		return out[i]
	}
	for _, d := range data {
		switch d["type"] {
		case "response.output_item.added":
			out = append(out, d["item"].(map[string]any))
		case "response.content_part.added":
			it := at(d)
			it["content"] = append(it["content"].([]any), d["part"])
		case "response.output_text.delta", "response.reasoning_text.delta":
			part := at(d)["content"].([]any)[int(d["content_index"].(float64))].(map[string]any)
			part["text"] = part["text"].(string) + d["delta"].(string)
		case "response.function_call_arguments.delta":
			it := at(d)
			it["arguments"] = it["arguments"].(string) + d["delta"].(string)
		case "response.custom_tool_call_input.delta":
			it := at(d)
			it["input"] = it["input"].(string) + d["delta"].(string)
		case "response.output_item.done":
			it := at(d)
			it["status"] = "completed"
			got, _ := json.Marshal(it)
			want, _ := json.Marshal(d["item"])
			if string(got) != string(want) {
				t.Errorf("item done %s, accumulated %s", want, got)
			}
		}
	}
	res := make([]any, len(out))
	for i, it := range out {
		res[i] = it
	}
	return res
}

var responseIDs = regexp.MustCompile(`"(id|call_id)":"[^"]*"`)

func sameOutput(t *testing.T, a, b any) {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if responseIDs.ReplaceAllString(string(ja), "") != responseIDs.ReplaceAllString(string(jb), "") {
		t.Errorf("outputs differ:\n%s\n%s", ja, jb)
	}
}

// bothResponses sends body streamed and not, checks the event sequence and
// that both give the same response, and returns it.
func bothResponses(t *testing.T, ts *testServer, body string) map[string]any {
	t.Helper()
	resp, text := do(t, post(t, ts.URL+"/v1/responses", body))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, text)
	}
	var plain map[string]any
	if err := json.Unmarshal([]byte(text), &plain); err != nil {
		t.Fatal(err)
	}
	resp, text = do(t, post(t, ts.URL+"/v1/responses", strings.Replace(body, "{", `{"stream":true,`, 1)))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, text)
	}
	names, data := responsesEvents(t, text)
	if len(names) < 3 || names[0] != "response.created" || names[1] != "response.in_progress" {
		t.Fatalf("events %v", names)
	}
	final := data[len(data)-1]["response"].(map[string]any)
	if want := "response." + plain["status"].(string); names[len(names)-1] != want {
		t.Errorf("last event %s, want %s", names[len(names)-1], want)
	}
	sameOutput(t, accumulate(t, data), final["output"])
	sameOutput(t, final["output"], plain["output"])
	if ju, _ := json.Marshal(final["usage"]); !strings.Contains(string(ju), `"input_tokens"`) {
		t.Errorf("usage %s", ju)
	}
	return plain
}

// TestResponses: POST /v1/responses (Codex's only API; issue 16: 404) with
// instructions, developer input_text parts, reasoning and a function call,
// then the call's output back as items, with store:false and the fields
// Codex sends; streamed and not.
func TestResponses(t *testing.T) {
	var mu sync.Mutex
	var last string
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string {
		mu.Lock()
		last = p
		mu.Unlock()
		if strings.Contains(p, "<tool_response>") {
			return "Done.</think>\n\nIt is 21 degrees."
		}
		return "Need weather.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
	})
	tools := `"tools":[{"type":"function","name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":false},{"type":"web_search"}]`
	codex := `"store":false,"prompt_cache_key":"k","reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"],"tool_choice":"auto","parallel_tool_calls":false,"client_metadata":{"x":"y"}`
	first := `[{"type":"message","role":"developer","content":[{"type":"input_text","text":"Be careful."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]}]`
	r := bothResponses(t, ts, `{"model":"gpt-5","instructions":"You are a helper.",`+tools+`,`+codex+`,"input":`+first+`}`)
	out := r["output"].([]any)
	if len(out) != 2 {
		t.Fatalf("output %v", out)
	}
	rs, call := out[0].(map[string]any), out[1].(map[string]any)
	if rs["type"] != "reasoning" || call["type"] != "function_call" || call["name"] != "get_weather" ||
		call["arguments"] != `{"city":"Paris"}` || call["call_id"] == "" || r["status"] != "completed" {
		t.Fatalf("output %v", out)
	}
	if !strings.Contains(last, "You are a helper.\n\nBe careful.<|im_end|>\n<|im_start|>user\nWeather in Paris?") || !strings.Contains(last, "get_weather") || strings.Contains(last, "web_search") {
		t.Errorf("first prompt %q", last)
	}

	items, _ := json.Marshal(out)
	second := first[:len(first)-1] + "," + string(items)[1:len(items)-1] +
		`,{"type":"function_call_output","call_id":"` + call["call_id"].(string) + `","output":"21 C"}]`
	r = bothResponses(t, ts, `{`+tools+`,`+codex+`,"input":`+second+`}`)
	out = r["output"].([]any)
	msg := out[len(out)-1].(map[string]any)
	if msg["type"] != "message" || msg["role"] != "assistant" {
		t.Fatalf("output %v", out)
	}
	if text := msg["content"].([]any)[0].(map[string]any)["text"]; text != "It is 21 degrees." {
		t.Errorf("text %v", text)
	}
	for _, want := range []string{"<think>\nNeed weather.\n</think>", "<function=get_weather>\n<parameter=city>\nParis", "<tool_response>\n21 C\n</tool_response>"} {
		if !strings.Contains(last, want) {
			t.Errorf("second prompt lacks %q: %q", want, last)
		}
	}

	// A string input, and a reply cut by max_output_tokens.
	r = bothResponses(t, ts, `{"input":"hi","max_output_tokens":3}`)
	if r["status"] != "incomplete" || r["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
		t.Errorf("%v", r)
	}
}

// TestResponsesErrors: what cannot be served is a clear 400.
func TestResponsesErrors(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for _, c := range []struct{ body, want string }{
		{`{"input":"hi","previous_response_id":"resp_1"}`, `previous response \"resp_1\" was not found`},
		{`{"input":[{"type":"item_reference","id":"x"}]}`, `refers to item \"x\", which was not found`},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:x"}]}]}`, "the data URL has no comma"},
		{`{"input":[{"type":"hologram"}]}`, "hologram"},
		{`{"input":5}`, "string or a list"},
		{`{"input":[]}`, "at least one"},
		{`{"input":"hi","max_output_tokens":0}`, "max_output_tokens"},
	} {
		resp, body := do(t, post(t, ts.URL+"/v1/responses", c.body))
		if resp.StatusCode != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
}
