package api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"log"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"petal/internal/service"
)

// TestEmbeddings: /v1/embeddings was a 404 and /api/embed a 501 (issue 30
// item 6). On the tiny-a fixture on the CPU backend, each input's vector
// is unit length, the same for the same text however it is sent (a text,
// in a list, as token ids, in base64, through Ollama's two routes), and
// different for a different text.
func TestEmbeddings(t *testing.T) {
	svc := fixtureService(t, "cpu", "tiny-a", service.Options{Name: "tiny-a", ContextLength: 16})
	lines := make(lineWriter, 64)
	srv := httptest.NewServer(New(svc, Options{Logger: log.New(lines, "", 0)}))
	defer srv.Close()
	hidden := svc.EmbeddingSize()

	openAI := func(body string) embeddingList {
		t.Helper()
		resp, text := do(t, post(t, srv.URL+"/v1/embeddings", body))
		var l embeddingList
		if resp.StatusCode != 200 || json.Unmarshal([]byte(text), &l) != nil {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, text)
		}
		return l
	}
	vector := func(v any) []float32 {
		t.Helper()
		var out []float32
		switch v := v.(type) {
		case string:
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil || len(b)%4 != 0 {
				t.Fatalf("base64 %q: %v", v, err)
			}
			for i := 0; i < len(b); i += 4 {
				out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
			}
		case []any:
			for _, x := range v {
				out = append(out, float32(x.(float64)))
			}
		}
		return out
	}
	same := func(a, b []float32) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-6 {
				return false
			}
		}
		return true
	}

	one := openAI(`{"model":"text-embedding-3-small","input":"hello"}`)
	hello := vector(one.Data[0].Embedding)
	var norm float64
	for _, x := range hello {
		norm += float64(x) * float64(x)
	}
	if len(one.Data) != 1 || len(hello) != hidden || math.Abs(norm-1) > 1e-5 || one.Usage.PromptTokens != 5 || one.Object != "list" || one.Data[0].Object != "embedding" {
		t.Errorf("one input: %d vectors of %d floats, norm² %v, usage %+v", len(one.Data), len(hello), norm, one.Usage)
	}
	// The access log counts an embedding's tokens as its prompt.
	if line := lines.next(t); !strings.Contains(line, `"POST /v1/embeddings" 200 prompt=5 cached=0 disk=0 completion=0 `) {
		t.Errorf("access log %q", line)
	}
	two := openAI(`{"input":["hello","world"]}`)
	if len(two.Data) != 2 || two.Data[1].Index != 1 || !same(vector(two.Data[0].Embedding), hello) || same(vector(two.Data[1].Embedding), hello) || two.Usage.TotalTokens != 10 {
		t.Errorf("two inputs: %+v", two.Usage)
	}
	for _, body := range []string{`{"input":[104,101,108,108,111]}`, `{"input":[[104,101,108,108,111]]}`, `{"input":"hello","encoding_format":"base64","dimensions":` + strconv.Itoa(hidden) + `}`} {
		if got := vector(openAI(body).Data[0].Embedding); !same(got, hello) {
			t.Errorf("%s: not the vector of \"hello\"", body)
		}
	}

	resp, text := do(t, post(t, srv.URL+"/api/embed", `{"model":"x","input":["hello"]}`))
	var embed struct {
		Embeddings      [][]float32 `json:"embeddings"`
		PromptEvalCount int         `json:"prompt_eval_count"`
	}
	if json.Unmarshal([]byte(text), &embed); resp.StatusCode != 200 || len(embed.Embeddings) != 1 || !same(embed.Embeddings[0], hello) || embed.PromptEvalCount != 5 {
		t.Errorf("/api/embed: %d %.300s", resp.StatusCode, text)
	}
	for body, n := range map[string]int{`{"prompt":"hello"}`: hidden, `{"prompt":""}`: 0} {
		resp, text := do(t, post(t, srv.URL+"/api/embeddings", body))
		var legacy struct{ Embedding []float32 }
		if json.Unmarshal([]byte(text), &legacy); resp.StatusCode != 200 || len(legacy.Embedding) != n || n > 0 && !same(legacy.Embedding, hello) {
			t.Errorf("/api/embeddings %s: %d %.300s", body, resp.StatusCode, text)
		}
	}
	// Ollama cuts an input past the context (16 tokens here) unless
	// truncate is false; OpenAI's route refuses it.
	long := strings.Repeat("a", 40)
	if resp, text := do(t, post(t, srv.URL+"/api/embed", `{"input":"`+long+`"}`)); resp.StatusCode != 200 || !strings.Contains(text, `"prompt_eval_count":16`) {
		t.Errorf("truncated: %d %.300s", resp.StatusCode, text)
	}
	// In the words of an input, not of a conversation's messages.
	overflowWords := "maximum context length is 16 tokens. However, an input resulted in 40 tokens. Please reduce the length of each input"
	for path, body := range map[string]string{
		"/api/embed":     `{"input":"` + long + `","truncate":false}`,
		"/v1/embeddings": `{"input":"` + long + `"}`,
	} {
		resp, text := do(t, post(t, srv.URL+path, body))
		var e struct{ Error apiError }
		msg := ""
		if path == "/api/embed" {
			msg = ollamaError(t, text)
		} else if json.Unmarshal([]byte(text), &e); e.Error.Param == "input" {
			msg = e.Error.Message
		}
		if resp.StatusCode != 400 || !strings.Contains(msg, overflowWords) {
			t.Errorf("%s past the context: %d %s, want %q", path, resp.StatusCode, text, overflowWords)
		}
	}
	for body, words := range map[string]string{
		`{"input":[]}`:                                        "input is empty",
		`{"input":[""]}`:                                      "input 0 is empty",
		`{"input":[1,99999]}`:                                 "input 0 holds 99999, which is no token of this model",
		`{"input":{"text":"x"}}`:                              "input must be a string",
		`{"input":"x","encoding_format":"int8"}`:              "encoding_format must be float or base64",
		`{"input":"x","dimensions":3}`:                        "embeddings have " + strconv.Itoa(hidden) + " dimensions, not 3",
		`{"input":[` + strings.Repeat(`"a",`, 2048) + `"a"]}`: "input holds 2049 items, at most 2048",
	} {
		resp, text := do(t, post(t, srv.URL+"/v1/embeddings", body))
		var e struct{ Error apiError }
		if json.Unmarshal([]byte(text), &e); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, words) {
			t.Errorf("%.60s: %d %s, want a 400 saying %q", body, resp.StatusCode, text, words)
		}
	}
}

// TestEmbeddingsNeedHiddenStates: a model whose sequences report no hidden
// states (a GPU backend's; the scripted one here) says so on each route.
func TestEmbeddingsNeedHiddenStates(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for path, body := range map[string]string{"/v1/embeddings": `{"input":"hi"}`, "/api/embed": `{"input":"hi"}`, "/api/embeddings": `{"prompt":"hi"}`} {
		if resp, text := do(t, post(t, ts.URL+path, body)); resp.StatusCode != 400 || !strings.Contains(text, "embeddings need the cpu backend") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, text)
		}
	}
}
