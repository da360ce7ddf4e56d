package cpu

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/spec"
)

// mtpFixture is tools/mtpref's reference of the MTP layer on tiny-a.
const mtpFixture = "../testdata/mtp/tiny-a"

// mtpTolerance bounds |draft logit - reference|: the reference computes in
// float64 on the same dequantized weights.
const mtpTolerance = 1e-3

// openMTPFixture opens tiny-a with the reference's head in one folder.
func openMTPFixture(t testing.TB) (*Model, []int, []float32) {
	t.Helper()
	dir := t.TempDir()
	var ref struct {
		Base   string `json:"base_fixture"`
		Tokens []int  `json:"tokens"`
		Rows   int    `json:"rows"`
	}
	data, err := os.ReadFile(filepath.Join(mtpFixture, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(fixturesDir, filepath.Base(ref.Base))
	for _, src := range []string{base, mtpFixture} {
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
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.mtp == nil {
		t.Fatal("no head loaded")
	}
	raw, err := os.ReadFile(filepath.Join(mtpFixture, "mtp_logits.f32"))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(raw)/4)
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, want); err != nil {
		t.Fatal(err)
	}
	if len(want) != ref.Rows*m.cfg.Vocab || ref.Rows != len(ref.Tokens)-1 {
		t.Fatalf("reference of %d logits for %d rows of %d", len(want), ref.Rows, m.cfg.Vocab)
	}
	return m, ref.Tokens, want
}

// TestMTPMatchesReference: the head's draft logits at every position equal
// the numpy reference's (tools/mtpref), whether the head takes the
// positions one at a time after each token, or a prompt's worth at once
// (the tiled products) and then one at a time.
func TestMTPMatchesReference(t *testing.T) {
	m, tokens, want := openMTPFixture(t)
	v := m.cfg.Vocab
	for _, first := range []int{1, 3, 40} {
		seq, _ := m.NewSequence()
		s := seq.(*Sequence)
		if !s.SetDrafting(true) {
			t.Fatal("SetDrafting refused with a head")
		}
		if err := s.Forward(tokens[:first], nil); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, v)
		worst := 0.0
		for i := first - 1; i+1 < len(tokens); i++ {
			if i >= first {
				if err := s.Forward(tokens[i:i+1], nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Draft(tokens[i+1], out); err != nil {
				t.Fatal(err)
			}
			d := maxDiff(out, want[i*v:(i+1)*v])
			worst = max(worst, d)
			if d > mtpTolerance {
				t.Errorf("first %d: row %d: draft logits differ from the reference by %g", first, i, d)
			}
		}
		t.Logf("first %d tokens at once: max |draft logit - reference| = %.3g", first, worst)
	}
}

// TestMTPOffRunsAsBefore: a model with a head computes the logits of one
// without when its sequence does not draft, and drafting leaves the main
// model's logits untouched.
func TestMTPOffRunsAsBefore(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	dir := filepath.Join(fixturesDir, "tiny-a")
	plain, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	want := forward(t, plain, tokens)
	if d := maxDiff(forward(t, m, tokens), want); d != 0 {
		t.Errorf("head loaded, not drafting: logits differ by %g", d)
	}
	seq, _ := m.NewSequence()
	seq.(*Sequence).SetDrafting(true)
	got := make([]float32, len(tokens)*m.cfg.Vocab)
	if err := seq.Forward(tokens, got); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("drafting: logits differ by %g", d)
	}
	if (&Sequence{m: plain}).SetDrafting(true) {
		t.Error("SetDrafting on a model without a head reports on")
	}
}

// stateBytes is a sequence's saved caches.
func stateBytes(t *testing.T, s *Sequence) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.SaveState(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRewindIsExact: a verify step of [next, draft] taken back to its
// first token leaves the caches (KV rows, DeltaNet conv windows and
// recurrent states) bit for bit those of a sequence fed only those k, the
// logits of what follows and the head's next draft alike (a step of three
// tokens takes attention's three-query kernels, which round otherwise: one
// draft is what stays exact); on the fixture
// with a head and on the tiny checkpoint with its KV cache in half
// precision.
func TestRewindIsExact(t *testing.T) {
	fix, tokens, _ := openMTPFixture(t)
	o := checkpointtest.Tiny()
	dir := t.TempDir()
	if err := checkpointtest.Write(dir, o); err != nil {
		t.Fatal(err)
	}
	if err := checkpointtest.WriteMTP(dir, o); err != nil {
		t.Fatal(err)
	}
	half, err := OpenWith(dir, Options{HalfKV: true})
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	for name, m := range map[string]*Model{"tiny-a": fix, "tiny/halfkv": half} {
		v := m.cfg.Vocab
		prompt := make([]int, 9)
		for i := range prompt {
			prompt[i] = tokens[i] % v
		}
		verify := []int{tokens[9] % v, tokens[10] % v}
		after := tokens[12] % v
		for keep := 1; keep < len(verify); keep++ {
			a, _ := m.NewSequence()
			b, _ := m.NewSequence()
			sa, sb := a.(*Sequence), b.(*Sequence)
			sa.SetDrafting(true)
			sb.SetDrafting(true)
			draft := make([]float32, v)
			for _, s := range []*Sequence{sa, sb} {
				if err := s.Forward(prompt, nil); err != nil {
					t.Fatal(err)
				}
				if err := s.Draft(verify[0], draft); err != nil {
					t.Fatal(err)
				}
			}
			sa.KeepForRewind()
			if err := sa.Forward(verify, make([]float32, len(verify)*v)); err != nil {
				t.Fatal(err)
			}
			if err := sa.Rewind(len(verify)); err == nil {
				t.Errorf("%s: rewind past the verify step's first token allowed", name)
			}
			if err := sa.Rewind(len(verify) - keep); err != nil {
				t.Fatal(err)
			}
			if err := sb.Forward(verify[:keep], nil); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(sa.draft.hidden, sb.draft.hidden) {
				t.Errorf("%s: kept %d: head inputs differ by %g", name, keep, maxDiff(sa.draft.hidden, sb.draft.hidden))
			}
			if sa.Len() != sb.Len() || !bytes.Equal(stateBytes(t, sa), stateBytes(t, sb)) {
				t.Errorf("%s: kept %d of %d: caches differ from a sequence fed %d", name, keep, len(verify), keep)
			}
			if err := sa.Rewind(1); err == nil {
				t.Errorf("%s: a second rewind allowed", name)
			}
			da, db := make([]float32, v), make([]float32, v)
			if err := sa.Draft(after, da); err != nil {
				t.Fatal(err)
			}
			if err := sb.Draft(after, db); err != nil {
				t.Fatal(err)
			}
			la, lb := make([]float32, v), make([]float32, v)
			if err := sa.Forward([]int{after}, la); err != nil {
				t.Fatal(err)
			}
			if err := sb.Forward([]int{after}, lb); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(da, db) || !bitsEqual(la, lb) {
				t.Errorf("%s: kept %d: next draft differs by %g, next logits by %g", name, keep, maxDiff(da, db), maxDiff(la, lb))
			}
		}
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestVerifyStepIsForward: the verify step's logits at both positions are
// bit for bit those of feeding the two tokens one at a time, so greedy
// speculation picks exactly what plain decoding picks.
func TestVerifyStepIsForward(t *testing.T) {
	m, tokens, _ := openMTPFixture(t)
	v := m.cfg.Vocab
	prompt := tokens[:20]
	const n = 2
	verify := tokens[20 : 20+n]
	a, _ := m.NewSequence()
	b, _ := m.NewSequence()
	if err := a.Forward(prompt, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Forward(prompt, nil); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n*v)
	a.(*Sequence).KeepForRewind()
	if err := a.Forward(verify, got); err != nil {
		t.Fatal(err)
	}
	for i, id := range verify {
		want := make([]float32, v)
		if err := b.Forward([]int{id}, want); err != nil {
			t.Fatal(err)
		}
		if !bitsEqual(got[i*v:(i+1)*v], want) {
			t.Errorf("verify of %d: position %d differs from a decode step by %g", n, i, maxDiff(got[i*v:(i+1)*v], want))
		}
	}
}

// demoMTPReport is tools/demomodel/train_mtp.py's record of the demo's
// head on the card prompts: each prompt's greedy reply and, after each
// reply token, the head's greedy draft for the next.
const demoMTPReport = "../../models/demo/testdata/mtp_report.json"

// maxDraftMismatch is the share of the report's drafts the CPU head may
// draft otherwise: torch on the accelerator rounds differently, which can
// flip a near tie.
const maxDraftMismatch = 0.02

// TestDemoHeadDraftsAsTrained: the demo's trained head drafts on the CPU
// what train_mtp.py's torch head drafted on the card prompts (all but
// near ties), and the demo's greedy replies with drafts at every step are
// the report's.
func TestDemoHeadDraftsAsTrained(t *testing.T) {
	data, err := os.ReadFile(demoMTPReport)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Card struct {
			Prompts []struct {
				Prompt, Reply, Drafts []int
			} `json:"prompts"`
		} `json:"card"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	m, err := Open(demoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.mtp == nil {
		t.Fatal("the demo has no head")
	}
	v := m.cfg.Vocab
	out := make([]float32, v)
	total, differ, accepted := 0, 0, 0
	for _, c := range rep.Card.Prompts {
		prompt, reply, drafts := c.Prompt, c.Reply, c.Drafts
		seq, _ := m.NewSequence()
		s := seq.(*Sequence)
		s.SetDrafting(true)
		if err := s.Forward(prompt, nil); err != nil {
			t.Fatal(err)
		}
		for i, id := range reply {
			if err := s.Draft(id, out); err != nil {
				t.Fatal(err)
			}
			total++
			d := engine.Argmax(out)
			if d != drafts[i] {
				differ++
			}
			if i+1 < len(reply) && d == reply[i+1] {
				accepted++
			}
			if err := s.Forward([]int{id}, nil); err != nil {
				t.Fatal(err)
			}
		}
		got, st := greedyRun(t, m, prompt, len(reply), spec.Always)
		if !slices.Equal(got, reply) {
			t.Errorf("greedy reply with drafts %v, the report's %v", got, reply)
		}
		if st.Drafted == 0 {
			t.Error("no drafts")
		}
	}
	t.Logf("%d drafts, %d differ from torch's; %d of the next reply tokens drafted right", total, differ, accepted)
	if float64(differ) > maxDraftMismatch*float64(total) {
		t.Errorf("%d of %d drafts differ from the report's", differ, total)
	}
}
