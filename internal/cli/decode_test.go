package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"petal/engine/spec"
	"petal/engine/tokenizer"
	"petal/internal/runtime"
)

// demoModel is the built-in demo checkpoint, the smallest with a tokenizer.
const demoModel = "../../models/demo"

// demoServer is petal serve on the demo model, and what it logged at
// start.
type demoServer struct {
	base string
	log  string
}

// skipDemoOnSim skips, under -short, a test that runs the demo model on
// the simulated GPU (minutes of CI between them); scripts/test.sh runs the
// full set.
func skipDemoOnSim(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the demo model on the sim: go test without -short runs it")
	}
}

func startDemoServe(t *testing.T, backend string) *demoServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--model", demoModel, "--backend", backend, "--addr", "127.0.0.1:0"}, w)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	br := bufio.NewReader(r)
	var log strings.Builder
	base := ""
	for !strings.Contains(log.String(), "decode: ") {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("serve: %v (log %q)", <-done, log.String())
		}
		log.WriteString(line)
		if i := strings.Index(line, "http://"); i >= 0 && base == "" {
			base = strings.TrimSpace(line[i:])
		}
	}
	go io.Copy(io.Discard, br)
	return &demoServer{base: base, log: log.String()}
}

// completions posts a completion request and returns the reply decoded
// into go-openai's type, or each streamed chunk.
func (s *demoServer) completions(t *testing.T, body string, stream bool) []openai.CompletionResponse {
	t.Helper()
	if stream {
		body = strings.Replace(body, "{", `{"stream":true,`, 1)
	}
	resp, err := http.Post(s.base+"/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: status %d: %s", body, resp.StatusCode, b)
	}
	if !stream {
		var reply openai.CompletionResponse
		if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || len(reply.Choices) != 1 {
			t.Fatalf("%s: %+v, %v", body, reply, err)
		}
		return []openai.CompletionResponse{reply}
	}
	var chunks []openai.CompletionResponse
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c openai.CompletionResponse
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// complete posts a completion request and returns its text: the JSON
// reply's, or the streamed chunks' joined.
func (s *demoServer) complete(t *testing.T, body string, stream bool) string {
	t.Helper()
	var text strings.Builder
	for _, r := range s.completions(t, body, stream) {
		for _, c := range r.Choices {
			text.WriteString(c.Text)
		}
	}
	return text.String()
}

// metric reads one value from /metrics.
func (s *demoServer) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.base[:len(s.base)-len("/v1")] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

const (
	decodePrompt = "Once upon a time"
	decodeTokens = 3
)

// Through petal serve on the sim and on the CPU: a greedy request decodes
// on the device (no logits read back) with the CPU's text, streamed and
// not; a seeded sampled request draws on the device too and gives the same
// text twice; and petal
// bench's loop on both backends decodes what the server did for the same
// prompt.
func TestServeDecodeOnDevice(t *testing.T) {
	skipDemoOnSim(t)
	greedy := `{"prompt":"` + decodePrompt + `","max_tokens":` + strconv.Itoa(decodeTokens) + `,"temperature":0,"presence_penalty":0}`
	sampled := `{"prompt":"` + decodePrompt + `","max_tokens":` + strconv.Itoa(decodeTokens) + `,"temperature":0.7,"top_p":0.9,"seed":7}`

	cpuSrv := startDemoServe(t, "cpu")
	cpuText := cpuSrv.complete(t, greedy, false)
	if !strings.Contains(cpuSrv.log, "decode: host loop") {
		t.Errorf("CPU server log: %q", cpuSrv.log)
	}

	sim := startDemoServe(t, "sim")
	if !strings.Contains(sim.log, "decode: device loop") {
		t.Errorf("sim server log: %q", sim.log)
	}
	const readback = "petal_logits_readback_bytes_total"
	before := sim.metric(t, readback)
	simText := sim.complete(t, greedy, false)
	if simText != cpuText {
		t.Errorf("greedy on the sim %q, on the CPU %q", simText, cpuText)
	}
	if s := sim.complete(t, greedy, true); s != simText {
		t.Errorf("streamed %q, not streamed %q", s, simText)
	}
	if after := sim.metric(t, readback); after != before {
		t.Errorf("greedy requests read %v bytes of logits back", after-before)
	}
	if sim.metric(t, "petal_decode_host_seconds_total") <= 0 {
		t.Error("no decode host time counted")
	}
	a, b := sim.complete(t, sampled, false), sim.complete(t, sampled, false)
	if a != b || a == "" {
		t.Errorf("seeded sampling gave %q then %q", a, b)
	}
	if after := sim.metric(t, readback); after != before {
		t.Errorf("sampled requests read %v bytes of logits back", after-before)
	}

	tok, err := tokenizer.Load(filepath.Join(demoModel, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode(decodePrompt)
	digests := map[string]string{}
	for _, backend := range []string{"cpu", "sim"} {
		m, err := runtime.OpenModel(demoModel, backend)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, ids, _, err := benchRun(m, prompt, decodeTokens-1, spec.Off, nil)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s bench loop: %v in %v", backend, ids, time.Since(start))
		if got := tok.DecodeSkipSpecial(ids); got != cpuText {
			t.Errorf("bench on %s decodes %q, the server %q", backend, got, cpuText)
		}
		digests[backend] = benchDigest(ids[1:])
	}
	if digests["cpu"] != digests["sim"] {
		t.Errorf("bench digests: %v", digests)
	}
}
