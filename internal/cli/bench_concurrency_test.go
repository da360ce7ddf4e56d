package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/backend"
)

func TestParseConcurrency(t *testing.T) {
	got, err := parseConcurrency("1, 2,4,8")
	if err != nil || !slices.Equal(got, []int{1, 2, 4, 8}) {
		t.Errorf("1,2,4,8: %v %v", got, err)
	}
	for _, bad := range []string{"0", "9", "-1", "x", "2.5", "1,,2", "2,2", "1,2,"} {
		if got, err := parseConcurrency(bad); err == nil {
			t.Errorf("%q accepted as %v", bad, got)
		}
	}
}

// Bad --concurrency values are refused before any arm runs, as are a dry
// run with it and an arm of two stream counts.
func TestBenchConcurrencyRefused(t *testing.T) {
	saved := runArmProcess
	defer func() { runArmProcess = saved }()
	runArmProcess = func(args []string) ([]byte, error) {
		t.Errorf("an arm ran: %v", args)
		return nil, nil
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--concurrency", "0"}},
		{[]string{"--concurrency", "9"}},
		{[]string{"--concurrency", "two"}},
		{[]string{"--concurrency", "1,1"}},
		{[]string{"--concurrency", "2", "--dry-run"}},
		{[]string{"--concurrency", "1,2", "--arm", "--context", "8"}},
	} {
		args := append([]string{"bench", "--model", demoModel}, c.args...)
		err := Run(args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "concurrency") {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}

// On the demo model on the CPU backend, one and two streams: the report's
// fields, each stream's tokens and digest, and those tokens equal to the
// stream decoded alone and to the single-stream contract's arm (a batched
// step on the CPU gives each row the logits it has alone).
func TestBenchConcurrencyDemo(t *testing.T) {
	const steps = 6
	calls := armsInProcess(t)
	var out bytes.Buffer
	if err := Run([]string{"bench", "--model", demoModel, "--backend", "cpu", "--concurrency", "1,2", "--context", "40", "--steps", "6"}, &out); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Arms []struct {
			Decode map[string]json.RawMessage `json:"decode"`
		} `json:"concurrency_arms"`
	}
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil || len(raw.Arms) != 2 {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, k := range []string{"steps", "wall_secs", "aggregate_tok_s", "per_stream_tok_s", "aggregate_vs_one_stream", "step_wall_secs", "streams", "solo_token_digest", "same_tokens_as_solo"} {
		for i, a := range raw.Arms {
			if _, ok := a.Decode[k]; !ok {
				t.Errorf("arm %d's decode lacks %q", i, k)
			}
		}
	}
	var rep benchConcurrencyReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(*calls) != 2 || rep.SchemaVersion != benchSchemaVersion || rep.Backend != "cpu" || rep.PromptKind != benchPromptKind {
		t.Errorf("%d arm processes, report %s", len(*calls), out.String())
	}

	var solo bytes.Buffer
	if err := Run([]string{"bench", "--arm", "--model", demoModel, "--context", "40", "--steps", "6"}, &solo); err != nil {
		t.Fatal(err)
	}
	var contract benchArm
	if err := json.Unmarshal(solo.Bytes(), &contract); err != nil {
		t.Fatal(err)
	}
	for i, a := range rep.Arms {
		d := a.Decode
		if a.Context != 40 || a.Concurrency != i+1 || d.Steps != steps || len(d.StepWallSecs) != steps || len(d.Streams) != a.Concurrency {
			t.Errorf("arm %d: %+v", i, a)
			continue
		}
		if !d.SameTokensAsSolo || d.SoloTokenDigest != contract.Decode.TokenDigest {
			t.Errorf("arm %d: same_tokens_as_solo %v, solo digest %s, the contract's %s", i, d.SameTokensAsSolo, d.SoloTokenDigest, contract.Decode.TokenDigest)
		}
		for j, s := range d.Streams {
			if s.FirstTokenID != contract.Prefill.FirstTokenID || !slices.Equal(s.TokenIDs, contract.Decode.TokenIDs) || s.TokenDigest != benchDigest(s.TokenIDs) {
				t.Errorf("arm %d stream %d: %+v, the contract's first %d ids %v", i, j, s, contract.Prefill.FirstTokenID, contract.Decode.TokenIDs)
			}
		}
		var sum float64
		for _, w := range d.StepWallSecs {
			sum += w
		}
		want := float64(a.Concurrency*steps) / sum
		if !(a.Prefill.WallSecs > 0 && a.Prefill.TokS > 0) || !near(d.WallSecs, sum) || !near(d.AggregateTokS, want) || !near(d.PerStreamTokS, want/float64(a.Concurrency)) {
			t.Errorf("arm %d timings: prefill %+v, decode wall %v (steps sum %v), aggregate %v (want %v), per stream %v", i, a.Prefill, d.WallSecs, sum, d.AggregateTokS, want, d.PerStreamTokS)
		}
		if !near(d.AggregateVsOne, d.AggregateTokS/rep.Arms[0].Decode.AggregateTokS) {
			t.Errorf("arm %d: aggregate_vs_one_stream %v", i, d.AggregateVsOne)
		}
	}
}

func near(a, b float64) bool { return a > 0 && b > 0 && a/b > 1-1e-9 && a/b < 1+1e-9 }

// skewStep is a model whose batched step changes the second row's logits,
// as a backend whose rows leak into each other would.
type skewStep struct{ engine.Model }

func (m skewStep) Step(rows []engine.Row) error {
	if err := engine.Step(m.Model, rows); err != nil {
		return err
	}
	if len(rows) > 1 {
		out := rows[1].Out
		out[(engine.Argmax(out)+1)%len(out)] += 1e6
	}
	return nil
}

// same_tokens_as_solo is false when a stream's tokens depend on its
// neighbours, and true for the same model alone.
func TestBenchStreamsDetectsSkew(t *testing.T) {
	m, err := backend.Open("cpu", benchFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		n    int
		want bool
	}{{1, true}, {3, false}} {
		a, err := benchStreams(skewStep{m}, 12, c.n, 3)
		if err != nil {
			t.Fatal(err)
		}
		if a.Decode.SameTokensAsSolo != c.want {
			t.Errorf("%d streams: same_tokens_as_solo %v, want %v (streams %+v, solo %s)", c.n, a.Decode.SameTokensAsSolo, c.want, a.Decode.Streams, a.Decode.SoloTokenDigest)
		}
	}
}
