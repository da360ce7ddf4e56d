package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/cpu"
	"petal/engine/reftest"
)

func tinyModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := checkpointtest.Write(dir, checkpointtest.Tiny()); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLogitsCommand(t *testing.T) {
	dir := tinyModel(t)
	out := filepath.Join(t.TempDir(), "logits.f32")
	if err := Run([]string{"logits", "--model", dir, "--tokens", "1, 2,3", "--out", out}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	vocab := checkpointtest.Tiny().Vocab
	if len(data) != 3*vocab*4 {
		t.Fatalf("wrote %d bytes, want 3 x %d floats", len(data), vocab)
	}
	m, err := cpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq, _ := m.NewSequence()
	want := make([]float32, 3*vocab)
	if err := seq.Forward([]int{1, 2, 3}, want); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])); got != w {
			t.Fatalf("float %d = %g, want %g", i, got, w)
		}
	}
}

func TestGenerateCommand(t *testing.T) {
	dir := tinyModel(t)
	var out bytes.Buffer
	if err := Run([]string{"generate", "--model", dir, "--tokens", "5,6,7", "--max-tokens", "6"}, &out); err != nil {
		t.Fatal(err)
	}
	var res struct{ Tokens []int }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	eos := map[int]bool{checkpointtest.Tiny().Vocab - 1: true, checkpointtest.Tiny().Vocab - 2: true}
	if n := len(res.Tokens); n == 0 || n > 6 || (n < 6 && !eos[res.Tokens[n-1]]) {
		t.Fatalf("tokens %v: want 6, or fewer ending at an eos id", res.Tokens)
	}
	if strings.Count(out.String(), "\n") != 1 {
		t.Errorf("output is not one JSON line: %q", out.String())
	}
}

func TestCommandErrors(t *testing.T) {
	dir := tinyModel(t)
	cases := map[string][]string{
		"no model":     {"generate", "--tokens", "1"},
		"no tokens":    {"generate", "--model", dir},
		"bad token":    {"generate", "--model", dir, "--tokens", "1,x"},
		"out of range": {"generate", "--model", dir, "--tokens", "1,99999"},
		"max tokens":   {"generate", "--model", dir, "--tokens", "1", "--max-tokens", "0"},
		"backend":      {"generate", "--model", dir, "--tokens", "1", "--backend", "tpu"},
		"missing dir":  {"logits", "--model", filepath.Join(dir, "nope"), "--tokens", "1", "--out", filepath.Join(t.TempDir(), "x")},
		"no out":       {"logits", "--model", dir, "--tokens", "1"},
		"stray arg":    {"logits", "--model", dir, "--tokens", "1", "--out", "x", "extra"},
		"unknown flag": {"logits", "--bogus"},
		"unknown cmd":  {"frobnicate"},
	}
	for name, args := range cases {
		if err := Run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// generate must stop at the first id of the config's top-level eos list;
// the fixture's eos ids were chosen to occur inside its greedy runs.
func TestGenerateStopsAtEOS(t *testing.T) {
	dir := "../../engine/testdata/fixtures/tiny-a"
	ref, err := reftest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, g := range ref.Greedy {
		if g.FirstEOS == nil {
			continue
		}
		ids := make([]string, len(g.Prompt))
		for i, id := range g.Prompt {
			ids[i] = strconv.Itoa(id)
		}
		var out bytes.Buffer
		if err := Run([]string{"generate", "--model", dir, "--tokens", strings.Join(ids, ","), "--max-tokens", "24"}, &out); err != nil {
			t.Fatal(err)
		}
		var res struct{ Tokens []int }
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if want := g.Tokens[:*g.FirstEOS+1]; !slices.Equal(res.Tokens, want) {
			t.Errorf("generate from %d tokens = %v, want %v (stopping at eos)", len(g.Prompt), res.Tokens, want)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no greedy run of the fixture reaches an eos id")
	}
}

// The sim backend runs the GPU path: it must generate what the CPU does on
// a fixture, through the same command.
func TestGenerateSimBackend(t *testing.T) {
	dir := "../../engine/testdata/fixtures/tiny-a"
	var cpuOut, simOut bytes.Buffer
	args := []string{"generate", "--model", dir, "--tokens", "7,8,9,10", "--max-tokens", "5"}
	if err := Run(args, &cpuOut); err != nil {
		t.Fatal(err)
	}
	if err := Run(append(args, "--backend", "sim"), &simOut); err != nil {
		t.Fatal(err)
	}
	if cpuOut.String() != simOut.String() {
		t.Errorf("sim generated %s, cpu %s", simOut.String(), cpuOut.String())
	}
}

func TestBenchDryRun(t *testing.T) {
	var out bytes.Buffer
	if err := Run([]string{"bench", "--dry-run", "--context", "100"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Qwen3.6-35B-A3B", "position 100", "dispatches:", "dependency levels:", "weight bytes read:    16", "bound at 546 GB/s", "bound at 614 GB/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := Run([]string{"bench", "--dry-run", "--model", "../../engine/testdata/fixtures/real-heads"}, &out); err != nil || !strings.Contains(out.String(), "real-heads") {
		t.Errorf("dry run of a fixture's config: %v\n%s", err, out.String())
	}
}
