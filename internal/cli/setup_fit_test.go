package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http/httptest"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"petal/internal/hub"
	"petal/internal/runtime"
	"petal/internal/service/servicetest"
)

// TestSetupFitSaysWhatRunsWhere checks the Setup screen's fit answer
// (GET /manage/fit) beside the memory verdict: the backend this machine
// would run the 35B model on, the bytes a token reads as petal bench
// --dry-run counts them, the CPU rate that follows from the measured read
// rate, and the download's size.
func TestSetupFitSaysWhatRunsWhere(t *testing.T) {
	t.Setenv(hub.EnvModels, t.TempDir()) // the built-in shape, not an installed model
	const ctx = 8192
	rt, err := runtime.Open(runtime.Config{Load: runtime.LoadRequest{Dir: servicetest.FixtureFolder(t, "tiny-a"), Backend: "cpu", Context: 4096},
		Addr: "127.0.0.1:0", SettingsPath: filepath.Join(t.TempDir(), "s.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://127.0.0.1/manage/fit?context="+strconv.Itoa(ctx), nil)
	req.RemoteAddr = "127.0.0.1:1234"
	rt.Handler().ServeHTTP(rec, req)
	raw := rec.Body.Bytes()
	if rec.Code != 200 {
		t.Fatalf("GET /manage/fit: %d %s", rec.Code, raw)
	}
	var f struct {
		Verdict             string `json:"verdict"`
		Context             int    `json:"context"`
		Backend             string `json:"backend"`
		DecodeBytesPerToken int64  `json:"decode_bytes_per_token"`
		DownloadBytes       int64  `json:"download_bytes"`
		WeightsBytes        int64  `json:"weights_bytes"`
		CPUDecode           *struct {
			ReadBytesPerSecond float64 `json:"read_bytes_per_second"`
			TokensPerSecond    float64 `json:"tokens_per_second"`
			How                string  `json:"how"`
		} `json:"cpu_decode"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if f.Verdict == "" || f.Context != ctx {
		t.Fatalf("the memory verdict is gone from the answer: %s", raw)
	}

	// A context's costliest step is its last one's, at position ctx-1.
	var dry bytes.Buffer
	if err := dryRun("", ctx-1, 512, nil, true, &dry); err != nil {
		t.Fatal(err)
	}
	var want dryRunReport
	if err := json.Unmarshal(dry.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	if f.DecodeBytesPerToken != want.Decode.BytesMoved {
		t.Errorf("decode_bytes_per_token %d, petal bench --dry-run --context %d moves %d", f.DecodeBytesPerToken, ctx-1, want.Decode.BytesMoved)
	}
	// The 35B download is about 19.5 GB (README); its weights are that.
	if f.DownloadBytes < 18e9 || f.DownloadBytes > 21e9 || f.DownloadBytes != f.WeightsBytes {
		t.Errorf("download_bytes %d, weights %d", f.DownloadBytes, f.WeightsBytes)
	}

	if goruntime.GOOS == "darwin" && goruntime.GOARCH == "arm64" {
		if f.Backend != "metal" || f.CPUDecode != nil {
			t.Errorf("an Apple silicon Mac: backend %q, cpu_decode %+v", f.Backend, f.CPUDecode)
		}
		return
	}
	if f.Backend != "cpu" || f.CPUDecode == nil {
		t.Fatalf("no Apple GPU here: backend %q, cpu_decode %+v", f.Backend, f.CPUDecode)
	}
	rate := f.CPUDecode.ReadBytesPerSecond / float64(want.Decode.BytesMoved)
	if math.Abs(f.CPUDecode.TokensPerSecond-rate) > 1e-9*rate || f.CPUDecode.How == "" {
		t.Errorf("cpu_decode %+v, want %g tokens/s and how it was measured", f.CPUDecode, rate)
	}
}

// TestSetupFitWholeContext: GET /manage/fit?context=262144, the model's
// whole context, was a 500 (its decode step was recorded one position past
// the model's last; issue 28 A.6). The ends of the range and a context in
// it answer, and one past the end is a 400 that says the limit.
func TestSetupFitWholeContext(t *testing.T) {
	t.Setenv(hub.EnvModels, t.TempDir()) // the built-in shape, not an installed model
	rt, err := runtime.Open(runtime.Config{Load: runtime.LoadRequest{Dir: servicetest.FixtureFolder(t, "tiny-a"), Backend: "cpu", Context: 4096},
		Addr: "127.0.0.1:0", SettingsPath: filepath.Join(t.TempDir(), "s.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	get := func(ctx int) (int, map[string]any) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "http://127.0.0.1/manage/fit?context="+strconv.Itoa(ctx), nil)
		req.RemoteAddr = "127.0.0.1:1234"
		rt.Handler().ServeHTTP(rec, req)
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("context=%d: %v %s", ctx, err, rec.Body.Bytes())
		}
		return rec.Code, body
	}
	const whole = 262144
	for _, ctx := range []int{1, 2, 4096, whole - 1, whole} {
		if code, body := get(ctx); code != 200 || body["context"] != float64(ctx) {
			t.Errorf("context=%d: %d %v", ctx, code, body["error"])
		}
	}
	code, body := get(whole + 1)
	msg, _ := body["error"].(map[string]any)["message"].(string)
	if code != 400 || !strings.Contains(msg, "262144") {
		t.Errorf("context=%d: %d %v", whole+1, code, body)
	}
}
