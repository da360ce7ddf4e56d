package api

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"petal/internal/service"
)

// TestOllamaGenerate: /api/generate (Continue's autocomplete, scripts;
// issue 16: 404) streams NDJSON and ends with the timings and the context.
func TestOllamaGenerate(t *testing.T) {
	var mu sync.Mutex
	var last string
	ts := newTestServer(t, service.Options{}, Options{}, func(p string) string {
		mu.Lock()
		last = p
		mu.Unlock()
		return "</think>\n\nfunc add(a, b int) int"
	})
	resp, body := do(t, post(t, ts.URL+"/api/generate", `{"model":"x","system":"You write Go.","prompt":"add","think":false,"options":{"num_predict":50,"temperature":0}}`))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(last, "<|im_start|>system\nYou write Go.<|im_end|>\n<|im_start|>user\nadd<|im_end|>") {
		t.Errorf("prompt %q", last)
	}
	lines := strings.Split(strings.TrimSpace(body), "\n")
	var text string
	var final map[string]any
	for i, l := range lines {
		var c map[string]any
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		if c["done"] != (i == len(lines)-1) {
			t.Fatalf("line %d: %s", i, l)
		}
		text += c["response"].(string)
		final = c
	}
	if text != "func add(a, b int) int" || final["done_reason"] != "stop" {
		t.Errorf("text %q final %v", text, final)
	}
	for _, k := range []string{"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"} {
		if _, ok := final[k].(float64); !ok {
			t.Errorf("final chunk lacks %s: %v", k, final)
		}
	}
	if final["eval_count"].(float64) < 1 || final["total_duration"].(float64) < final["eval_duration"].(float64) {
		t.Errorf("timings %v", final)
	}
	var ctx []int
	raw, _ := json.Marshal(final["context"])
	json.Unmarshal(raw, &ctx)
	if got := ts.tok.Decode(ctx); got != last+"func add(a, b int) int" {
		t.Errorf("context decodes to %q", got)
	}

	// raw sends the prompt as is; context continues from the echoed ids.
	_, body = do(t, post(t, ts.URL+"/api/generate", `{"prompt":"<|fim_prefix|>x","raw":true,"stream":false}`))
	if last != "<|fim_prefix|>x" || !strings.Contains(body, `"done":true`) {
		t.Errorf("raw prompt %q: %s", last, body)
	}
	_, body = do(t, post(t, ts.URL+"/api/generate", `{"prompt":"more","stream":false,"context":`+string(raw)+`}`))
	if !strings.HasPrefix(last, ts.tok.Decode(ctx)+"<|im_start|>user\nmore<|im_end|>") {
		t.Errorf("continued prompt %q: %s", last, body)
	}

	// An empty prompt loads the model.
	_, body = do(t, post(t, ts.URL+"/api/generate", `{"model":"x"}`))
	if !strings.Contains(body, `"done_reason":"load"`) {
		t.Errorf("load: %s", body)
	}
}

// TestOllamaSurface: /api/ps, /api/embed, versions Codex accepts, sizes and
// digests in /api/tags, timings in /api/chat, and errors in Ollama's shape
// on every path under /api/ (issue 16: a 404 in OpenAI's shape showed as
// "[object Object]").
func TestOllamaSurface(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\nhi"))
	_, body := do(t, get(t, ts.URL+"/api/version"))
	var v struct{ Version string }
	json.Unmarshal([]byte(body), &v)
	var major, minor, patch int
	if n, _ := fmt.Sscanf(v.Version, "%d.%d.%d", &major, &minor, &patch); n != 3 || major*1e6+minor*1e3+patch < 13004 {
		t.Errorf("version %q is older than Codex's 0.13.4", v.Version)
	}
	for _, path := range []string{"/api/tags", "/api/ps"} {
		_, body = do(t, get(t, ts.URL+path))
		var list struct {
			Models []ollamaModel `json:"models"`
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Models) != 1 {
			t.Fatalf("%s: %s", path, body)
		}
		m := list.Models[0]
		if m.Size < 1000 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(m.Digest) {
			t.Errorf("%s: size %d digest %q", path, m.Size, m.Digest)
		}
		if path == "/api/ps" && (m.ExpiresAt == "" || m.ContextLength != 4096 || m.SizeVRAM == nil) {
			t.Errorf("ps %s", body)
		}
	}
	_, body = do(t, post(t, ts.URL+"/api/chat", `{"stream":false,"messages":[{"role":"user","content":"x"}]}`))
	if !strings.Contains(body, `"eval_duration":`) || !strings.Contains(body, `"prompt_eval_duration":`) {
		t.Errorf("chat timings: %s", body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/api/embed", `{"model":"x","input":"hi"}`, 400}, // a scripted model has no hidden states
		{"POST", "/api/embeddings", `{"model":"x","prompt":"hi"}`, 400},
		{"GET", "/api/nothing", "", 404},
		{"DELETE", "/api/tags", "", 405},
		{"POST", "/api/generate", `{"prompt":"a","suffix":"b"}`, 400},
		{"POST", "/api/generate", `{"prompt":"a","images":["AA=="]}`, 400},
		{"POST", "/api/generate", `{"prompt":"a","context":[-5]}`, 400},
		{"POST", "/api/generate", `{"prompt":5}`, 400},
	} {
		req := get(t, ts.URL+c.path)
		if c.method != "GET" {
			req = post(t, ts.URL+c.path, c.body)
			req.Method = c.method
		}
		resp, body := do(t, req)
		var e struct {
			Error string `json:"error"`
		}
		if resp.StatusCode != c.status || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, body)
		}
	}
}
