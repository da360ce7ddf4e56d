package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

const benchFixture = "../../engine/testdata/fixtures/tiny-a"

// armsInProcess makes petal bench run its arms in this process instead of
// child processes until t ends; each arm's arguments are appended to
// *calls.
func armsInProcess(t *testing.T) (calls *[][]string) {
	saved := runArmProcess
	t.Cleanup(func() { runArmProcess = saved })
	calls = new([][]string)
	runArmProcess = func(args []string) ([]byte, error) {
		*calls = append(*calls, args)
		var out bytes.Buffer
		err := Run(args, &out)
		return out.Bytes(), err
	}
	return calls
}

// dryRunTextAndJSON runs petal bench --dry-run with args twice: its text,
// and its report from --json.
func dryRunTextAndJSON(t *testing.T, args ...string) (string, dryRunReport) {
	t.Helper()
	args = append([]string{"bench", "--dry-run"}, args...)
	var text, js bytes.Buffer
	if err := Run(args, &text); err != nil {
		t.Fatal(err)
	}
	if err := Run(append(args, "--json"), &js); err != nil {
		t.Fatal(err)
	}
	var rep dryRunReport
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, js.String())
	}
	return text.String(), rep
}

// The synthetic prompt is the reference engine's: a u32 wrapping multiply
// by 2654435761, then mod vocab.
func TestBenchPrompt(t *testing.T) {
	got := benchPrompt(4, 248320)
	// 0; 2654435761 mod 248320; (2*2654435761 mod 2^32) mod 248320; ...
	want := []int{0, 2654435761 % 248320, (2 * 2654435761 % (1 << 32)) % 248320, (3 * 2654435761 % (1 << 32)) % 248320}
	if !slices.Equal(got, want) {
		t.Errorf("prompt %v, want %v", got, want)
	}
}

// FNV-1a 64 written out byte by byte, against the hash/fnv digest.
func TestBenchDigest(t *testing.T) {
	if got := benchDigest(nil); got != "cbf29ce484222325" {
		t.Errorf("empty digest %s, want the offset basis", got)
	}
	ids := []int{7, 300, 65536}
	h := uint64(0xcbf29ce484222325)
	for _, id := range ids {
		for _, b := range []byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)} {
			h ^= uint64(b)
			h *= 0x100000001b3
		}
	}
	if got, want := benchDigest(ids), fmt.Sprintf("%016x", h); got != want {
		t.Errorf("digest %s, want %s", got, want)
	}
}

// One arm in process on the CPU and on the sim: the JSON fields, the
// token count, and the same greedy tokens (hence digest) on both
// backends; then the parent, with arms run in process, collects them.
func TestBenchArms(t *testing.T) {
	arm := func(backend string) benchArm {
		var out bytes.Buffer
		if err := Run([]string{"bench", "--arm", "--model", benchFixture, "--backend", backend, "--context", "40", "--steps", "5"}, &out); err != nil {
			t.Fatal(err)
		}
		var a benchArm
		if err := json.Unmarshal(out.Bytes(), &a); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		if a.Context != 40 || a.Decode.Steps != 5 || len(a.Decode.TokenIDs) != 5 || len(a.Decode.StepWallSecs) != 5 {
			t.Errorf("%s arm: %+v", backend, a)
		}
		if !(a.Prefill.WallSecs > 0 && a.Prefill.TokS > 0 && a.Decode.WallSecs > 0 && a.Decode.TokS > 0) {
			t.Errorf("%s arm timings: %+v", backend, a)
		}
		if a.Decode.TokenDigest != benchDigest(a.Decode.TokenIDs) {
			t.Errorf("%s digest %s does not match its ids", backend, a.Decode.TokenDigest)
		}
		return a
	}
	cpu, sim := arm("cpu"), arm("sim")
	if cpu.Prefill.FirstTokenID != sim.Prefill.FirstTokenID || cpu.Decode.TokenDigest != sim.Decode.TokenDigest {
		t.Errorf("cpu tokens %d %v, sim %d %v", cpu.Prefill.FirstTokenID, cpu.Decode.TokenIDs, sim.Prefill.FirstTokenID, sim.Decode.TokenIDs)
	}

	calls := armsInProcess(t)
	var out bytes.Buffer
	if err := Run([]string{"bench", "--model", benchFixture, "--contexts", "5,33", "--steps", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(*calls) != 2 || rep.SchemaVersion != 1 || rep.PromptKind != benchPromptKind || len(rep.Arms) != 2 || rep.Arms[0].Context != 5 || rep.Arms[1].Context != 33 {
		t.Errorf("%d arm processes, report %s", len(*calls), out.String())
	}
	for _, bad := range [][]string{
		{"bench", "--contexts", "0"},
		{"bench", "--contexts", "x"},
		{"bench", "--backend", "gpu", "--model", benchFixture},
		{"bench", "--arm", "--contexts", "4,5", "--model", benchFixture},
	} {
		if err := Run(bad, &out); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The dry run keeps its decode lines and adds bytes moved and a prefill
// chunk, at a bandwidth of choice.
func TestBenchDryRunPrefill(t *testing.T) {
	var out bytes.Buffer
	if err := Run([]string{"bench", "--dry-run", "--context", "4096", "--chunk", "64", "--bandwidth", "400"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"position 4096", "bytes moved:", "bound at 400 GB/s", "moved at 400 GB/s", "prefill chunk of 64 tokens after position 4096", "prompt tokens/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "546 GB/s") {
		t.Errorf("--bandwidth did not replace the default bandwidths:\n%s", out.String())
	}
}

// --json gives the dry run's figures as JSON, equal to the text's.
func TestBenchDryRunJSON(t *testing.T) {
	text, rep := dryRunTextAndJSON(t, "--context", "256", "--chunk", "64")
	d, p := rep.Decode, rep.Prefill
	if d.Position != 256 || p.Tokens != 64 || d.Dispatches < 1 || p.Dispatches <= d.Dispatches || len(d.Rates) != 2 || len(p.Rates) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, want := range []string{
		fmt.Sprintf("dispatches:           %d\n", d.Dispatches),
		fmt.Sprintf("dependency levels:    %d\n", p.Levels),
		fmt.Sprintf("bytes moved:          %d ", p.BytesMoved),
		fmt.Sprintf("moved at 546 GB/s:    %.1f tokens/s", d.Rates[0].MovedTokS),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q (from the JSON):\n%s", want, text)
		}
	}
	if want := 546e9 / float64(d.BytesMoved); math.Abs(d.Rates[0].MovedTokS-want) > 1e-9*want {
		t.Errorf("moved rate %v, want %v", d.Rates[0].MovedTokS, want)
	}
}

// The dry run reports the batched decode step of 1 to benchMaxConcurrency
// rows: one row is the decode step's traffic, more rows move more (each
// its cache, and its weight reads while they run side by side), and the
// rows' aggregate rate is at least one row's and never more than rows
// times it.
func TestBenchDryRunBatched(t *testing.T) {
	text, rep := dryRunTextAndJSON(t, "--context", "4096", "--bandwidth", "400")
	if len(rep.Batched) != benchMaxConcurrency {
		t.Fatalf("%d batched steps, want %d", len(rep.Batched), benchMaxConcurrency)
	}
	one := rep.Batched[0]
	if one.Rows != 1 || one.BytesMoved != rep.Decode.BytesMoved {
		t.Errorf("one row moves %d bytes, the decode step %d", one.BytesMoved, rep.Decode.BytesMoved)
	}
	for i, b := range rep.Batched {
		if b.Rows != i+1 || len(b.Rates) != 1 || b.Dispatches < one.Dispatches || b.CommandBuffers < 1 {
			t.Fatalf("batched step %d: %+v", i, b)
		}
		if i == 0 {
			continue
		}
		prev := rep.Batched[i-1]
		if b.BytesMoved <= one.BytesMoved || b.Rates[0].MovedTokS < one.Rates[0].MovedTokS*(1-1e-9) || b.Rates[0].MovedTokS > float64(b.Rows)*one.Rates[0].MovedTokS*(1+1e-9) {
			t.Errorf("%d rows move %d bytes at %.1f tok/s after %d rows' %d at %.1f", b.Rows, b.BytesMoved, b.Rates[0].MovedTokS, prev.Rows, prev.BytesMoved, prev.Rates[0].MovedTokS)
		}
		line := fmt.Sprintf("%4d  %15d  %10d  %6d  %16.3f  %18.1f\n", b.Rows, b.CommandBuffers, b.Dispatches, b.Levels, float64(b.BytesMoved)/1e9, b.Rates[0].MovedTokS)
		if !strings.Contains(text, line) {
			t.Errorf("text lacks %q:\n%s", line, text)
		}
	}
}

// At every context up to the model's last position, the dry run's largest
// prefill, decode and batched decode command buffers stay within the bound on the base M1
// (250 ms at 2.6 TFLOPS and 68 GB/s), reported under max_command_buffer
// beside every field the report had.
func TestBenchDryRunBounded(t *testing.T) {
	for _, ctx := range []int{0, 32768, 131072, 262144} {
		var js bytes.Buffer
		if err := Run([]string{"bench", "--dry-run", "--json", "--context", fmt.Sprint(ctx)}, &js); err != nil {
			t.Fatalf("context %d: %v", ctx, err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(js.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		for part, keys := range map[string][]string{
			"decode_step":   {"position", "dispatches", "dependency_levels", "weight_bytes", "bytes_moved", "rates", "host_us_per_step", "allocs_per_step", "max_command_buffer"},
			"prefill_chunk": {"position", "tokens", "dispatches", "dependency_levels", "weight_bytes", "bytes_moved", "rates", "command_buffers", "max_command_buffer"},
		} {
			var fields map[string]any
			if err := json.Unmarshal(raw[part], &fields); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if _, ok := fields[k]; !ok {
					t.Errorf("context %d: %s lacks %q", ctx, part, k)
				}
			}
		}
		var rep dryRunReport
		if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		works := map[string]dryRunWork{"decode": rep.Decode.MaxCommandBuffer, "prefill": rep.Prefill.MaxCommandBuffer}
		for _, b := range rep.Batched {
			works[fmt.Sprintf("batched step of %d rows", b.Rows)] = b.MaxCommandBuffer
		}
		for part, w := range works {
			est := max(float64(w.Flops)/2.6e12, float64(w.Bytes)/68e9) * 1000
			if w.Flops <= 0 || w.Bytes <= 0 || math.Abs(w.EstMsM1-est) > 1e-9*est || w.EstMsM1 > 250 {
				t.Errorf("context %d: the largest %s command buffer %+v (%.1f ms on the M1), bound 250 ms", ctx, part, w, est)
			}
		}
		if last := 262144; rep.Decode.Position != min(ctx, last-1) || rep.Prefill.Position+rep.Prefill.Tokens > last {
			t.Errorf("context %d: decode at %d, prefill after %d", ctx, rep.Decode.Position, rep.Prefill.Position)
		}
	}
}
