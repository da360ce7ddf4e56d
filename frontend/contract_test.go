package frontend_test

// The UI's TypeScript types (src/lib/api/types.ts) mirror JSON the Go
// servers write. This test makes the management and API servers answer
// through their real handlers and keeps the answers as the contract's
// fixtures (contracttest); internal/runtime's test adds the Setup screen's
// fit and doctor replies, which are composed there.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"petal/frontend/contracttest"
	"petal/internal/api"
	"petal/internal/manage"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

// bodies holds the answers one run collects, by fixture name.
type bodies map[string][]byte

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

// fakePrefixCache is a disk tier holding two snapshots until cleared.
type fakePrefixCache struct{ files *int }

func (c fakePrefixCache) PrefixCacheStatus() manage.PrefixCacheStatus {
	return manage.PrefixCacheStatus{Enabled: true, Dir: "/cache/petal/prefix", On: true, BudgetBytes: 20e9, Files: *c.files, Bytes: int64(*c.files) * 300e6}
}

func (c fakePrefixCache) ClearPrefixCache() (int, int64, error) {
	n := *c.files
	*c.files = 0
	return n, int64(n) * 300e6, nil
}

func manageHandler(t *testing.T, model manage.ModelStatus, dl manage.DownloadStatus) http.Handler {
	t.Helper()
	st, err := manage.OpenSettings(filepath.Join(t.TempDir(), "manage-settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := manage.New(manage.Options{
		Model:       func() manage.ModelStatus { return model },
		Endpoint:    "http://127.0.0.1:8080/v1",
		Fit:         func(int) (any, error) { return map[string]any{}, nil },
		Downloader:  fakeDownloader{dl},
		Load:        func(context.Context) error { return nil },
		Settings:    st,
		Running:     manage.DefaultSettings(),
		PrefixCache: fakePrefixCache{files: new(2)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func manageFixtures(t *testing.T, c bodies) {
	ready := manage.ModelStatus{Name: "demo", DisplayName: "Demo model", State: "ready", ContextLength: 32768, Backend: "cpu", Dir: "/m", Running: 1, Parallel: 4}
	running := manage.DownloadStatus{
		State: "running", Repo: "mlx-community/Qwen3.6-35B-A3B-4bit", Revision: "main", Dir: "/m",
		BytesDone: 1 << 30, BytesTotal: 20 << 30, Speed: 50e6, ETASeconds: 380,
		Error: &manage.DownloadError{Code: "network", Message: "The connection dropped.", Detail: "read tcp: connection reset by peer"},
		Retry: &manage.DownloadRetry{Reason: "dns", Message: "The Hub cannot be reached.", Detail: "lookup huggingface.co: no such host",
			Unreachable: true, NextAttemptAt: time.Now(), Attempt: 2, MaxAttempts: 8},
	}
	h := manageHandler(t, ready, running)
	c["manage-status.json"] = get(t, h, "GET", "/manage/status", "")
	c["manage-download-retrying.json"] = get(t, h, "GET", "/manage/download", "")
	c["manage-settings.json"] = get(t, h, "GET", "/manage/settings", "")
	c["manage-error.json"] = get(t, h, "PUT", "/manage/settings", `{"port":0}`)
	c["manage-prefix-cache.json"] = get(t, h, "GET", "/manage/prefix-cache", "")
	c["manage-prefix-cache-cleared.json"] = get(t, h, "POST", "/manage/prefix-cache/clear", "{}")

	failed := manage.ModelStatus{Name: "demo", State: "failed", Backend: "cpu", Dir: "/m", Error: "model.safetensors is damaged"}
	idle := manage.DownloadStatus{State: "idle", Repo: "r", Revision: "main", Dir: "/m"}
	h = manageHandler(t, failed, idle)
	c["manage-status-failed.json"] = get(t, h, "GET", "/manage/status", "")
	c["manage-download-idle.json"] = get(t, h, "GET", "/manage/download", "")
}

func apiFixtures(t *testing.T, c bodies) {
	dir, tok := servicetest.Folder(t)
	m := servicetest.NewModel(servicetest.MaxPositions, servicetest.Text(tok, func(string) string { return "Plan.\n</think>\n\nHello there." }))
	svc, err := service.New(m, dir, service.Options{Name: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	h := api.New(svc, api.Options{})
	c["api-models.json"] = get(t, h, "GET", "/v1/models", "")
	c["api-error.json"] = get(t, h, "POST", "/v1/chat/completions", `{"model":"demo","messages":[]}`)

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
	c["api-chat-stream.json"] = all
}

func TestUIContractFixtures(t *testing.T) {
	m, a := bodies{}, bodies{}
	manageFixtures(t, m)
	apiFixtures(t, a)
	contracttest.Check(t, "manage-", m)
	contracttest.Check(t, "api-", a)
}
