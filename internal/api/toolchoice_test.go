package api

import (
	"encoding/json"
	"strings"
	"testing"

	"petal/engine/grammar"
	"petal/internal/service"
)

const (
	weatherParams = `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}`
	pingParams    = `{"type":"object","properties":{"host":{"type":"string"}},"required":["host"]}`
	// weatherCall and pingCall are calls in the template's form.
	weatherCall = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	pingCall    = "<tool_call>\n<function=ping>\n<parameter=host>\nexample.org\n</parameter>\n</function>\n</tool_call>"
)

// callingModel is a scripted model that answers in prose, or with
// weatherCall when call is set; held to a grammar, it goes on with
// whichever call its reply so far begins, as a model does once a call has
// started.
func callingModel(t *testing.T, call *bool) *testServer {
	return newTestServer(t, service.Options{}, Options{}, func(p string) string {
		gen := p[strings.LastIndex(p, "<|im_start|>assistant\n"):]
		_, after, thought := strings.Cut(gen, "</think>")
		after = strings.TrimLeft(after, "\n")
		for _, c := range []string{weatherCall, pingCall} {
			if thought && after != "" && strings.HasPrefix(c, after) {
				return c[len(after):]
			}
		}
		switch {
		case thought && after != "":
			return "" // its own words, which the grammar let through: it stops
		case *call:
			return "</think>\n\n" + weatherCall
		}
		return "</think>\n\nThe weather in Paris is sunny."
	})
}

// argsObey reports whether args, a JSON object, obey schema.
func argsObey(t *testing.T, schema, args string) bool {
	t.Helper()
	g, err := grammar.Compile([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	m := g.Matcher(nil)
	return m.Advance([]byte(args), false) == nil && m.Done()
}

type forcedCase struct {
	name, choice string
	prose        bool   // the model would answer in prose
	want         string // the tool the call must be of; "" any of the two
}

var forcedCases = []forcedCase{
	{"required over prose", "required", true, ""},
	{"named over prose", "ping", true, "ping"},
	{"named over a call of another tool", "ping", false, "ping"},
	{"named as the model would", "get_weather", false, "get_weather"},
}

// TestToolChoiceChat: tool_choice "required" and a named function force a
// call of an offered tool (of the named one) whose arguments obey its
// schema, finish "tool_calls", where the model would write prose or call
// another tool (issue 30 item 3: all were taken as auto).
func TestToolChoiceChat(t *testing.T) {
	var call bool
	ts := callingModel(t, &call)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + weatherParams + `}},{"type":"function","function":{"name":"ping","parameters":` + pingParams + `}}]`
	schemas := map[string]string{"get_weather": weatherParams, "ping": pingParams}
	for _, c := range forcedCases {
		call = !c.prose
		choice := `"required"`
		if c.choice != "required" {
			choice = `{"type":"function","function":{"name":"` + c.choice + `"}}`
		}
		resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":200,"seed":1,"tool_choice":`+choice+`,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		var v struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					Content   string
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		ch := v.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
			t.Errorf("%s: finish %q, %d calls: %s", c.name, ch.FinishReason, len(ch.Message.ToolCalls), body)
			continue
		}
		f := ch.Message.ToolCalls[0].Function
		if schemas[f.Name] == "" || c.want != "" && f.Name != c.want {
			t.Errorf("%s: a call of %q", c.name, f.Name)
			continue
		}
		if !argsObey(t, schemas[f.Name], f.Arguments) {
			t.Errorf("%s: arguments %s break %s's schema", c.name, f.Arguments, f.Name)
		}
	}

	// Streamed, the forced call comes as tool_calls deltas.
	call = false
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"stream":true,"max_tokens":200,"tool_choice":{"type":"function","function":{"name":"ping"}},`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`))
	data, _ := sseEvents(t, body)
	var args, finish string
	for _, d := range data {
		var ev struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
				Delta        struct {
					Content   string
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		if d == "[DONE]" || json.Unmarshal([]byte(d), &ev) != nil || len(ev.Choices) == 0 {
			continue
		}
		for _, c := range ev.Choices[0].Delta.ToolCalls {
			args += c.Function.Arguments
		}
		if f := ev.Choices[0].FinishReason; f != nil {
			finish = *f
		}
		if ev.Choices[0].Delta.Content != "" {
			t.Errorf("stream: content %q beside the forced call", ev.Choices[0].Delta.Content)
		}
	}
	if resp.StatusCode != 200 || finish != "tool_calls" || !argsObey(t, pingParams, args) {
		t.Errorf("stream: %d, finish %q, arguments %q", resp.StatusCode, finish, args)
	}

	// "none": the call the model writes is text, and the reply stops.
	call = true
	for _, choice := range []string{`"tool_choice":"none"`, `"function_call":"none"`} {
		resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":200,`+choice+`,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`))
		if resp.StatusCode != 200 || strings.Contains(body, `"tool_calls"`) || !strings.Contains(body, `"finish_reason":"stop"`) || !strings.Contains(body, "get_weather") {
			t.Errorf("%s: %d %s", choice, resp.StatusCode, body)
		}
	}

	// What cannot be forced is a 400 naming tool_choice.
	for _, bad := range []string{
		`"tool_choice":{"type":"function","function":{"name":"nope"}},` + tools,
		`"tool_choice":"required"`,
		`"tool_choice":"always",` + tools,
		`"tool_choice":{"type":"function","function":{}},` + tools,
		`"tool_choice":"required","response_format":{"type":"json_object"},` + tools,
	} {
		resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":20,`+bad+`,"messages":[{"role":"user","content":"hi"}]}`))
		if resp.StatusCode != 400 || !strings.Contains(body, "tool_choice") {
			t.Errorf("%s: %d %s", bad, resp.StatusCode, body)
		}
	}
}

// TestToolChoiceMessages: Anthropic's {"type":"any"} and {"type":"tool"}
// force a tool_use block, stop_reason "tool_use"; {"type":"none"} leaves a
// call the model writes as text.
func TestToolChoiceMessages(t *testing.T) {
	var call bool
	ts := callingModel(t, &call)
	tools := `"tools":[{"name":"get_weather","input_schema":` + weatherParams + `},{"name":"ping","input_schema":` + pingParams + `}]`
	schemas := map[string]string{"get_weather": weatherParams, "ping": pingParams}
	for _, c := range forcedCases {
		call = !c.prose
		choice := `{"type":"any"}`
		if c.choice != "required" {
			choice = `{"type":"tool","name":"` + c.choice + `"}`
		}
		resp, body := do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":200,"tool_choice":`+choice+`,`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		var v struct {
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Type, Name string
				Input      json.RawMessage
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		var uses []int
		for i, b := range v.Content {
			if b.Type == "tool_use" {
				uses = append(uses, i)
			}
		}
		if v.StopReason != "tool_use" || len(uses) != 1 {
			t.Errorf("%s: stop_reason %q, %d tool_use blocks: %s", c.name, v.StopReason, len(uses), body)
			continue
		}
		b := v.Content[uses[0]]
		if schemas[b.Name] == "" || c.want != "" && b.Name != c.want || !argsObey(t, schemas[b.Name], string(b.Input)) {
			t.Errorf("%s: a call of %q with %s", c.name, b.Name, b.Input)
		}
	}
	call = true
	resp, body := do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":200,"tool_choice":{"type":"none"},`+tools+`,"messages":[{"role":"user","content":"Weather in Paris?"}]}`))
	if resp.StatusCode != 200 || strings.Contains(body, `"tool_use"`) || !strings.Contains(body, `"end_turn"`) {
		t.Errorf("none: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, post(t, ts.URL+"/v1/messages", `{"max_tokens":20,"tool_choice":{"type":"tool"},`+tools+`,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode != 400 || !strings.Contains(body, "tool_choice") {
		t.Errorf("a tool choice without a name: %d %s", resp.StatusCode, body)
	}
}

// TestToolChoiceResponses: the Responses API's "required" and
// {"type":"function","name":...} force a function_call item.
func TestToolChoiceResponses(t *testing.T) {
	var call bool
	ts := callingModel(t, &call)
	tools := `"tools":[{"type":"function","name":"get_weather","parameters":` + weatherParams + `},{"type":"function","name":"ping","parameters":` + pingParams + `}]`
	schemas := map[string]string{"get_weather": weatherParams, "ping": pingParams}
	for _, c := range forcedCases {
		call = !c.prose
		choice := `"required"`
		if c.choice != "required" {
			choice = `{"type":"function","name":"` + c.choice + `"}`
		}
		resp, body := do(t, post(t, ts.URL+"/v1/responses", `{"max_output_tokens":200,"tool_choice":`+choice+`,`+tools+`,"input":"Weather in Paris?"}`))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		var v struct {
			Output []struct{ Type, Name, Arguments string }
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		var calls []int
		for i, o := range v.Output {
			if o.Type == "function_call" {
				calls = append(calls, i)
			}
		}
		if len(calls) != 1 {
			t.Errorf("%s: %d function calls: %s", c.name, len(calls), body)
			continue
		}
		o := v.Output[calls[0]]
		if schemas[o.Name] == "" || c.want != "" && o.Name != c.want || !argsObey(t, schemas[o.Name], o.Arguments) {
			t.Errorf("%s: a call of %q with %s", c.name, o.Name, o.Arguments)
		}
	}
}
