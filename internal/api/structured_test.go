package api

import (
	"encoding/json"
	"strings"
	"testing"

	"petal/engine/grammar"
	"petal/internal/service"
)

const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name","age"],"additionalProperties":false}`

// TestStructuredOutputs: response_format, text.format, Ollama's format and
// Anthropic's output_format reach the decode loop (issue 16: accepted and
// answered in prose). A model whose reply obeys the schema is not changed;
// one that writes prose is held to the schema token by token.
func TestStructuredOutputs(t *testing.T) {
	var prose bool
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string {
		if prose {
			return "</think>\n\nSure! Ann is 30 years old."
		}
		return "Let me think.</think>\n\n{\"name\":\"Ann\",\"age\":30}"
	})
	g, err := grammar.Compile([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	user := `"messages":[{"role":"user","content":"Ann, 30"}]`
	for _, c := range []struct{ name, path, body string }{
		{"chat json_schema", "/v1/chat/completions", `{"max_tokens":60,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":` + personSchema + `}},` + user + `}`},
		{"chat json_object", "/v1/chat/completions", `{"max_tokens":60,"response_format":{"type":"json_object"},` + user + `}`},
		{"responses", "/v1/responses", `{"max_output_tokens":60,"text":{"format":{"type":"json_schema","name":"p","schema":` + personSchema + `}},"input":"Ann, 30"}`},
		{"ollama chat", "/api/chat", `{"stream":false,"options":{"num_predict":60},"format":` + personSchema + `,` + user + `}`},
		{"ollama generate", "/api/generate", `{"stream":false,"options":{"num_predict":60},"format":"json","prompt":"Ann, 30"}`},
		{"anthropic", "/v1/messages", `{"max_tokens":60,"output_format":{"type":"json_schema","schema":` + personSchema + `},` + user + `}`},
	} {
		for _, p := range []bool{false, true} {
			prose = p
			resp, body := do(t, post(t, ts.URL+c.path, c.body))
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
			}
			text := replyText(t, c.path, body)
			if !p {
				if text != `{"name":"Ann","age":30}` {
					t.Errorf("%s: a reply that obeys was changed to %q", c.name, text)
				}
				continue
			}
			// The prose is gone; what came is JSON of the schema so far.
			m := g.Matcher(nil)
			if strings.Contains(c.name, "json_object") || c.path == "/api/generate" {
				m = grammar.JSONObject().Matcher(nil)
			}
			if text == "" || text[0] != '{' || m.Advance([]byte(text), false) != nil {
				t.Errorf("%s: prose under the grammar gave %q", c.name, text)
			}
		}
	}
}

// replyText digs the content out of each API's answer.
func replyText(t *testing.T, path, body string) string {
	t.Helper()
	var v struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Output []struct {
			Type    string
			Content []struct{ Text string }
		}
		Message  struct{ Content string }
		Response string
		Content  []struct{ Type, Text string }
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	switch path {
	case "/v1/chat/completions":
		return v.Choices[0].Message.Content
	case "/v1/responses":
		for _, o := range v.Output {
			if o.Type == "message" {
				return o.Content[0].Text
			}
		}
	case "/api/chat":
		return v.Message.Content
	case "/api/generate":
		return v.Response
	case "/v1/messages":
		for _, c := range v.Content {
			if c.Type == "text" {
				return c.Text
			}
		}
	}
	return ""
}

// TestStructuredOutputErrors: a schema that cannot be enforced is a 400
// naming the keyword, on each API.
func TestStructuredOutputErrors(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	pattern := `{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+$"}}}`
	user := `"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + pattern + `}},` + user + `}`},
		{"/v1/responses", `{"text":{"format":{"type":"json_schema","name":"x","schema":` + pattern + `}},"input":"x"}`},
		{"/api/chat", `{"format":` + pattern + `,` + user + `}`},
		{"/v1/messages", `{"max_tokens":5,"output_format":{"type":"json_schema","schema":` + pattern + `},` + user + `}`},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		if resp.StatusCode != 400 || !strings.Contains(body, `keyword \"pattern\"`) {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"response_format":{"type":"yaml"},`+user+`}`)); resp.StatusCode != 400 {
		t.Errorf("unknown type: %d %s", resp.StatusCode, body)
	}
}
