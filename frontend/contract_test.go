package frontend_test

// The UI's TypeScript types (src/lib/api/types.ts) mirror JSON the Go
// servers write. This test makes the servers write it, through their real
// handlers, into src/lib/api/contract/; contract.test.ts checks each file
// against the type the UI reads it as. A Go change that renames, drops or
// retypes a field fails one side or the other.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"petal/internal/api"
	"petal/internal/doctor"
	"petal/internal/manage"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

var update = flag.Bool("update", false, "rewrite src/lib/api/contract/ from the servers' answers")

const contractDir = "src/lib/api/contract"

// volatile are the fields whose values change from run to run (ids, clocks,
// temporary folders); they are written as fixed values of the same JSON type.
var volatile = map[string]any{
	"id":                 "volatile-id",
	"created":            1700000000,
	"created_at":         "2026-01-01T00:00:00Z",
	"started":            "2026-01-01T00:00:00Z",
	"next_attempt_at":    "2026-01-01T00:00:00Z",
	"seconds":            0.5,
	"dir":                "/models/demo",
	"system_fingerprint": "fp",
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if id, ok := e.(string); ok && k == "id" && strings.HasPrefix(id, "chatcmpl-") {
				x[k] = "chatcmpl-volatile"
				continue
			}
			if fixed, ok := volatile[k]; ok && e != nil {
				x[k] = fixed
				continue
			}
			x[k] = normalize(e)
		}
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	}
	return v
}

// contract holds the fixtures one run writes, by file name.
type contract map[string]any

func (c contract) add(t *testing.T, name string, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", name, err, body)
	}
	c[name] = normalize(v)
}

func get(t *testing.T, h http.Handler, method, path, body string) []byte {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:1234"
	req.Host = "127.0.0.1:8080"
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Body.Bytes()
}

type fakeDownloader struct{ status manage.DownloadStatus }

func (d fakeDownloader) Status() manage.DownloadStatus           { return d.status }
func (d fakeDownloader) Do(context.Context, manage.Action) error { return nil }

func manageHandler(t *testing.T, model manage.ModelStatus, dl manage.DownloadStatus) http.Handler {
	t.Helper()
	st, err := manage.OpenSettings(filepath.Join(t.TempDir(), "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := manage.New(manage.Options{
		Model:      func() manage.ModelStatus { return model },
		Endpoint:   "http://127.0.0.1:8080/v1",
		Fit:        func(int) (any, error) { return map[string]any{}, nil },
		Downloader: fakeDownloader{dl},
		Load:       func(context.Context) error { return nil },
		Doctor: func(context.Context) (any, error) {
			return map[string]any{"report": doctorReport(), "text": "PASS device\nFAIL kernel qmv"}, nil
		},
		Settings: st,
		Running:  manage.DefaultSettings(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func doctorReport() doctor.Report {
	return doctor.Report{
		Backend: "sim", Device: "Simulated Apple M3 Max", OS: "darwin", Arch: "arm64", Shaders: "abc123",
		BandwidthGBps: 400, Started: time.Now(), Seconds: 2, Pass: false, Failed: 1,
		Checks: []doctor.Check{
			{Section: "device", Name: "open", Pass: true, Message: "Apple M3 Max", Seconds: 0.1},
			{Section: "kernel", Name: "qmv", Pass: false, Message: "max error 0.3", Seconds: 0.2, GBPerSecond: 120, BandwidthShare: 0.3},
		},
	}
}

func manageFixtures(t *testing.T, c contract) {
	ready := manage.ModelStatus{Name: "demo", DisplayName: "Demo model", State: "ready", ContextLength: 32768, Backend: "cpu", Dir: "/m"}
	running := manage.DownloadStatus{
		State: "running", Repo: "mlx-community/Qwen3.6-35B-A3B-4bit", Revision: "main", Dir: "/m",
		BytesDone: 1 << 30, BytesTotal: 20 << 30, Speed: 50e6, ETASeconds: 380,
		Error: &manage.DownloadError{Code: "network", Message: "The connection dropped.", Detail: "read tcp: connection reset by peer"},
		Retry: &manage.DownloadRetry{Reason: "dns", Message: "The Hub cannot be reached.", Detail: "lookup huggingface.co: no such host",
			Unreachable: true, NextAttemptAt: time.Now(), Attempt: 2, MaxAttempts: 8},
	}
	h := manageHandler(t, ready, running)
	c.add(t, "status.json", get(t, h, "GET", "/manage/status", ""))
	c.add(t, "download-retrying.json", get(t, h, "GET", "/manage/download", ""))
	c.add(t, "settings.json", get(t, h, "GET", "/manage/settings", ""))
	c.add(t, "doctor.json", get(t, h, "POST", "/manage/doctor", "{}"))
	c.add(t, "manage-error.json", get(t, h, "PUT", "/manage/settings", `{"port":0}`))

	failed := manage.ModelStatus{Name: "demo", State: "failed", Backend: "cpu", Dir: "/m", Error: "model.safetensors is damaged"}
	idle := manage.DownloadStatus{State: "idle", Repo: "r", Revision: "main", Dir: "/m"}
	h = manageHandler(t, failed, idle)
	c.add(t, "status-failed.json", get(t, h, "GET", "/manage/status", ""))
	c.add(t, "download-idle.json", get(t, h, "GET", "/manage/download", ""))
}

func apiFixtures(t *testing.T, c contract) {
	dir, tok := servicetest.Folder(t)
	m := servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "Plan.\n</think>\n\nHello there." }))
	svc, err := service.New(m, dir, service.Options{Name: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	h := api.New(svc, api.Options{})
	c.add(t, "models.json", get(t, h, "GET", "/v1/models", ""))
	c.add(t, "api-error.json", get(t, h, "POST", "/v1/chat/completions", `{"model":"demo","messages":[]}`))

	stream := get(t, h, "POST", "/v1/chat/completions",
		`{"model":"demo","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	var chunks []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(stream))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if ok && data != "[DONE]" {
			chunks = append(chunks, json.RawMessage(data))
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("stream gave %d chunks:\n%s", len(chunks), stream)
	}
	all, _ := json.Marshal(chunks)
	c.add(t, "chat-stream.json", all)
}

func TestUIContractFixtures(t *testing.T) {
	c := contract{}
	manageFixtures(t, c)
	apiFixtures(t, c)

	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	if *update {
		if err := os.MkdirAll(contractDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		want, err := json.MarshalIndent(c[n], "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		p := filepath.Join(contractDir, n)
		if *update {
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the server writes now (%v); run `go test ./frontend -run Contract -update` and `npm test` in frontend/:\n%s", p, errOrDiff(err), want)
		}
	}
	if !*update {
		files, _ := filepath.Glob(filepath.Join(contractDir, "*.json"))
		for _, f := range files {
			if _, ok := c[filepath.Base(f)]; !ok {
				t.Errorf("%s is no longer written by this test: remove it", f)
			}
		}
	}
}

func errOrDiff(err error) string {
	if err != nil {
		return err.Error()
	}
	return "contents differ"
}
