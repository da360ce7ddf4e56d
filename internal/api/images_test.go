package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"petal/engine"
	"petal/engine/backend"
	"petal/engine/tokenizer"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

// visionTokens are the markers Qwen's template writes for an image, which
// the test tokenizer lacks.
var visionTokens = []string{"<|vision_start|>", "<|vision_end|>", "<|image_pad|>"}

// visionModel is the scripted model with a vision tower: its sequences
// keep the images placed in their prompt.
type visionModel struct {
	*servicetest.Model
	mu     sync.Mutex
	placed [][]service.ImageSpan
	// refuse, when set, is what PlaceImages answers.
	refuse error
}

func (m *visionModel) Vision() bool { return true }

func (m *visionModel) NewSequence() (engine.Sequence, error) {
	seq, err := m.Model.NewSequence()
	return &visionSequence{Sequence: seq, m: m}, err
}

// spans are the images placed in the last sequence that took any.
func (m *visionModel) spans() []service.ImageSpan {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.placed) == 0 {
		return nil
	}
	return m.placed[len(m.placed)-1]
}

type visionSequence struct {
	engine.Sequence
	m *visionModel
}

func (s *visionSequence) PlaceImages(spans []service.ImageSpan) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.m.refuse != nil {
		return s.m.refuse
	}
	s.m.placed = append(s.m.placed, spans)
	return nil
}

// newVisionServer is newTestServer over a model with a vision tower and a
// tokenizer that has the vision markers; the model's reply to a prompt
// is reply(prompt text).
func newVisionServer(t testing.TB, reply func(string) string) (*testServer, *visionModel) {
	t.Helper()
	dir, _ := servicetest.Folder(t)
	ids := map[string]int{}
	for i, s := range visionTokens {
		ids[s] = 256 + len(servicetest.AddedTokens) + i
	}
	tok := addTokens(t, dir, ids)
	vm := &visionModel{Model: servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, reply))}
	svc, err := service.New(vm, dir, service.Options{Name: "qwen-vl-test"})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(New(svc, Options{})), svc: svc, model: vm.Model, tok: tok}
	t.Cleanup(func() {
		ts.Close()
		svc.Close()
	})
	return ts, vm
}

// addTokens adds special tokens of the given ids to the tokenizer of the
// test folder dir and loads it.
func addTokens(t testing.TB, dir string, ids map[string]int) *tokenizer.Tokenizer {
	t.Helper()
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
	for s, id := range ids {
		added = append(added, map[string]any{"id": id, "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
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
	return tok
}

// pngOf encodes a w x h gradient as PNG.
func pngOf(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pngClaiming is a tiny PNG whose header claims w x h pixels: a
// decompression bomb as far as the header tells.
func pngClaiming(t testing.TB, w, h uint32) []byte {
	t.Helper()
	b := pngOf(t, 1, 1)
	// The signature (8 bytes), IHDR's length and type (8), then its data:
	// width and height first; its CRC covers type and data (17 bytes).
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

func dataURL(b []byte) string { return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b) }

// The two test images and the tokens the processor gives them:
// smart_resize brings 64x32 up to 384x192 (min_pixels 256²), 72 tokens of
// 32x32 pixels, and 32x32 up to 256x256, 64 tokens.
const (
	wideTokens   = 72
	squareTokens = 64
)

// imageSpan is the prompt's run of n pads between the vision markers.
func imageSpan(n int) string {
	return "<|vision_start|>" + strings.Repeat("<|image_pad|>", n) + "<|vision_end|>"
}

// TestImagesEveryRoute sends images in each API's own shape (go-openai's
// multi-part content, Anthropic's image blocks in a turn and in a
// tool_result, Ollama's images on /api/chat and /api/generate, the
// Responses API's input_image) to a model with a vision tower: each image
// becomes its processor's count of pads between the vision markers, in
// order, and the sequence is handed the images at those pads.
func TestImagesEveryRoute(t *testing.T) {
	var last prompts
	ts, vm := newVisionServer(t, last.record(constant("a cat")))
	wide, square := pngOf(t, 64, 32), pngOf(t, 32, 32)
	b64w, b64s := base64.StdEncoding.EncodeToString(wide), base64.StdEncoding.EncodeToString(square)
	block := func(b64 string) string {
		return `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}`
	}
	send := func(route, body string) {
		t.Helper()
		resp, text := do(t, post(t, ts.URL+route, body))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", route, resp.StatusCode, text)
		}
	}
	both := imageSpan(wideTokens) + imageSpan(squareTokens)
	for _, c := range []struct {
		name string
		send func()
		// want is what the prompt holds; images the files in order.
		want   string
		images [][]byte
	}{
		{"go-openai", func() {
			_, err := client(ts, "").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
				Model: "gpt-4o",
				Messages: []openai.ChatCompletionMessage{{Role: "user", MultiContent: []openai.ChatMessagePart{
					{Type: openai.ChatMessagePartTypeText, Text: "what is this?"},
					{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: dataURL(wide), Detail: openai.ImageURLDetailHigh}},
					{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: dataURL(square)}},
				}}},
			})
			if err != nil {
				t.Fatal(err)
			}
		}, "what is this?" + both, [][]byte{wide, square}},
		{"anthropic turn", func() {
			send("/v1/messages", `{"model":"claude","max_tokens":50,"messages":[{"role":"user","content":[`+block(b64w)+`,{"type":"text","text":"Describe this image."}]}]}`)
		}, imageSpan(wideTokens) + "Describe this image.", [][]byte{wide}},
		{"anthropic tool_result", func() {
			send("/v1/messages", `{"model":"claude","max_tokens":50,"messages":[{"role":"user","content":"open it"},`+
				`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/tmp/a.png"}}]},`+
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[`+block(b64s)+`]},{"type":"text","text":"and this one"},`+block(b64w)+`]}]}`)
		}, "<tool_response>\n" + imageSpan(squareTokens) + "\n</tool_response>", [][]byte{square, wide}},
		{"ollama chat", func() {
			send("/api/chat", `{"model":"qwen3.6","stream":false,"messages":[{"role":"user","content":"what is in these?","images":["`+b64w+`","`+b64s+`"]}]}`)
		}, both + "what is in these?", [][]byte{wide, square}},
		{"ollama generate", func() {
			send("/api/generate", `{"model":"qwen3.6","stream":false,"prompt":"what is this?","images":["`+b64s+`"]}`)
		}, imageSpan(squareTokens) + "what is this?", [][]byte{square}},
		{"responses", func() {
			send("/v1/responses", `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"what is in this image?"},{"type":"input_image","image_url":"`+dataURL(wide)+`","detail":"auto"}]}]}`)
		}, "what is in this image?" + imageSpan(wideTokens), [][]byte{wide}},
	} {
		c.send()
		last.mu.Lock()
		prompt := last.p
		last.mu.Unlock()
		if !strings.Contains(prompt, c.want) {
			t.Errorf("%s: the prompt lacks %q:\n%s", c.name, c.want, prompt)
		}
		if n, want := strings.Count(prompt, "<|image_pad|>"), 0; n == want {
			t.Errorf("%s: no pads in the prompt", c.name)
		}
		spans := vm.spans()
		if len(spans) != len(c.images) {
			t.Fatalf("%s: %d images placed, want %d", c.name, len(spans), len(c.images))
		}
		ids := ts.tok.Encode(prompt)
		pad, _ := ts.tok.TokenID("<|image_pad|>")
		for i, sp := range spans {
			if sp.Hash != sha256.Sum256(c.images[i]) {
				t.Errorf("%s: image %d is not the file sent there", c.name, i)
			}
			n := sp.Pixels.Tokens()
			if sp.Start <= 0 || sp.Start+n > len(ids) || ids[sp.Start-1] == pad || ids[sp.Start] != pad || ids[sp.Start+n-1] != pad || ids[sp.Start+n] == pad {
				t.Errorf("%s: image %d placed at %d for %d tokens, not at its run of pads", c.name, i, sp.Start, n)
			}
			if len(sp.Pixels.Values) != sp.Pixels.Grid.Patches()*sp.Pixels.PatchDim {
				t.Errorf("%s: image %d has %d pixel values for grid %v", c.name, i, len(sp.Pixels.Values), sp.Pixels.Grid)
			}
		}
	}
}

// TestImagesTextOnlyEveryRoute: a model without a vision tower refuses an
// image with a 400 that says the model is text-only, in each API's error
// shape, and names where the image was; the model reads nothing.
func TestImagesTextOnlyEveryRoute(t *testing.T) {
	var calls sync.Mutex
	read := 0
	ts := newTestServer(t, service.Options{}, Options{}, func(string) string {
		calls.Lock()
		read++
		calls.Unlock()
		return "ok"
	})
	b64 := base64.StdEncoding.EncodeToString(pngOf(t, 32, 32))
	block := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}`
	for _, c := range []struct {
		route, body, where string
		// message reads the error's text from the route's shape.
		message func(string) string
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]}]}`, "messages[0].content[1].image_url.url", openAIErrorText},
		{"/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":[` + block + `]}]}`, "messages[0].content[0].source", anthropicErrorText},
		{"/v1/messages/count_tokens", `{"messages":[{"role":"user","content":[` + block + `]}]}`, "messages[0].content[0].source", anthropicErrorText},
		{"/api/chat", `{"stream":false,"messages":[{"role":"user","content":"hi","images":["` + b64 + `"]}]}`, "messages[0].images[0]", ollamaErrorText},
		{"/api/generate", `{"stream":false,"prompt":"hi","images":["` + b64 + `"]}`, "images[0]", ollamaErrorText},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `"}]}]}`, "input[0].content[0].image_url", openAIErrorText},
	} {
		resp, body := do(t, post(t, ts.URL+c.route, c.body))
		want := errTextOnly(c.where, "qwen-test").Message
		if resp.StatusCode != 400 || c.message(body) != want {
			t.Errorf("%s: %d %s\nwant %q", c.route, resp.StatusCode, body, want)
		}
	}
	if read != 0 {
		t.Errorf("the model read %d requests with images", read)
	}
}

func openAIErrorText(body string) string {
	var e struct{ Error struct{ Message string } }
	json.Unmarshal([]byte(body), &e)
	return e.Error.Message
}

func anthropicErrorText(body string) string {
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	json.Unmarshal([]byte(body), &e)
	if e.Type != "error" || e.Error.Type != "invalid_request_error" {
		return "not Anthropic's shape: " + body
	}
	return e.Error.Message
}

func ollamaErrorText(body string) string {
	var e struct{ Error string }
	json.Unmarshal([]byte(body), &e)
	return e.Error
}

// TestModelsSayVision: /v1/models (LM Studio's capabilities.vision and
// type) and /api/show (Ollama's "vision" capability) say whether the
// loaded model reads images.
func TestModelsSayVision(t *testing.T) {
	text := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	vision, _ := newVisionServer(t, constant("ok"))
	for _, c := range []struct {
		ts   *testServer
		want bool
		typ  string
	}{{text, false, "llm"}, {vision, true, "vlm"}} {
		_, body := do(t, get(t, c.ts.URL+"/v1/models"))
		var list struct {
			Data []struct {
				Type         string
				Capabilities struct{ Vision bool }
			}
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Data) != 1 {
			t.Fatalf("%v: %s", err, body)
		}
		if m := list.Data[0]; m.Capabilities.Vision != c.want || m.Type != c.typ {
			t.Errorf("/v1/models: %s, want vision %v, type %s", body, c.want, c.typ)
		}
		_, body = do(t, post(t, c.ts.URL+"/api/show", `{"model":"x"}`))
		var show struct{ Capabilities []string }
		if err := json.Unmarshal([]byte(body), &show); err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(strings.Join(show.Capabilities, ","), "vision"); has != c.want {
			t.Errorf("/api/show capabilities %v, want vision %v", show.Capabilities, c.want)
		}
	}
}

// hostileWait bounds the wall time of a refused image's request, on a
// machine that other work may slow several times over.
const hostileWait = 10 * time.Second

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestImagesHostile: images that would cost memory or time, or that
// cannot be read, are each a 400 naming the limit or the fault, within a
// second of CPU and with the request's allocations far under 256 MB,
// before the model reads anything.
func TestImagesHostile(t *testing.T) {
	ts, vm := newVisionServer(t, constant("ok"))
	one := dataURL(pngOf(t, 32, 32))
	chat := func(urls ...string) string {
		parts := []string{`{"type":"text","text":"look"}`}
		for _, u := range urls {
			parts = append(parts, `{"type":"image_url","image_url":{"url":"`+u+`"}}`)
		}
		return `{"messages":[{"role":"user","content":[` + strings.Join(parts, ",") + `]}]}`
	}
	twenty := make([]string, 20)
	for i := range twenty {
		twenty[i] = one
	}
	truncated := pngOf(t, 64, 64)
	truncated = truncated[:len(truncated)/2]
	for _, c := range []struct{ name, route, body, want string }{
		{"50k x 50k PNG", "/v1/chat/completions", chat(dataURL(pngClaiming(t, 50000, 50000))), "MaxSide"},
		{"16k x 16k PNG", "/v1/chat/completions", chat(dataURL(pngClaiming(t, 16000, 16000))), "MaxPixels"},
		{"20 images", "/v1/chat/completions", chat(twenty...), "MaxImagesPerRequest"},
		{"huge base64", "/v1/chat/completions", chat("data:image/png;base64," + strings.Repeat("QUFB", (MaxImageBytes/3)+1000)), "MaxImageBytes"},
		{"truncated PNG", "/v1/chat/completions", chat(dataURL(truncated)), "image refused"},
		{"not an image", "/v1/chat/completions", chat(dataURL([]byte("GIF89a but not really"))), "image refused"},
		{"data URL not base64", "/v1/chat/completions", chat("data:image/png,rawbytes"), "must be base64"},
		{"bad base64", "/v1/chat/completions", chat("data:image/png;base64,!!!!"), "not valid base64"},
		{"not an image type", "/v1/chat/completions", chat("data:text/html;base64,PGI+"), "is not an image"},
		{"http URL", "/v1/chat/completions", chat("https://example.com/cat.png"), "Petal fetches nothing on a client's behalf"},
		{"anthropic url source", "/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}]}]}`, "Petal fetches nothing on a client's behalf"},
		{"responses http", "/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://example.com/cat.png"}]}]}`, "Petal fetches nothing on a client's behalf"},
		{"ollama bomb", "/api/chat", `{"stream":false,"messages":[{"role":"user","content":"hi","images":["` + base64.StdEncoding.EncodeToString(pngClaiming(t, 50000, 50000)) + `"]}]}`, "MaxSide"},
		{"image in a system prompt", "/v1/messages", `{"max_tokens":5,"system":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}],"messages":[{"role":"user","content":"hi"}]}`, "may only come in a user turn"},
	} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start, cpu := time.Now(), processCPU()
		resp, body := do(t, post(t, ts.URL+c.route, c.body))
		took, used := time.Since(start), processCPU()-cpu
		runtime.ReadMemStats(&after)
		if resp.StatusCode != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %.300s, want a 400 naming %q", c.name, resp.StatusCode, body, c.want)
		}
		// The work is timed as CPU (client and server both, in this
		// process), which a busy machine does not stretch as it does the
		// wall clock; the wall clock only catches a request left waiting.
		if used > time.Second || took > hostileWait {
			t.Errorf("%s: answered in %v (%v of CPU)", c.name, took, used)
		}
		// Everything the request allocated, body and its copies included.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
			t.Errorf("%s: the request allocated %d MB", c.name, alloc>>20)
		}
	}
	if n := len(vm.placed); n != 0 {
		t.Errorf("%d refused requests reached the model", n)
	}
}

// TestTokenizeCountsImages: /v1/tokenize (the chat window's context
// counter) counts an image as the chat endpoint places it: its pads and
// the two markers; a text-only model refuses it as the chat endpoint does.
func TestTokenizeCountsImages(t *testing.T) {
	ts, _ := newVisionServer(t, constant("ok"))
	count := func(ts *testServer, content string) (int, string) {
		resp, body := do(t, post(t, ts.URL+"/v1/tokenize", `{"messages":[{"role":"user","content":`+content+`}]}`))
		var r struct{ Count int }
		json.Unmarshal([]byte(body), &r)
		if resp.StatusCode != 200 {
			return -1, body
		}
		return r.Count, body
	}
	image := `{"type":"image_url","image_url":{"url":"` + dataURL(pngOf(t, 64, 32)) + `"}}`
	text, _ := count(ts, `[{"type":"text","text":"what is this?"}]`)
	with, body := count(ts, `[{"type":"text","text":"what is this?"},`+image+`]`)
	if with-text != wideTokens+2 {
		t.Errorf("the image counts %d tokens, want %d pads and 2 markers: %s", with-text, wideTokens, body)
	}
	plain := newTestServer(t, service.Options{}, Options{}, constant("ok"))
	if n, body := count(plain, `[`+image+`]`); n != -1 || !strings.Contains(body, "is text-only") {
		t.Errorf("a text-only model counted an image: %s", body)
	}
}

// TestImagesReachTheCPUModel: on the CPU backend with the vision fixture
// (engine/testdata/fixtures/vision-a, a tower of the real structure at
// reduced widths), an image sent to /v1/chat/completions is read by the
// model: the reply's first token's log probability changes with the
// image's pixels, the same image through /api/chat gives the same reply,
// and the prompt counts the image's 72 pads.
func TestImagesReachTheCPUModel(t *testing.T) {
	dir := servicetest.FixtureFolder(t, "vision-a")
	// The fixture's config.json names these ids (image_token_id and the
	// vision markers).
	addTokens(t, dir, map[string]int{"<|image_pad|>": 506, "<|vision_start|>": 508, "<|vision_end|>": 509})
	m, err := backend.Open("cpu", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	svc, err := service.New(m, dir, service.Options{Name: "vision-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	ts := httptest.NewServer(New(svc, Options{}))
	t.Cleanup(ts.Close)
	if !svc.Info().Vision {
		t.Fatal("the vision fixture is text-only")
	}
	other := image.NewRGBA(image.Rect(0, 0, 64, 32))
	for i := range other.Pix {
		other.Pix[i] = uint8(i * 7)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, other); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		text    string
		logprob float64
		prompt  int
	}
	chat := func(file []byte) answer {
		t.Helper()
		body := `{"max_tokens":3,"temperature":0,"logprobs":true,"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":[` +
			`{"type":"image_url","image_url":{"url":"` + dataURL(file) + `"}},{"type":"text","text":"what is this?"}]}]}`
		resp, text := do(t, post(t, ts.URL+"/v1/chat/completions", body))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, text)
		}
		var r struct {
			Choices []struct {
				Message  struct{ Content string }
				Logprobs struct{ Content []struct{ Logprob float64 } }
			}
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(text), &r); err != nil || len(r.Choices) != 1 || len(r.Choices[0].Logprobs.Content) == 0 {
			t.Fatalf("%v: %s", err, text)
		}
		return answer{r.Choices[0].Message.Content, r.Choices[0].Logprobs.Content[0].Logprob, r.Usage.PromptTokens}
	}
	wide := pngOf(t, 64, 32)
	a, b := chat(wide), chat(buf.Bytes())
	if a.logprob == b.logprob {
		t.Errorf("two images gave the first token the same log probability %v: the model did not read them", a.logprob)
	}
	if a.prompt != b.prompt {
		t.Errorf("two 64x32 images made prompts of %d and %d tokens", a.prompt, b.prompt)
	}
	_, counted := do(t, post(t, ts.URL+"/v1/tokenize", `{"messages":[{"role":"user","content":"what is this?"}],"chat_template_kwargs":{"enable_thinking":false}}`))
	var n struct{ Count int }
	json.Unmarshal([]byte(counted), &n)
	if a.prompt-n.Count != wideTokens+2 {
		t.Errorf("the image took %d prompt tokens, want %d pads and 2 markers", a.prompt-n.Count, wideTokens)
	}
	resp, body := do(t, post(t, ts.URL+"/api/chat", `{"stream":false,"think":false,"options":{"num_predict":3,"temperature":0},"messages":[{"role":"user","content":"what is this?","images":["`+
		base64.StdEncoding.EncodeToString(wide)+`"]}]}`))
	var o struct{ Message struct{ Content string } }
	if err := json.Unmarshal([]byte(body), &o); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if o.Message.Content != a.text {
		t.Errorf("/api/chat answered %q, /v1/chat/completions %q for the same image and text", o.Message.Content, a.text)
	}
}

// TestImagesRefusedByTheEngine: images the model refuses when they are
// placed (its tower's shape, say) are the request's fault, a 400, not an
// internal error.
func TestImagesRefusedByTheEngine(t *testing.T) {
	ts, vm := newVisionServer(t, constant("ok"))
	vm.refuse = fmt.Errorf("fake: %w: grid not the tower's", engine.ErrBadImages)
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+dataURL(pngOf(t, 32, 32))+`"}}]}]}`))
	var e struct {
		Error struct{ Message, Code string }
	}
	json.Unmarshal([]byte(body), &e)
	if resp.StatusCode != 400 || e.Error.Code != "invalid_image" || !strings.Contains(e.Error.Message, "grid not the tower's") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

// TestImageDataURLParameters: a data URL whose media type carries
// parameters before ;base64 (RFC 2397) is read like a plain one; one that
// is not base64, or whose ;base64 is not last, is still refused.
func TestImageDataURLParameters(t *testing.T) {
	ts, vm := newVisionServer(t, constant("ok"))
	b64 := base64.StdEncoding.EncodeToString(pngOf(t, 32, 32))
	chat := func(url string) string {
		return `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	}
	for url, want := range map[string]int{
		"data:image/png;charset=x;base64," + b64:          200,
		"data:image/png;name=\\\"a.png\\\";BASE64," + b64: 200,
		"data:;base64," + b64:                             200,
		"data:image/png;charset=x," + b64:                 400,
		"data:image/png;base64;charset=x," + b64:          400,
	} {
		resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", chat(url)))
		if resp.StatusCode != want {
			t.Errorf("%.40s: %d %.300s, want %d", url, resp.StatusCode, body, want)
		}
	}
	if n := len(vm.spans()); n != 1 {
		t.Errorf("the last accepted request placed %d images, want 1", n)
	}
}

// grayPNG is a w x h gray PNG of one level: a file of a few kB whose
// pixels and pixel values are large.
func grayPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// heapGrowth runs f and returns how far the live heap grew across it.
func heapGrowth(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TestQueuedImagesHoldNoPixels: requests read by the routes hold their
// images' files and grids, not their pixel values, until the service loads
// them on reaching the engine: 16 requests of a 1500x1000 image (36 MB of
// values each) read at once leave the heap under 16 MB larger while held;
// loading one gives Preprocess's values.
func TestQueuedImagesHoldNoPixels(t *testing.T) {
	ts, _ := newVisionServer(t, constant("ok"))
	srv := New(ts.svc, Options{})
	srv.svc = ts.svc
	file := grayPNG(t, 1500, 1000)
	const requests = 16
	reqs := make([]*service.Request, requests)
	grew := heapGrowth(func() {
		var wg sync.WaitGroup
		errs := make([]error, requests)
		for i := range reqs {
			wg.Go(func() {
				var set imageSet
				if _, err := set.addBase64("image", "image/png", base64.StdEncoding.EncodeToString(file)); err != nil {
					errs[i] = err
					return
				}
				reqs[i] = &service.Request{}
				errs[i] = srv.readImages(t.Context(), reqs[i], &set)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("%d requests of a %d-byte 1500x1000 PNG held: heap %+.1f MB", requests, len(file), float64(grew)/1e6)
	px := reqs[0].Images[0].Pixels
	if px.Values != nil || px.Tokens() == 0 {
		t.Fatalf("a read request holds %d values for %d tokens", len(px.Values), px.Tokens())
	}
	if grew > 16<<20 {
		t.Errorf("%d read requests grew the heap by %d MB", requests, grew>>20)
	}
	v, err := reqs[0].Images[0].Load(t.Context())
	if err != nil || len(v) != px.Grid.Patches()*px.PatchDim {
		t.Fatalf("Load: %d values, %v; want %d", len(v), err, px.Grid.Patches()*px.PatchDim)
	}
	runtime.KeepAlive(reqs)
}

// TestImageWorkLeavesWithItsClient: a request waiting for a place to
// decode its image (every place of MaxImageWork taken) returns when its
// context ends, holding nothing.
func TestImageWorkLeavesWithItsClient(t *testing.T) {
	ts, _ := newVisionServer(t, constant("ok"))
	srv := New(ts.svc, Options{})
	srv.svc = ts.svc
	for range MaxImageWork {
		imageWork <- struct{}{}
	}
	defer func() {
		for range MaxImageWork {
			<-imageWork
		}
	}()
	var set imageSet
	if _, err := set.addBase64("image", "image/png", base64.StdEncoding.EncodeToString(pngOf(t, 32, 32))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	gone := errors.New("the client left")
	done := make(chan error)
	go func() { done <- srv.readImages(ctx, &service.Request{}, &set) }()
	cancel(gone)
	if err := <-done; !errors.Is(err, gone) {
		t.Fatalf("readImages with every place taken and its client gone: %v", err)
	}
}

// TestTokenizeDecodesNothing: /v1/tokenize counts an image from its
// header: a 3000x2000 PNG (6 MB of pixels, 144 MB of pixel values once
// preprocessed) is counted with a few MB allocated, as many tokens as
// the chat endpoint places.
func TestTokenizeDecodesNothing(t *testing.T) {
	ts, _ := newVisionServer(t, constant("ok"))
	url := dataURL(grayPNG(t, 3000, 2000))
	body := `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, text := do(t, post(t, ts.URL+"/v1/tokenize", body))
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("tokenize: %d, %.1f MB allocated", resp.StatusCode, float64(alloc)/1e6)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, text)
	}
	if alloc > 16<<20 {
		t.Errorf("counting a 3000x2000 image allocated %d MB", alloc>>20)
	}
	var r struct{ Count int }
	json.Unmarshal([]byte(text), &r)
	// smart_resize takes 3000x2000 to the nearest multiples of 32, halves
	// to even: 94x62 of them (3008x1984), one token each.
	if want := 94 * 62; r.Count < want || r.Count > want+32 {
		t.Errorf("counted %d tokens, want the image's %d and the text's few", r.Count, want)
	}
}
