package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"petal/engine/grammar"
)

// chat posts a non-streamed chat completion and returns its reply in
// go-openai's type.
func (s *demoServer) chat(t *testing.T, body string) openai.ChatCompletionResponse {
	t.Helper()
	resp, err := http.Post(s.base+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var reply openai.ChatCompletionResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &reply) != nil || len(reply.Choices) != 1 {
		t.Fatalf("%s: status %d: %s", body, resp.StatusCode, b)
	}
	return reply
}

// Through petal serve: a greedy json_schema reply on the sim keeps its
// logits on the device (the grammar's mask goes to the GPU sampler; the
// sampled path is TestDecodeConstrained's) and is the CPU backend's reply,
// the start of a value of the schema (the demo model opens with
// whitespace, so ten tokens reach {"nam).
func TestServeStructuredOnDevice(t *testing.T) {
	skipDemoOnSim(t)
	const schema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`
	body := `{"max_tokens":10,"temperature":0,"messages":[{"role":"user","content":"Ann is 30."}],` +
		`"chat_template_kwargs":{"enable_thinking":false},` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":` + schema + `}}}`
	g, err := grammar.Compile([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	want := startDemoServe(t, "cpu").chat(t, body).Choices[0].Message.Content
	sim := startDemoServe(t, "sim")
	const readback = "petal_logits_readback_bytes_total"
	before := sim.metric(t, readback)
	got := sim.chat(t, body).Choices[0].Message.Content
	if got != want || !strings.HasPrefix(got, "{") || g.Matcher(nil).Advance([]byte(got), false) != nil {
		t.Errorf("the sim replied %q, the CPU %q; want the same start of a value of the schema", got, want)
	}
	if after := sim.metric(t, readback); after != before {
		t.Errorf("a json_schema request read %v bytes of logits back", after-before)
	}
}
