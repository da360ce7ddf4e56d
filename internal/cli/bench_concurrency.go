package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"petal/engine"
	"petal/internal/runtime"
)

// benchMaxConcurrency is the most streams an arm of --concurrency decodes
// together: the batch sizes 1-8 issue 29 plans the batched step for.
const benchMaxConcurrency = 8

// benchConcurrencyReport is petal bench --concurrency's JSON output: the
// reference contract per stream (the same synthetic prompt for every
// stream, one warm-up, --steps measured decode steps, a digest per stream),
// one arm per context and stream count.
type benchConcurrencyReport struct {
	SchemaVersion int            `json:"schema_version"`
	Backend       string         `json:"backend"`
	Model         string         `json:"model"`
	PromptKind    string         `json:"prompt_kind"`
	DigestKind    string         `json:"digest_kind"`
	Arms          []benchConcArm `json:"concurrency_arms"`
}

// benchConcArm is one context at one stream count, measured in a process
// of its own.
type benchConcArm struct {
	Context     int `json:"context"`
	Concurrency int `json:"concurrency"`
	// Prefill is all the streams' prompts, a piece of each per step.
	Prefill benchConcPrefill `json:"prefill"`
	Decode  benchConcDecode  `json:"decode"`
}

type benchConcPrefill struct {
	WallSecs float64 `json:"wall_secs"`
	// TokS counts every stream's prompt tokens.
	TokS float64 `json:"tok_s"`
}

type benchConcDecode struct {
	Steps    int     `json:"steps"`
	WallSecs float64 `json:"wall_secs"`
	// AggregateTokS is every stream's tokens over the wall time, and
	// PerStreamTokS one stream's.
	AggregateTokS float64 `json:"aggregate_tok_s"`
	PerStreamTokS float64 `json:"per_stream_tok_s"`
	// AggregateVsOne is AggregateTokS over that of the report's arm of one
	// stream at the same context, when it has one.
	AggregateVsOne float64 `json:"aggregate_vs_one_stream,omitempty"`
	// StepWallSecs is each batched step's time, the host's argmax of
	// every row included.
	StepWallSecs []float64         `json:"step_wall_secs"`
	Streams      []benchConcStream `json:"streams"`
	// SoloTokenDigest is the digest of one stream decoded alone, by the
	// same steps of one row, in the same process after the measurement;
	// SameTokensAsSolo says whether every stream's first token and
	// decoded tokens equal the solo stream's.
	SoloTokenDigest  string `json:"solo_token_digest"`
	SameTokensAsSolo bool   `json:"same_tokens_as_solo"`
}

// benchConcStream is one stream's tokens: the prefill's pick, then one per
// measured step.
type benchConcStream struct {
	FirstTokenID int    `json:"first_token_id"`
	TokenDigest  string `json:"token_digest"`
	TokenIDs     []int  `json:"token_ids"`
}

// parseConcurrency reads --concurrency: distinct stream counts in
// [1, benchMaxConcurrency].
func parseConcurrency(s string) ([]int, error) {
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > benchMaxConcurrency {
			return nil, fmt.Errorf("--concurrency: %q is not a stream count in [1,%d]", p, benchMaxConcurrency)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--concurrency: %d is given twice", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchConcurrency runs an arm process per context and stream count
// (armArgs gives an arm's arguments for a context, without the count) and
// sets each arm's ratio to the one-stream arm of its context.
func benchConcurrency(dir, backend string, ctxs, streams []int, armArgs func(int) []string) (benchConcurrencyReport, error) {
	rep := benchConcurrencyReport{SchemaVersion: benchSchemaVersion, Backend: backend, Model: dir, PromptKind: benchPromptKind, DigestKind: benchDigestKind}
	if len(ctxs)*len(streams) > benchMaxArms {
		return rep, fmt.Errorf("%d contexts at %d stream counts are %d arms, at most %d", len(ctxs), len(streams), len(ctxs)*len(streams), benchMaxArms)
	}
	for _, c := range ctxs {
		first := len(rep.Arms)
		for _, n := range streams {
			var a benchConcArm
			if err := runArm(append(armArgs(c), "--concurrency", strconv.Itoa(n)), &a); err != nil {
				return rep, fmt.Errorf("arm at context %d, %d streams: %w", c, n, err)
			}
			rep.Arms = append(rep.Arms, a)
		}
		arms := rep.Arms[first:]
		if i := slices.IndexFunc(arms, func(a benchConcArm) bool { return a.Concurrency == 1 }); i >= 0 {
			for j := range arms {
				arms[j].Decode.AggregateVsOne = arms[j].Decode.AggregateTokS / arms[i].Decode.AggregateTokS
			}
		}
	}
	return rep, nil
}

// benchConcurrentArm loads the model and measures n streams on it.
func benchConcurrentArm(dir, backend string, context, n, steps int) (benchConcArm, error) {
	m, err := runtime.OpenModel(dir, backend)
	if err != nil {
		return benchConcArm{}, err
	}
	defer m.Close()
	return benchStreams(m, context, n, steps)
}

// benchStreams warms up on the exact shape (n streams prefilled, then
// benchWarmupSteps steps), measures n fresh streams, then decodes one
// stream alone to compare their tokens with.
func benchStreams(m engine.Model, context, n, steps int) (benchConcArm, error) {
	cfg := m.Config()
	if p := cfg.MaxPositions; p > 0 && context+steps+1 > p {
		return benchConcArm{}, fmt.Errorf("context %d plus %d steps exceeds the model's %d positions", context, steps, p)
	}
	prompt := benchPrompt(context, cfg.Vocab)
	if _, err := benchBatch(m, prompt, n, benchWarmupSteps); err != nil {
		return benchConcArm{}, fmt.Errorf("warm-up: %w", err)
	}
	run, err := benchBatch(m, prompt, n, steps)
	if err != nil {
		return benchConcArm{}, err
	}
	solo, err := benchBatch(m, prompt, 1, steps)
	if err != nil {
		return benchConcArm{}, fmt.Errorf("the solo stream: %w", err)
	}
	a := benchConcArm{Context: context, Concurrency: n}
	a.Prefill.WallSecs = run.prefill.Seconds()
	a.Prefill.TokS = float64(n*context) / a.Prefill.WallSecs
	d := &a.Decode
	d.Steps = steps
	var wall time.Duration
	for _, st := range run.steps {
		d.StepWallSecs = append(d.StepWallSecs, st.Seconds())
		wall += st
	}
	d.WallSecs = wall.Seconds()
	d.AggregateTokS = float64(n*steps) / d.WallSecs
	d.PerStreamTokS = float64(steps) / d.WallSecs
	d.SoloTokenDigest = benchDigest(solo.ids[0])
	d.SameTokensAsSolo = true
	for i := range n {
		d.Streams = append(d.Streams, benchConcStream{FirstTokenID: run.first[i], TokenDigest: benchDigest(run.ids[i]), TokenIDs: run.ids[i]})
		if run.first[i] != solo.first[0] || !slices.Equal(run.ids[i], solo.ids[0]) {
			d.SameTokensAsSolo = false
		}
	}
	return a, nil
}

// batchRun is what benchBatch measured and decoded.
type batchRun struct {
	prefill time.Duration
	// steps are the decode steps' times, each from its rows' tokens set
	// to every row's pick made.
	steps []time.Duration
	// first is each stream's pick from its prompt, ids its picks of the
	// decode steps.
	first []int
	ids   [][]int
}

// benchBatch prefills n fresh sequences with prompt, a piece of
// engine.PrefillPiece tokens of each per step, then runs steps greedy
// decode steps: each is one engine.Step over the n sequences' rows,
// whose logits the host turns into each row's next token.
func benchBatch(m engine.Model, prompt []int, n, steps int) (batchRun, error) {
	vocab := m.Config().Vocab
	seqs := make([]engine.Sequence, 0, n)
	defer func() {
		for _, s := range seqs {
			s.Close()
		}
	}()
	for range n {
		s, err := m.NewSequence()
		if err != nil {
			return batchRun{}, err
		}
		seqs = append(seqs, s)
	}
	logits := make([]float32, n*vocab)
	out := func(i int) []float32 { return logits[i*vocab : (i+1)*vocab] }
	rows := make([]engine.Row, n)
	r := batchRun{first: make([]int, n), ids: make([][]int, n)}
	start := time.Now()
	for pos := 0; pos < len(prompt); pos += engine.PrefillPiece {
		end := min(pos+engine.PrefillPiece, len(prompt))
		for i, s := range seqs {
			rows[i] = engine.Row{Seq: s, Tokens: prompt[pos:end]}
			if end == len(prompt) {
				rows[i].Out = out(i)
			}
		}
		if err := engine.Step(m, rows); err != nil {
			return batchRun{}, fmt.Errorf("prefill: %w", err)
		}
	}
	for i := range n {
		r.first[i] = engine.Argmax(out(i))
	}
	r.prefill = time.Since(start)
	toks := make([]int, n)
	copy(toks, r.first)
	for range steps {
		t := time.Now()
		for i, s := range seqs {
			rows[i] = engine.Row{Seq: s, Tokens: toks[i : i+1], Out: out(i)}
		}
		if err := engine.Step(m, rows); err != nil {
			return batchRun{}, fmt.Errorf("decode: %w", err)
		}
		for i := range n {
			toks[i] = engine.Argmax(out(i))
			r.ids[i] = append(r.ids[i], toks[i])
		}
		r.steps = append(r.steps, time.Since(t))
	}
	return r, nil
}
