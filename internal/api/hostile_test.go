package api

import (
	"bufio"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"petal/engine"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

// The API's namespaces are the API's in any case and without a trailing
// path: a client probing them gets a JSON 404, never the UI's page.
func TestAPINamespacesAreNotTheUIs(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>ui") })
	ts := newTestServer(t, service.Options{}, Options{Fallback: ui}, constant("hi"))
	for _, path := range []string{"/v1", "/api", "/V1/models", "/API/tags", "/v1/", "/Api/nothing"} {
		resp, body := do(t, get(t, ts.URL+path))
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || strings.Contains(body, "<html>") {
			t.Errorf("GET %s: %d %q %q, want a JSON 404", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	// Paths that only start like a namespace are the UI's.
	if resp, body := do(t, get(t, ts.URL+"/v1x")); resp.StatusCode != 200 || body != "<html>ui" {
		t.Errorf("GET /v1x: %d %q, want the UI", resp.StatusCode, body)
	}
}

func TestTrailingDataAfterTheBodyIsRefused(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\nhi"))
	msg := `{"max_tokens":3,"messages":[{"role":"user","content":"x"}]}`
	for _, tail := range []string{"garbage", "}", msg, " x"} {
		resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", msg+tail))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "more after its JSON value") {
			t.Errorf("body followed by %q: %d %s", tail, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", msg+" \r\n\t")); resp.StatusCode != 200 {
		t.Errorf("body followed by white space: %d %s", resp.StatusCode, body)
	}
}

// A client that stops sending mid-body is answered 408 and its connection
// closed once the body's time is up, instead of holding it forever.
func TestStalledBodyTimesOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	ts := newTestServer(t, service.Options{}, Options{BodyReadTimeout: timeout}, constant("</think>\n\nhi"))
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
	if _, err := io.WriteString(conn, head+`{"messages":[`); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // the test's own bound, far above the server's
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body_timeout") {
		t.Errorf("stalled body: %d %s", resp.StatusCode, body)
	}
}

// The body's deadline ends with the body: a reply that lasts
// longer than it is not cut.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	const timeout = 100 * time.Millisecond
	ts := newTestServer(t, service.Options{}, Options{BodyReadTimeout: timeout}, constant("</think>\n\n"+strings.Repeat("ab, ", 30)))
	ts.model.SetStepDelay(5 * time.Millisecond) // 30+ steps: more than the timeout
	resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Errorf("a reply longer than the body's timeout: %d %s", resp.StatusCode, body)
	}
}

// A repetition penalty so small that the penalised logits overflow is the
// request's fault: a 400 naming the field, not an internal error.
func TestExtremeRepetitionPenaltyIsRefused(t *testing.T) {
	ts := newTestServer(t, service.Options{}, Options{}, constant("</think>\n\nhi hi hi"))
	for _, rp := range []string{"1e-40", "1e40", "0.001"} {
		for _, stream := range []string{"false", "true"} {
			resp, body := do(t, post(t, ts.URL+"/v1/chat/completions",
				`{"stream":`+stream+`,"repetition_penalty":`+rp+`,"messages":[{"role":"user","content":"hi hi"}]}`))
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "repetition_penalty") {
				t.Errorf("repetition_penalty %s, stream %s: %d %s", rp, stream, resp.StatusCode, body)
			}
		}
	}
	if resp, body := do(t, post(t, ts.URL+"/v1/chat/completions", `{"repetition_penalty":1.3,"messages":[{"role":"user","content":"hi hi"}]}`)); resp.StatusCode != 200 {
		t.Errorf("repetition_penalty 1.3: %d %s", resp.StatusCode, body)
	}
}

// nanModel is a model whose every logit is NaN, as broken weights make.
type nanModel struct{ engine.Model }

func (m nanModel) NewSequence() (engine.Sequence, error) {
	seq, err := m.Model.NewSequence()
	return nanSequence{seq}, err
}

type nanSequence struct{ engine.Sequence }

func (s nanSequence) Fork() (engine.Sequence, error) {
	f, err := s.Sequence.Fork()
	return nanSequence{f}, err
}

func (s nanSequence) Forward(tokens []int, out []float32) error {
	err := s.Sequence.Forward(tokens, out)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	return err
}

// NaN logits are said to be the model's, in words a user can act on.
func TestNaNLogitsSaySo(t *testing.T) {
	dir, tok := servicetest.Folder(t)
	m := servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, constant("hi")))
	svc, err := service.New(nanModel{m}, dir, service.Options{Name: "qwen-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ts := httptest.NewServer(New(svc, Options{}))
	defer ts.Close()
	for _, path := range []string{"/v1/chat/completions", "/api/chat", "/v1/messages"} {
		resp, body := do(t, post(t, ts.URL+path, `{"model":"qwen-test","stream":false,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "NaN") || !strings.Contains(body, "the model") || strings.Contains(body, "internal error") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
}
