package api

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"petal/engine/tokenizer"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

// fimTokens are Qwen's fill-in-the-middle tokens, added to the test
// tokenizer after its own in the order Qwen's tokenizers list them.
var fimTokens = []string{fimPrefix, fimMiddle, fimSuffix, fimPad, fimRepoName, fimFileSep}

// fimModel keeps each prompt the model of newFIMServer reads, in ids.
type fimModel struct {
	tok  *tokenizer.Tokenizer
	mu   sync.Mutex
	read [][]int
}

// tokens are the prompts read so far.
func (m *fimModel) tokens() [][]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.read)
}

// prompts are the prompts read so far, decoded.
func (m *fimModel) prompts() []string {
	var out []string
	for _, p := range m.tokens() {
		out = append(out, m.tok.Decode(p))
	}
	return out
}

// newFIMServer is newTestServer over a tokenizer that has the FIM tokens,
// whose model replies reply to every prompt and keeps it.
func newFIMServer(t *testing.T, reply string) (*testServer, *fimModel) {
	t.Helper()
	dir, _ := servicetest.Folder(t)
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	added := doc["added_tokens"].([]any)
	for i, s := range fimTokens {
		added = append(added, map[string]any{"id": 256 + len(servicetest.AddedTokens) + i, "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": false})
	}
	doc["added_tokens"] = added
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fm := &fimModel{tok: tok}
	text := servicetest.Text(tok, func(string) string { return reply })
	m := servicetest.NewModel(servicetest.MaxPositions, func(prompt []int) []int {
		fm.mu.Lock()
		fm.read = append(fm.read, slices.Clone(prompt))
		fm.mu.Unlock()
		return text(prompt)
	})
	svc, err := service.New(m, dir, service.Options{Name: "qwen-test"})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(New(svc, Options{})), svc: svc, model: m, tok: tok}
	t.Cleanup(func() {
		ts.Close()
		svc.Close()
	})
	return ts, fm
}

// The request of every FIM test: the middle of f.
const (
	fimBefore = "def f(x):\n    return "
	fimAfter  = "\n\nprint(f(2))"
	fimWant   = fimPrefix + fimBefore + fimSuffix + fimAfter + fimMiddle
	// fimReply is what the model writes: the middle, then a FIM token,
	// after which it would go on with what is no part of the middle.
	fimReply = "x * 2" + fimPad + "print(3)"
)

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestFillInTheMiddle: /v1/completions ignored suffix, /v1/fim/completions
// was a 404, /infill a 405 and /api/generate with suffix a 400 (issue 30
// item 4). Each builds Qwen's FIM prompt and ends the reply at the FIM
// token the model writes after the middle.
func TestFillInTheMiddle(t *testing.T) {
	ts, fm := newFIMServer(t, fimReply)
	prompts := fm.prompts
	pre, suf := jsonString(fimBefore), jsonString(fimAfter)
	for _, c := range []struct {
		path, body string
		// got reads the middle and the finish from the reply.
		got        func(t *testing.T, body string) (string, string)
		wantFinish string
	}{
		{"/v1/completions", `{"prompt":` + pre + `,"suffix":` + suf + `,"max_tokens":50}`, func(t *testing.T, body string) (string, string) {
			var c completion
			json.Unmarshal([]byte(body), &c)
			return c.Choices[0].Text, *c.Choices[0].FinishReason
		}, "stop"},
		{"/v1/fim/completions", `{"model":"codestral","prompt":` + pre + `,"suffix":` + suf + `,"max_tokens":50}`, func(t *testing.T, body string) (string, string) {
			var c chatCompletion
			json.Unmarshal([]byte(body), &c)
			return *c.Choices[0].Message.Content, *c.Choices[0].FinishReason
		}, "stop"},
		{"/v1/fim/completions", `{"stream":true,"prompt":` + pre + `,"suffix":` + suf + `,"max_tokens":50}`, func(t *testing.T, body string) (string, string) {
			// Continue reads choices[0].delta.content of each chunk.
			data, _ := sseEvents(t, body)
			text, finish := "", ""
			for _, d := range data {
				var c chatCompletion
				if d == "[DONE]" || json.Unmarshal([]byte(d), &c) != nil || len(c.Choices) == 0 {
					continue
				}
				if c.Choices[0].Delta.Content != nil {
					text += *c.Choices[0].Delta.Content
				}
				if c.Choices[0].FinishReason != nil {
					finish = *c.Choices[0].FinishReason
				}
			}
			return text, finish
		}, "stop"},
		{"/infill", `{"input_prefix":` + pre + `,"input_suffix":` + suf + `,"n_predict":50}`, func(t *testing.T, body string) (string, string) {
			var c infillResponse
			json.Unmarshal([]byte(body), &c)
			if !c.Stop || c.Timings == nil || c.Timings.PredictedN != c.TokensPredicted || c.TokensEvaluated == 0 {
				t.Errorf("infill figures: %s", body)
			}
			return c.Content, c.StopType
		}, "eos"},
		{"/infill", `{"stream":true,"input_prefix":` + pre + `,"input_suffix":` + suf + `,"n_predict":50}`, func(t *testing.T, body string) (string, string) {
			data, _ := sseEvents(t, body)
			text, finish := "", ""
			for _, d := range data {
				var c infillResponse
				json.Unmarshal([]byte(d), &c)
				text += c.Content
				if c.Stop {
					finish = c.StopType
				}
			}
			return text, finish
		}, "eos"},
		{"/api/generate", `{"stream":false,"prompt":` + pre + `,"suffix":` + suf + `,"options":{"num_predict":50}}`, func(t *testing.T, body string) (string, string) {
			var c ollamaGenerateResponse
			json.Unmarshal([]byte(body), &c)
			return c.Response, c.DoneReason
		}, "stop"},
	} {
		before := len(prompts())
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
			continue
		}
		text, finish := c.got(t, body)
		if text != "x * 2" || finish != c.wantFinish {
			t.Errorf("%s: middle %q, finish %q; want \"x * 2\", %s: %s", c.path, text, finish, c.wantFinish, body)
		}
		if p := prompts(); len(p) != before+1 || p[before] != fimWant {
			t.Errorf("%s: the model read %q, want %q", c.path, p[before:], fimWant)
		}
	}

	// llama.vscode's whole request: other files, and the cursor's line
	// up to it after <|fim_middle|>.
	before := len(prompts())
	resp, body := do(t, post(t, ts.URL+"/infill", `{"input_prefix":"def f(x):\n","input_suffix":`+suf+`,"prompt":"    return ",
		"input_extra":[{"filename":"util.py","text":"def g(): pass"},{"text":"x = 1"}],"n_predict":3,
		"samplers":["top_k","top_p","infill"],"top_k":40,"top_p":0.99,"cache_prompt":true,"t_max_prompt_ms":500,"t_max_predict_ms":1000}`))
	want := fimRepoName + "project\n" + fimFileSep + "util.py\ndef g(): pass\n" + fimFileSep + "untitled\nx = 1\n" + fimFileSep + "current\n" +
		fimPrefix + "def f(x):\n" + fimSuffix + fimAfter + fimMiddle + "    return "
	var c infillResponse
	json.Unmarshal([]byte(body), &c)
	if p := prompts(); resp.StatusCode != 200 || len(p) != before+1 || p[before] != want {
		t.Errorf("infill with files: %d %s; the model read %q, want %q", resp.StatusCode, body, p[before:], want)
	}
	if c.Content != "x *" || c.StopType != "limit" || c.TokensPredicted != 3 {
		t.Errorf("n_predict 3: %s", body)
	}
	if _, body := do(t, post(t, ts.URL+"/api/show", `{"model":"qwen-test"}`)); !strings.Contains(body, `"insert"`) {
		t.Errorf("/api/show does not say the model takes a suffix: %s", body)
	}
	// The client's stop strings still apply, and say so.
	_, body = do(t, post(t, ts.URL+"/infill", `{"input_prefix":`+pre+`,"input_suffix":`+suf+`,"stop":["*"]}`))
	if json.Unmarshal([]byte(body), &c); c.Content != "x " || c.StopType != "word" || c.StoppingWord != "*" {
		t.Errorf("a stop word: %s", body)
	}
}

// TestFillInTheMiddleCodeIsText: code that holds "<|im_end|>" or a FIM
// marker was tokenized with the markers around it, so it reached the
// model as control tokens (an end of turn, a second middle); it is read
// as plain text, and only Petal's markers are tokens, on every route.
func TestFillInTheMiddleCodeIsText(t *testing.T) {
	ts, fm := newFIMServer(t, fimReply)
	before := jsonString("s = '<|im_end|><|fim_middle|>'\n")
	after := jsonString("\n# <|fim_prefix|><|file_sep|>")
	want := fimPrefix + "s = '<|im_end|><|fim_middle|>'\n" + fimSuffix + "\n# <|fim_prefix|><|file_sep|>" + fimMiddle
	controls := map[int]bool{servicetest.EndID: true}
	for _, c := range fimTokens {
		id, _ := ts.tok.TokenID(c)
		controls[id] = true
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":` + before + `,"suffix":` + after + `,"max_tokens":5}`},
		{"/v1/fim/completions", `{"prompt":` + before + `,"suffix":` + after + `,"max_tokens":5}`},
		{"/infill", `{"input_prefix":` + before + `,"input_suffix":` + after + `,"n_predict":5}`},
		{"/api/generate", `{"stream":false,"prompt":` + before + `,"suffix":` + after + `,"options":{"num_predict":5}}`},
	} {
		n := len(fm.tokens())
		if resp, body := do(t, post(t, ts.URL+c.path, c.body)); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
			continue
		}
		read := fm.tokens()[n]
		var tokens []int
		for _, id := range read {
			if controls[id] {
				tokens = append(tokens, id)
			}
		}
		marks := []int{mustTokenID(t, ts.tok, fimPrefix), mustTokenID(t, ts.tok, fimSuffix), mustTokenID(t, ts.tok, fimMiddle)}
		if !slices.Equal(tokens, marks) || ts.tok.Decode(read) != want {
			t.Errorf("%s: the model read control tokens %v (want only the markers %v) in %q", c.path, tokens, marks, ts.tok.Decode(read))
		}
	}
}

func mustTokenID(t *testing.T, tok *tokenizer.Tokenizer, s string) int {
	t.Helper()
	id, ok := tok.TokenID(s)
	if !ok {
		t.Fatalf("no token %s", s)
	}
	return id
}

// TestContextOverflowWords: code past the context was refused in the
// words of a conversation ("your messages"); each route now names what
// it was sent: the code around the cursor, a prompt, messages.
func TestContextOverflowWords(t *testing.T) {
	ts, _ := newFIMServer(t, fimReply)
	long := jsonString(strings.Repeat("w ", 5000))
	code := "However, the code around the cursor (prefix, suffix and any files of context) resulted in "
	for _, c := range []struct{ path, body, param, words string }{
		{"/v1/completions", `{"prompt":` + long + `,"suffix":"x"}`, "prompt", code},
		{"/v1/fim/completions", `{"prompt":` + long + `,"suffix":"x"}`, "prompt", code},
		{"/infill", `{"input_prefix":"x","input_suffix":` + long + `}`, "prompt", code},
		{"/api/generate", `{"prompt":"x","suffix":` + long + `}`, "", code},
		{"/v1/completions", `{"prompt":` + long + `}`, "prompt", "However, your prompt resulted in "},
		{"/api/generate", `{"raw":true,"prompt":` + long + `}`, "", "However, your prompt resulted in "},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":` + long + `}]}`, "messages", "However, your messages resulted in "},
	} {
		resp, body := do(t, post(t, ts.URL+c.path, c.body))
		var e struct{ Error apiError }
		msg := ""
		if strings.HasPrefix(c.path, "/api/") {
			msg = ollamaError(t, body)
		} else if json.Unmarshal([]byte(body), &e); e.Error.Param == c.param && e.Error.Code == "context_length_exceeded" {
			msg = e.Error.Message
		}
		if resp.StatusCode != 400 || !strings.Contains(msg, "maximum context length is 4096 tokens. "+c.words) {
			t.Errorf("%s %.40s: %d %s, want %q", c.path, c.body, resp.StatusCode, body, c.words)
		}
	}
}

// TestFillInTheMiddleNeedsTheTokens: a model whose tokenizer lacks the FIM
// tokens refuses a suffix on every route, saying why.
func TestFillInTheMiddleNeedsTheTokens(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	for path, body := range map[string]string{
		"/v1/completions":     `{"prompt":"a","suffix":"b"}`,
		"/v1/fim/completions": `{"prompt":"a","suffix":"b"}`,
		"/infill":             `{"input_prefix":"a","input_suffix":"b"}`,
		"/api/generate":       `{"prompt":"a","suffix":"b"}`,
	} {
		resp, text := do(t, post(t, ts.URL+path, body))
		if resp.StatusCode != 400 || !strings.Contains(text, "this model cannot fill in the middle: its tokenizer has no <|fim_prefix|> token") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, text)
		}
	}
	if _, body := do(t, post(t, ts.URL+"/api/show", `{"model":"qwen-test"}`)); strings.Contains(body, `"insert"`) {
		t.Errorf("/api/show says a model without FIM tokens takes a suffix: %s", body)
	}
}
