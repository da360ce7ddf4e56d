package api

import (
	"strings"
	"testing"

	"petal/internal/service"
)

// schemaEntries are every structured-output entry, as a request body for a
// schema.
var schemaEntries = []struct {
	name, path string
	body       func(schema string) string
}{
	{"chat response_format", "/v1/chat/completions", func(s string) string {
		return `{"max_tokens":20,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + s + `}},"messages":[{"role":"user","content":"x"}]}`
	}},
	{"responses text.format", "/v1/responses", func(s string) string {
		return `{"max_output_tokens":20,"text":{"format":{"type":"json_schema","name":"x","schema":` + s + `}},"input":"x"}`
	}},
	{"ollama chat format", "/api/chat", func(s string) string {
		return `{"stream":false,"options":{"num_predict":20},"format":` + s + `,"messages":[{"role":"user","content":"x"}]}`
	}},
	{"ollama generate format", "/api/generate", func(s string) string {
		return `{"stream":false,"options":{"num_predict":20},"format":` + s + `,"prompt":"x"}`
	}},
	{"anthropic output_format", "/v1/messages", func(s string) string {
		return `{"max_tokens":20,"output_format":{"type":"json_schema","schema":` + s + `},"messages":[{"role":"user","content":"x"}]}`
	}},
	{"anthropic output_config.format", "/v1/messages", func(s string) string {
		return `{"max_tokens":20,"output_config":{"format":{"type":"json_schema","schema":` + s + `}},"messages":[{"role":"user","content":"x"}]}`
	}},
}

// TestHostileSchemasAre400: issue 28's schemas, through every entry, are a
// 400 invalid_request_error naming where the schema fails, before any
// generation: a reference back to itself (the server died of a stack
// overflow) and a schema no value obeys (a 500, "every logit is -Inf").
func TestHostileSchemasAre400(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for _, c := range []struct{ schema, says string }{
		{`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, `at \"#/anyOf/0/$ref\"`},
		{`{"$defs":{"n":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/n"}]}},"$ref":"#/$defs/n"}`, `comes back to itself`},
		{`{"oneOf":[{"allOf":[{"$ref":"#"}]},{"type":"integer"}]}`, `at \"#/oneOf/0/allOf/0/$ref\"`},
		{`{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1}`, `no integer`},
		{`{"type":"integer","minimum":0.5,"maximum":0.6}`, `no integer`},
		{`{"type":"integer","minimum":1e308,"maximum":1e308}`, `no integer`},
		{`{"type":"object","properties":{"a":{"type":"string","enum":[1]}},"required":["a"]}`, `at \"#/properties/a/enum/0\"`},
		// 64 required objects in one another: no value fits a reply.
		{strings.Repeat(`{"type":"object","required":["x"],"properties":{"x":`, 64) + `{}` + strings.Repeat(`}}`, 64), `nests deeper`},
	} {
		for _, e := range schemaEntries {
			resp, body := do(t, post(t, ts.URL+e.path, e.body(c.schema)))
			// Ollama's errors are {"error": message}, without a type.
			typed := strings.HasPrefix(e.path, "/api/") || strings.Contains(body, "invalid_request_error")
			if resp.StatusCode != 400 || !typed || !strings.Contains(body, c.says) {
				t.Errorf("%s, %s: %d %s", e.name, c.schema, resp.StatusCode, body)
			}
		}
	}
}

// TestGrammarLimitEndsReply: a schema whose readings cannot be merged
// (alternatives that differ only in maxItems, nested through items) ends
// the reply with a 400 once they pass grammar.MaxStates, rather than
// taking the engine; the chat and the Ollama routes say so alike. On a
// loaded machine the mask's time limit can trip first, which ends the
// reply the same way; engine/grammar's TestStatesBounded holds MaxStates
// itself without a clock.
func TestGrammarLimitEndsReply(t *testing.T) {
	alts := make([]string, 2)
	for i := range alts {
		alts[i] = `{"type":"array","items":{"$ref":"#/$defs/a"},"maxItems":` + string(rune('5'+i)) + `}`
	}
	schema := `{"$defs":{"a":{"anyOf":[` + strings.Join(alts, ",") + `]}},"$ref":"#/$defs/a"}`
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\n"+strings.Repeat("[", 60)))
	for _, e := range schemaEntries[:3] {
		resp, body := do(t, post(t, ts.URL+e.path, strings.Replace(e.body(schema), "20", "200", 1)))
		if resp.StatusCode != 400 || !(strings.Contains(body, "too many readings") || strings.Contains(body, "takes too long")) {
			t.Errorf("%s: %d %s", e.name, resp.StatusCode, body)
		}
	}
}
