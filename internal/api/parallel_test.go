package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"petal/internal/service"
)

// runningWait bounds how long a test waits for requests to reach the
// model or leave it.
const runningWait = 10 * time.Second

// waitRunning waits until n requests hold ts's model, reading the queue
// again at each change.
func waitRunning(t *testing.T, ts *testServer, n int) {
	t.Helper()
	for {
		changed := ts.svc.QueueChanged()
		if ts.svc.Metrics().Running == n {
			return
		}
		select {
		case <-changed:
		case <-time.After(runningWait):
			t.Fatalf("never %d running: %+v", n, ts.svc.Metrics())
		}
	}
}

// decodedEvents is how many events with reply text streamOpen reads:
// enough that the reply is being decoded.
const decodedEvents = 5

// streamOpen starts a streamed chat and reads it until the reply is being
// decoded, then leaves it running until ctx ends.
func streamOpen(t *testing.T, ctx context.Context, ts *testServer) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"go on"}],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	for n := 0; n < decodedEvents; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended after %d events with text: %v", n, err)
		}
		if strings.Contains(line, `"delta":{"content":"`) && !strings.Contains(line, `"content":""`) {
			n++
		}
	}
}

// psModel is /api/ps's one model: Ollama's fields Petal fills and its own
// two.
type psModel struct {
	Name            string `json:"name"`
	ContextLength   int    `json:"context_length"`
	RequestsRunning *int   `json:"requests_running"`
	Parallel        *int   `json:"parallel"`
}

func ps(t *testing.T, ts *testServer) psModel {
	t.Helper()
	_, body := do(t, get(t, ts.URL+"/api/ps"))
	var r struct{ Models []psModel }
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Models) != 1 || r.Models[0].RequestsRunning == nil || r.Models[0].Parallel == nil {
		t.Fatalf("/api/ps: %s", body)
	}
	return r.Models[0]
}

// TestPsSaysWhatRuns: /api/ps says how many requests run on the model and
// how many may decode together: none of 1 idle by default, 2 of 2 while
// two streams run on a server of --parallel 2, none once they are gone.
func TestPsSaysWhatRuns(t *testing.T) {
	if m := ps(t, newTestServer(t, service.Options{}, Options{}, constant("ok"))); *m.RequestsRunning != 0 || *m.Parallel != 1 || m.Name != "qwen-test" {
		t.Errorf("idle, default: %+v running %d of %d", m, *m.RequestsRunning, *m.Parallel)
	}
	ts := newTestServer(t, service.Options{Parallel: 2}, Options{}, constant("</think>\n\n"+strings.Repeat("more ", 400)))
	ts.model.SetStepDelay(time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	streamOpen(t, ctx, ts)
	streamOpen(t, ctx, ts)
	waitRunning(t, ts, 2)
	if m := ps(t, ts); *m.RequestsRunning != 2 || *m.Parallel != 2 || m.ContextLength != 4096 {
		t.Errorf("two streams: running %d of %d, context %d", *m.RequestsRunning, *m.Parallel, m.ContextLength)
	}
	cancel()
	waitRunning(t, ts, 0)
	if m := ps(t, ts); *m.RequestsRunning != 0 || *m.Parallel != 2 {
		t.Errorf("after: running %d of %d", *m.RequestsRunning, *m.Parallel)
	}
}

// scrape reads /metrics into name (with labels) -> value, and the TYPE
// of each family.
func scrape(t *testing.T, ts *testServer) (values map[string]float64, types map[string]string) {
	t.Helper()
	_, body := do(t, get(t, ts.URL+"/metrics"))
	values, types = map[string]float64{}, map[string]string{}
	helps := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[0] == "#" && f[1] == "TYPE":
			types[f[2]] = f[3]
		case len(f) >= 4 && f[0] == "#" && f[1] == "HELP":
			helps[f[2]] = true
		case len(f) == 2:
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			values[f[0]] = v
		default:
			t.Fatalf("odd metric line %q", line)
		}
	}
	for name := range types {
		if !helps[name] {
			t.Errorf("%s has a TYPE and no HELP", name)
		}
	}
	return values, types
}

// TestMetricsOfBatching: /metrics reads the batching counters through the
// handler: the parallel limit, the latest step's batch, the steps and
// rows, and the queue wait as a summary, equal to the service's own
// figures once two streams sharing steps are gone; the stable names stay.
func TestMetricsOfBatching(t *testing.T) {
	ts := newTestServer(t, service.Options{Parallel: 2}, Options{}, constant("</think>\n\n"+strings.Repeat("more ", 400)))
	ts.model.SetStepDelay(time.Millisecond)
	values, _ := scrape(t, ts)
	if values["petal_parallel"] != 2 || values["petal_batch_steps_total"] != 0 || values["petal_queue_wait_seconds_count"] != 0 {
		t.Errorf("idle: %v", values)
	}
	ctx, cancel := context.WithCancel(t.Context())
	streamOpen(t, ctx, ts)
	streamOpen(t, ctx, ts)
	waitRunning(t, ts, 2)
	if values, _ = scrape(t, ts); values["petal_requests_running"] != 2 {
		t.Errorf("two streams: petal_requests_running %v", values["petal_requests_running"])
	}
	cancel()
	waitRunning(t, ts, 0)

	values, types := scrape(t, ts)
	m := ts.svc.Metrics()
	for name, want := range map[string]struct {
		kind  string
		value float64
	}{
		"petal_parallel":          {"gauge", float64(m.Parallel)},
		"petal_batch_size":        {"gauge", float64(m.Batch)},
		"petal_batch_steps_total": {"counter", float64(m.Steps)},
		"petal_batch_rows_total":  {"counter", float64(m.StepRows)},
		"petal_requests_running":  {"gauge", 0},
		"petal_queue_depth":       {"gauge", 0},
	} {
		if values[name] != want.value || types[name] != want.kind {
			t.Errorf("%s: %v (%s), want %v (%s)", name, values[name], types[name], want.value, want.kind)
		}
	}
	if types["petal_queue_wait_seconds"] != "summary" || values["petal_queue_wait_seconds_count"] != 2 ||
		values["petal_queue_wait_seconds_sum"] != m.QueueWaitSeconds || m.QueueWaitSeconds < 0 {
		t.Errorf("queue wait: %s, sum %v count %v; the service's %v over %d", types["petal_queue_wait_seconds"],
			values["petal_queue_wait_seconds_sum"], values["petal_queue_wait_seconds_count"], m.QueueWaitSeconds, m.QueueWaits)
	}
	// Two replies shared the steps: more rows than steps, and the batch
	// of the latest step at most the limit.
	if m.Steps == 0 || m.StepRows <= m.Steps || m.Batch > m.Parallel {
		t.Errorf("%d rows in %d steps, batch %d of %d", m.StepRows, m.Steps, m.Batch, m.Parallel)
	}
	for _, stable := range []string{"petal_requests_completed_total", "petal_requests_failed_total", "petal_requests_rejected_total",
		"petal_completion_tokens_total", "petal_time_to_first_token_seconds_count"} {
		if _, ok := values[stable]; !ok {
			t.Errorf("%s is gone", stable)
		}
	}
}
