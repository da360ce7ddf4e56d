package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// mtpFolder is tiny-a with tools/mtpref's head beside it, in a new folder.
func mtpFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, src := range []string{benchFixture, "../../engine/testdata/mtp/tiny-a"} {
		ents, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if n := e.Name(); filepath.Ext(n) == ".safetensors" || n == "config.json" || n == "model.safetensors.index.json" {
				b, err := os.ReadFile(filepath.Join(src, n))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return dir
}

// TestGenerateSpeculative: petal generate gives the same tokens with the
// head drafting at every step, with the policy and without it, and says
// how many drafts it verified.
func TestGenerateSpeculative(t *testing.T) {
	dir := mtpFolder(t)
	type result struct {
		Tokens            []int
		Drafted, Accepted int
	}
	gen := func(mode string) result {
		var out bytes.Buffer
		if err := Run([]string{"generate", "--model", dir, "--tokens", "462,313,419,8,260", "--max-tokens", "24", "--speculative", mode}, &out); err != nil {
			t.Fatal(err)
		}
		var r result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return r
	}
	off, on, auto := gen("off"), gen("on"), gen("auto")
	if len(off.Tokens) != 24 || !slices.Equal(on.Tokens, off.Tokens) || !slices.Equal(auto.Tokens, off.Tokens) {
		t.Errorf("off %v\n on %v\nauto %v", off.Tokens, on.Tokens, auto.Tokens)
	}
	if off.Drafted != 0 || on.Drafted != 23 {
		t.Errorf("drafted %d off, %d on (want 0 and one per token after the first)", off.Drafted, on.Drafted)
	}
	var out bytes.Buffer
	if err := Run([]string{"generate", "--model", dir, "--tokens", "1", "--speculative", "maybe"}, &out); err == nil {
		t.Error("--speculative maybe accepted")
	}
}

// TestBenchSpeculative: petal bench --speculative runs a drafting arm
// beside each plain one and reports its acceptance, speed over the plain
// arm's and that both decoded the same tokens.
func TestBenchSpeculative(t *testing.T) {
	dir := mtpFolder(t)
	calls := armsInProcess(t)
	var out bytes.Buffer
	if err := Run([]string{"bench", "--model", dir, "--contexts", "20", "--steps", "12", "--speculative", "on"}, &out); err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(*calls) != 2 || len(rep.Arms) != 1 || rep.Arms[0].Speculative == nil {
		t.Fatalf("%d arm processes, report %s", len(*calls), out.String())
	}
	a := rep.Arms[0]
	s := a.Speculative
	if !s.SameTokens || s.Mode != "on" || s.Decode.Drafted == 0 || a.Decode.Drafted != 0 || s.Speedup <= 0 {
		t.Errorf("speculative arm %+v against %+v", s, a.Decode)
	}
	if want := float64(s.Decode.Accepted) / float64(s.Decode.Drafted); s.Acceptance != want {
		t.Errorf("acceptance %v, want %v", s.Acceptance, want)
	}
}

// TestServeAppliesSpeculativeSetting: petal serve takes the saved
// speculative setting, --speculative wins over it, and a bad value, saved
// or given, is refused naming it.
func TestServeAppliesSpeculativeSetting(t *testing.T) {
	model := scriptedFolder(t, func(string) string { return "ok" })
	settings := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(settings, []byte(`{"speculative":"off"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	inForce := func(args ...string) any {
		base, _ := startServe(t, append([]string{"--model", model, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings}, args...)...)
		_, reply := call(t, "GET", base+"/manage/settings", "", "")
		return reply["in_force"].(map[string]any)["speculative"]
	}
	if got := inForce(); !reflect.DeepEqual(got, map[string]any{"value": "off", "source": "settings"}) {
		t.Errorf("saved off: in force %v", got)
	}
	if got := inForce("--speculative", "on"); !reflect.DeepEqual(got, map[string]any{"value": "on", "source": "flag"}) {
		t.Errorf("--speculative on over saved off: in force %v", got)
	}
	if err := serve(context.Background(), []string{"--model", model, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings, "--speculative", "maybe"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--speculative") {
		t.Errorf("--speculative maybe: %v", err)
	}
	if err := os.WriteFile(settings, []byte(`{"speculative":"sometimes"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := serve(context.Background(), []string{"--model", model, "--backend", "scripted", "--addr", "127.0.0.1:0", "--settings", settings}, io.Discard); err == nil || !strings.Contains(err.Error(), "speculative") {
		t.Errorf("a saved speculative of sometimes: %v", err)
	}
}
