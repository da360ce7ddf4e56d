package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"petal/internal/service"
)

// anthropicEvent is one named server-sent event.
type anthropicEvent struct {
	Name string
	Data map[string]any
	Raw  string
}

// anthropicEvents splits a Messages stream into its events: each an
// "event:" line, a "data:" line whose type repeats the name, and a blank
// line; SSE comments (pings) may come between events.
func anthropicEvents(t *testing.T, body string) []anthropicEvent {
	t.Helper()
	var out []anthropicEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, ": ") {
			continue
		}
		name, ok := strings.CutPrefix(line, "event: ")
		if !ok || !sc.Scan() {
			t.Fatalf("expected an event line, got %q in %q", line, body)
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			t.Fatalf("event %s without a data line: %q", name, sc.Text())
		}
		if !sc.Scan() || sc.Text() != "" {
			t.Fatalf("event %s not ended by a blank line", name)
		}
		e := anthropicEvent{Name: name, Raw: data}
		if err := json.Unmarshal([]byte(data), &e.Data); err != nil {
			t.Fatalf("event %s: %v", name, err)
		}
		if e.Data["type"] != name {
			t.Errorf("event %s carries type %v", name, e.Data["type"])
		}
		out = append(out, e)
	}
	return out
}

// message is a non-streamed Messages response.
type message struct {
	ID, Type, Role, Model string
	Content               []block
	StopReason            *string `json:"stop_reason"`
	StopSequence          *string `json:"stop_sequence"`
	Usage                 anthropicUsage
}

type block struct {
	Type      string
	Text      *string
	Thinking  *string
	Signature *string
	ID, Name  string
	Input     json.RawMessage
}

// assemble rebuilds the message that a stream describes, checking the
// order of its events on the way.
func assemble(t *testing.T, events []anthropicEvent) message {
	t.Helper()
	if len(events) < 3 || events[0].Name != "message_start" || events[len(events)-1].Name != "message_stop" ||
		events[len(events)-2].Name != "message_delta" {
		t.Fatalf("stream does not open with message_start and close with message_delta, message_stop: %v", names(events))
	}
	var start struct{ Message message }
	json.Unmarshal([]byte(events[0].Raw), &start)
	m := start.Message
	if len(m.Content) != 0 || m.StopReason != nil || m.Usage.InputTokens == 0 {
		t.Errorf("message_start %s", events[0].Raw)
	}
	open := -1
	args := map[int]string{}
	for _, e := range events[1 : len(events)-2] {
		var ev struct {
			Index        int
			ContentBlock block `json:"content_block"`
			Delta        struct {
				Type, Text, Thinking string
				PartialJSON          string `json:"partial_json"`
			}
		}
		if err := json.Unmarshal([]byte(e.Raw), &ev); err != nil {
			t.Fatal(err)
		}
		switch e.Name {
		case "content_block_start":
			if open >= 0 || ev.Index != len(m.Content) {
				t.Fatalf("block %d starts while %d is open (%d blocks)", ev.Index, open, len(m.Content))
			}
			open = ev.Index
			m.Content = append(m.Content, ev.ContentBlock)
		case "content_block_delta":
			if ev.Index != open {
				t.Fatalf("delta for block %d while %d is open", ev.Index, open)
			}
			b := &m.Content[open]
			switch want := map[string]string{"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}[b.Type]; {
			case ev.Delta.Type != want:
				t.Errorf("a %s block got a %s", b.Type, ev.Delta.Type)
			case b.Type == "text":
				*b.Text += ev.Delta.Text
			case b.Type == "thinking":
				*b.Thinking += ev.Delta.Thinking
			default:
				args[open] += ev.Delta.PartialJSON
			}
		case "content_block_stop":
			if ev.Index != open {
				t.Fatalf("stop for block %d while %d is open", ev.Index, open)
			}
			if a, ok := args[open]; ok {
				m.Content[open].Input = json.RawMessage(a)
			}
			open = -1
		default:
			t.Fatalf("unexpected event %s", e.Name)
		}
	}
	if open >= 0 {
		t.Errorf("block %d never stopped", open)
	}
	var delta struct {
		Delta struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		}
		Usage anthropicUsage
	}
	json.Unmarshal([]byte(events[len(events)-2].Raw), &delta)
	m.StopReason, m.StopSequence, m.Usage = delta.Delta.StopReason, delta.Delta.StopSequence, delta.Usage
	return m
}

func names(events []anthropicEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Name)
	}
	return out
}

// ask sends a Messages request, streamed or not, and returns the message.
func ask(t *testing.T, ts *testServer, body string, stream bool) message {
	t.Helper()
	if stream {
		body = strings.Replace(body, "{", `{"stream":true,`, 1)
	}
	req := post(t, ts.URL+"/v1/messages", body)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, text := do(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	if stream {
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("stream of type %q", ct)
		}
		return assemble(t, anthropicEvents(t, text))
	}
	var m message
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") || m.Model != "qwen-test" {
		t.Errorf("message head %+v", m)
	}
	return m
}

// bothWays asks streamed and not (on a fresh cache each time, so that the
// usage agrees) and checks that the two answers are the same message.
func bothWays(t *testing.T, reply func(string) string, body string) message {
	t.Helper()
	plain := ask(t, newTestServer(t, service.Options{CacheBytes: -1}, Options{}, reply), body, false)
	streamed := ask(t, newTestServer(t, service.Options{CacheBytes: -1}, Options{}, reply), body, true)
	for i := range streamed.Content {
		if i < len(plain.Content) && streamed.Content[i].ID != "" {
			streamed.Content[i].ID = plain.Content[i].ID // ids are random
		}
	}
	if streamed.Type != "message" || streamed.Role != "assistant" || !strings.HasPrefix(streamed.ID, "msg_") || streamed.Model != plain.Model {
		t.Errorf("message_start head %+v", streamed)
	}
	streamed.ID = plain.ID
	if !reflect.DeepEqual(plain, streamed) {
		pj, _ := json.Marshal(plain)
		sj, _ := json.Marshal(streamed)
		t.Errorf("streamed and plain answers differ:\nplain    %s\nstreamed %s", pj, sj)
	}
	return plain
}

func TestMessages(t *testing.T) {
	var mu sync.Mutex
	var prompts []string
	reply := func(p string) string {
		mu.Lock()
		prompts = append(prompts, p)
		mu.Unlock()
		return "Hmm.</think>\n\nHello there."
	}
	m := bothWays(t, reply, `{"model":"claude-sonnet-4-5","max_tokens":100,
		"system":[{"type":"text","text":"Be brief."},{"type":"text","text":" Very.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" you"}]}],
		"metadata":{"user_id":"u"},"temperature":0.7,"top_p":0.9,"top_k":20}`)
	if len(m.Content) != 2 || m.Content[0].Type != "thinking" || *m.Content[0].Thinking != "Hmm." || m.Content[0].Signature == nil ||
		m.Content[1].Type != "text" || *m.Content[1].Text != "Hello there." {
		t.Errorf("content %+v", m.Content)
	}
	if m.StopReason == nil || *m.StopReason != "end_turn" || m.StopSequence != nil {
		t.Errorf("stop %v %v", m.StopReason, m.StopSequence)
	}
	if m.Usage.InputTokens == 0 || m.Usage.OutputTokens != len("Hmm.</think>\n\nHello there.")-len("</think>")+1 {
		t.Errorf("usage %+v", m.Usage)
	}
	for _, p := range prompts {
		if !strings.Contains(p, "<|im_start|>system\nBe brief. Very.<|im_end|>") || lastUser(p) != "Hi you" {
			t.Errorf("prompt %q", p)
		}
	}
}

func TestMessagesStopAndLength(t *testing.T) {
	say := constant("</think>\n\nalpha beta STOP gamma")
	m := bothWays(t, say, `{"max_tokens":100,"stop_sequences":["STOP"],"thinking":{"type":"disabled"},
		"messages":[{"role":"user","content":"go"}]}`)
	if m.StopReason == nil || *m.StopReason != "stop_sequence" || m.StopSequence == nil || *m.StopSequence != "STOP" ||
		len(m.Content) != 1 || strings.TrimSpace(*m.Content[0].Text) != "alpha beta" {
		t.Errorf("stop sequence: %+v", m)
	}
	m = bothWays(t, say, `{"max_tokens":3,"messages":[{"role":"user","content":"go"}]}`)
	if m.StopReason == nil || *m.StopReason != "max_tokens" || m.Usage.OutputTokens != 3 {
		t.Errorf("max_tokens: %+v", m)
	}
}

// TestMessagesToolRoundTrip offers a tool, gets a tool_use, sends its
// result back, and checks what the model saw and answered.
func TestMessagesToolRoundTrip(t *testing.T) {
	var mu sync.Mutex
	var last string
	reply := func(p string) string {
		mu.Lock()
		last = p
		mu.Unlock()
		if strings.Contains(p, "<tool_response>") {
			return "</think>\n\nIt is 21 degrees in Paris."
		}
		return "Need weather.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	}
	tools := `"tools":[{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}]`
	m := bothWays(t, reply, `{"max_tokens":200,`+tools+`,"tool_choice":{"type":"auto"},
		"messages":[{"role":"user","content":"Weather in Paris?"}]}`)
	if m.StopReason == nil || *m.StopReason != "tool_use" || len(m.Content) != 2 {
		t.Fatalf("first turn %+v", m)
	}
	call := m.Content[1]
	if m.Content[0].Type != "thinking" || call.Type != "tool_use" || call.Name != "get_weather" || call.ID == "" ||
		string(call.Input) != `{"city":"Paris","days":3}` {
		t.Fatalf("tool_use block %+v input %s", call, call.Input)
	}
	if !strings.Contains(last, "get_weather") || !strings.Contains(last, "Weather of a city") {
		t.Errorf("the tool was not offered: %q", last)
	}

	history, _ := json.Marshal([]any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": m.Content},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": call.ID, "content": []any{map[string]any{"type": "text", "text": "21 C, sunny"}}},
		}},
	})
	m = bothWays(t, reply, `{"max_tokens":200,`+tools+`,"messages":`+string(history)+`}`)
	if m.StopReason == nil || *m.StopReason != "end_turn" || len(m.Content) != 1 || *m.Content[0].Text != "It is 21 degrees in Paris." {
		t.Errorf("second turn %+v", m)
	}
	for _, want := range []string{
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		"<tool_response>\n21 C, sunny\n</tool_response>",
	} {
		if !strings.Contains(last, want) {
			t.Errorf("the second prompt lacks %q:\n%s", want, last)
		}
	}
}

func TestMessagesCountTokens(t *testing.T) {
	ts := newTestServer(t, service.Options{CacheBytes: -1}, Options{}, constant("ok"))
	body := `{"system":"Be brief.","messages":[{"role":"user","content":"How many tokens is this?"}]}`
	resp, text := do(t, post(t, ts.URL+"/v1/messages/count_tokens", body))
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(text), &count) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, text)
	}
	if m := ask(t, ts, body, false); count.InputTokens == 0 || m.Usage.InputTokens != count.InputTokens {
		t.Errorf("counted %d, a generation used %d", count.InputTokens, m.Usage.InputTokens)
	}
}

// TestMessagesErrors checks that bad requests and the gate answer in
// Anthropic's error shape with the right status, never a 500.
func TestMessagesErrors(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{APIKey: "k"}, constant("ok"))
	user := `"messages":[{"role":"user","content":"hi"}]`
	long := strings.Repeat("word ", 5000)
	send := func(body string, edit func(*http.Request)) (*http.Response, string) {
		r := post(t, ts.URL+"/v1/messages", body)
		r.Header.Set("x-api-key", "k")
		if edit != nil {
			edit(r)
		}
		return do(t, r)
	}
	for _, tc := range []struct {
		name   string
		body   string
		edit   func(*http.Request)
		status int
		typ    string
	}{
		{"no messages", `{"messages":[]}`, nil, 400, "invalid_request_error"},
		{"only a system message", `{"messages":[{"role":"system","content":"x"}]}`, nil, 400, "invalid_request_error"},
		{"numeric content", `{"messages":[{"role":"user","content":5}]}`, nil, 400, "invalid_request_error"},
		{"non-object block", `{"messages":[{"role":"user","content":[1]}]}`, nil, 400, "invalid_request_error"},
		{"image", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AA=="}}]}]}`, nil, 400, "invalid_request_error"},
		{"unknown block", `{"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, nil, 400, "invalid_request_error"},
		{"tool_result without id", `{"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, nil, 400, "invalid_request_error"},
		{"image in tool_result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]}`, nil, 400, "invalid_request_error"},
		{"tool_use in a user turn", `{"messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`, nil, 400, "invalid_request_error"},
		{"max_tokens 0", `{"max_tokens":0,` + user + `}`, nil, 400, "invalid_request_error"},
		{"temperature as text", `{"temperature":"hot",` + user + `}`, nil, 400, "invalid_request_error"},
		{"temperature out of range", `{"temperature":-1,` + user + `}`, nil, 400, "invalid_request_error"},
		{"stop_sequences as a string", `{"stop_sequences":"STOP",` + user + `}`, nil, 400, "invalid_request_error"},
		{"server tool", `{"tools":[{"type":"web_search_20250305","name":"web_search"}],` + user + `}`, nil, 400, "invalid_request_error"},
		{"tool without name", `{"tools":[{"input_schema":{"type":"object"}}],` + user + `}`, nil, 400, "invalid_request_error"},
		{"schema not an object", `{"tools":[{"name":"f","input_schema":"any"}],` + user + `}`, nil, 400, "invalid_request_error"},
		{"odd thinking", `{"thinking":{"type":"sometimes"},` + user + `}`, nil, 400, "invalid_request_error"},
		{"broken JSON", `{"messages":`, nil, 400, "invalid_request_error"},
		{"empty body", ``, nil, 400, "invalid_request_error"},
		{"prompt over the context", `{"messages":[{"role":"user","content":"` + long + `"}]}`, nil, 400, "invalid_request_error"},
		{"no key", `{` + user + `}`, func(r *http.Request) { r.Header.Del("x-api-key") }, 401, "authentication_error"},
		{"wrong key", `{` + user + `}`, func(r *http.Request) { r.Header.Set("x-api-key", "nope") }, 401, "authentication_error"},
		{"rebinding host", `{` + user + `}`, func(r *http.Request) { r.Host = "evil.example"; r.Header.Del("x-api-key") }, 403, "permission_error"},
		{"foreign origin", `{` + user + `}`, func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, 403, "permission_error"},
		{"text/plain from a page", `{` + user + `}`, func(r *http.Request) {
			r.Header.Set("Content-Type", "text/plain")
			r.Header.Set("Origin", "http://localhost:5173")
		}, 415, "invalid_request_error"},
		{"too big", `{"system":"` + strings.Repeat("x", MaxBodyBytes) + `",` + user + `}`, nil, 413, "request_too_large"},
	} {
		resp, text := send(tc.body, tc.edit)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal([]byte(text), &e); err != nil || resp.StatusCode != tc.status || e.Type != "error" ||
			e.Error.Type != tc.typ || e.Error.Message == "" {
			t.Errorf("%s: status %d, body %.300s; want %d %s", tc.name, resp.StatusCode, text, tc.status, tc.typ)
		}
		if tc.name == "prompt over the context" && !strings.Contains(e.Error.Message, "4096") {
			t.Errorf("the context error does not name the context: %s", e.Error.Message)
		}
	}
	// The key as a Bearer token works too, as on /v1.
	r := post(t, ts.URL+"/v1/messages", `{`+user+`}`)
	r.Header.Set("Authorization", "Bearer k")
	if resp, text := do(t, r); resp.StatusCode != 200 {
		t.Errorf("Bearer key: %d %s", resp.StatusCode, text)
	}
}

// FuzzMessagesRequest sends arbitrary bodies to /v1/messages: whatever the
// body, the answer is a success or a 4xx in Anthropic's shape, never a 500
// or a panic.
func FuzzMessagesRequest(f *testing.F) {
	seeds := []string{
		`{"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
		`{"system":[{"type":"text","text":"s"}],"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`{"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"x"},{"type":"tool_use","id":"c","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":"r","is_error":true}]}]}`,
		`{"messages":[{"role":"user","content":"x"}],"temperature":0.5,"top_p":0.9,"top_k":20,"stop_sequences":["a"],"thinking":{"type":"enabled","budget_tokens":1024},"tool_choice":{"type":"none"}}`,
		`{"tools":[{"name":"ToolSearch","input_schema":{"type":"object"}},{"name":"g","defer_loading":true}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"s","name":"ToolSearch","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"s","content":[{"type":"tool_reference","tool_name":"g"}]}]},{"role":"system","content":[{"type":"tool_removal","tool":{"type":"tool_reference","name":"g"}},{"type":"tool_addition","tool":{"type":"tool_definition","definition":{"name":"h"}}}]},{"role":"user","content":"go"}]}`,
		`{"messages":[{"role":"assistant","content":null}]}`, `{"system":7}`, `[]`, `null`, ``,
	}
	fuzzRoute(f, "/v1/messages", seeds, "an Anthropic error", func(body string) bool {
		return strings.HasPrefix(body, `{"type":"error","error":{"type":`)
	})
}
