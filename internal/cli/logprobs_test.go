package cli

import (
	"math"
	"slices"
	"strconv"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// completeLogprobs posts a completion request and returns its choice's
// logprobs: the JSON reply's, or the streamed chunks' joined (each carries
// its own tokens').
func (s *demoServer) completeLogprobs(t *testing.T, body string, stream bool) openai.LogprobResult {
	t.Helper()
	var got openai.LogprobResult
	for _, r := range s.completions(t, body, stream) {
		for _, c := range r.Choices {
			l := c.LogProbs
			got.Tokens = append(got.Tokens, l.Tokens...)
			got.TokenLogprobs = append(got.TokenLogprobs, l.TokenLogprobs...)
			got.TopLogprobs = append(got.TopLogprobs, l.TopLogprobs...)
			got.TextOffset = append(got.TextOffset, l.TextOffset...)
		}
	}
	return got
}

// sameLogprobs reports how a differs from b beyond tol ("" if not).
func sameLogprobs(a, b openai.LogprobResult, tol float64) string {
	if !slices.Equal(a.Tokens, b.Tokens) || len(a.TokenLogprobs) != len(b.TokenLogprobs) || len(a.TopLogprobs) != len(b.TopLogprobs) {
		return "tokens differ"
	}
	for i := range a.TokenLogprobs {
		if math.Abs(float64(a.TokenLogprobs[i]-b.TokenLogprobs[i])) > tol {
			return "token " + strconv.Itoa(i) + "'s logprob differs"
		}
		if len(a.TopLogprobs[i]) != len(b.TopLogprobs[i]) {
			return "token " + strconv.Itoa(i) + "'s alternatives differ"
		}
		for k, v := range a.TopLogprobs[i] {
			w, ok := b.TopLogprobs[i][k]
			if !ok || math.Abs(float64(v-w)) > tol {
				return "token " + strconv.Itoa(i) + "'s alternative " + strconv.Quote(k) + " differs"
			}
		}
	}
	return ""
}

// Through petal serve: logprobs (and 5 alternatives) of a greedy and a
// sampled completion on the sim equal the CPU backend's within 1e-3,
// streamed and not, and the sim reads no logits back for them (only the
// sampler's small records, which petal_logits_readback_bytes_total does not
// count).
func TestServeLogprobsMatchCPU(t *testing.T) {
	skipDemoOnSim(t)
	base := `"prompt":"` + decodePrompt + `","max_tokens":` + strconv.Itoa(decodeTokens) + `,"logprobs":5`
	bodies := map[string]string{
		"greedy":  `{` + base + `,"temperature":0}`,
		"sampled": `{` + base + `,"temperature":0.7,"top_p":0.9,"seed":7}`,
	}
	cpuSrv := startDemoServe(t, "cpu")
	sim := startDemoServe(t, "sim")
	const readback = "petal_logits_readback_bytes_total"
	before := sim.metric(t, readback)
	for name, body := range bodies {
		want := cpuSrv.completeLogprobs(t, body, false)
		if len(want.Tokens) != decodeTokens || len(want.TopLogprobs[0]) == 0 || want.TextOffset[1] <= want.TextOffset[0] {
			t.Fatalf("%s on the CPU: %+v", name, want)
		}
		for _, stream := range []bool{false, true} {
			got := sim.completeLogprobs(t, body, stream)
			if d := sameLogprobs(got, want, 1e-3); d != "" {
				t.Errorf("%s (stream %v): %s: sim %+v, CPU %+v", name, stream, d, got, want)
			}
		}
	}
	if after := sim.metric(t, readback); after != before {
		t.Errorf("logprobs requests read %v bytes of logits back", after-before)
	}
}
