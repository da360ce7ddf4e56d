package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/engine/backend"
	"petal/engine/checkpoint"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/reftest"
)

// TestLogitsSimAnyLayout: `petal logits --backend sim` runs checkpoints
// as MLX writes them, which it used to refuse or fail on: data at an odd
// file offset (refused as corrupt), and [1,1] bf16 scales that leave later
// codes off an 8-byte boundary (the GPU prefill failed, exit 1). It says
// once what it copied, and the logits match the CPU backend's on the same
// folder.
func TestLogitsSimAnyLayout(t *testing.T) {
	odd := t.TempDir()
	if err := checkpointtest.RewriteMLX(filepath.Join(reftest.Dir(), "tiny-a"), odd, 1); err != nil {
		t.Fatal(err)
	}
	small := t.TempDir()
	o := checkpointtest.Tiny()
	o.MLX = true
	if err := checkpointtest.Write(small, o); err != nil {
		t.Fatal(err)
	}
	ids := []string{"5", "17", "3", "40", "2", "9"}
	for name, dir := range map[string]string{"odd data offset": odd, "[1,1] scales": small} {
		t.Run(name, func(t *testing.T) {
			var notice bytes.Buffer
			backend.CopyNotice = &notice
			t.Cleanup(func() { backend.CopyNotice = os.Stderr })
			logits := map[string][]float32{}
			for _, backend := range []string{"cpu", "sim"} {
				out := filepath.Join(t.TempDir(), backend+".f32")
				args := []string{"logits", "--model", dir, "--tokens", strings.Join(ids, ","), "--out", out, "--backend", backend}
				if err := Run(args, &bytes.Buffer{}); err != nil {
					t.Fatalf("--backend %s refused a valid checkpoint: %v", backend, err)
				}
				data, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i+4 <= len(data); i += 4 {
					logits[backend] = append(logits[backend], math.Float32frombits(binary.LittleEndian.Uint32(data[i:])))
				}
			}
			if len(logits["sim"]) != len(logits["cpu"]) || len(logits["cpu"]) == 0 {
				t.Fatalf("%d sim logits, %d cpu", len(logits["sim"]), len(logits["cpu"]))
			}
			worst := 0.0
			for i, c := range logits["cpu"] {
				worst = max(worst, math.Abs(float64(logits["sim"][i]-c)))
			}
			// The sim's KV cache is fp16, the CPU's fp32: on the fixtures
			// that moves logits by under 0.003 (engine/gpumodel
			// TestFixtures).
			if worst > simVsCPUTolerance {
				t.Errorf("max |sim - cpu| = %g, tolerance %g", worst, simVsCPUTolerance)
			}
			msg := notice.String()
			if strings.Count(msg, "copied ") != 1 || !strings.Contains(msg, "MB of misaligned tensors; `petal pull --import "+dir+"` stores an aligned copy") {
				t.Errorf("startup notice %q", msg)
			}
		})
	}
}

// simVsCPUTolerance bounds |sim - cpu| logits on the tiny checkpoints.
const simVsCPUTolerance = 0.01

// TestFitCountsCopies: `petal fit --model DIR` reports the bytes a folder
// in MLX's layout would copy at load, in JSON and as a row of the text.
func TestFitCountsCopies(t *testing.T) {
	dir := t.TempDir()
	if err := checkpointtest.RewriteMLX(filepath.Join(reftest.Dir(), "tiny-a"), dir, 3); err != nil {
		t.Fatal(err)
	}
	want, err := checkpoint.MisalignedBytes(dir)
	if err != nil || want == 0 {
		t.Fatalf("MisalignedBytes = %d, %v", want, err)
	}
	var js, text bytes.Buffer
	if err := Run([]string{"fit", "--model", dir, "--memory-gb", "32", "--context", "4096", "--json"}, &js); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Copied int64 `json:"misaligned_copy_bytes"`
	}
	if err := json.Unmarshal(js.Bytes(), &r); err != nil || r.Copied != want {
		t.Errorf("fit --json: misaligned_copy_bytes %d (%v), want %d", r.Copied, err, want)
	}
	if err := Run([]string{"fit", "--model", dir, "--memory-gb", "32", "--context", "4096"}, &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "copies of misaligned weights (`petal pull --import DIR` stores them aligned)") {
		t.Errorf("fit output has no row for the copies:\n%s", text.String())
	}
}
