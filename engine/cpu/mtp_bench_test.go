package cpu

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"petal/engine"
	"petal/engine/spec"
)

// BenchmarkSpeculativeDemo decodes the demo's greedy replies to the card
// prompts (models/demo/testdata/mtp_report.json) without drafts, with a
// draft at every step and with the policy, alternating the modes each
// iteration so that the machine's load falls on all three alike; it
// reports each mode's decode tokens per second (the first token, which the
// prompt's pass yields, left out) and the drafts' acceptance.
func BenchmarkSpeculativeDemo(b *testing.B) {
	data, err := os.ReadFile(demoMTPReport)
	if err != nil {
		b.Fatal(err)
	}
	var rep struct {
		Card struct {
			Prompts []struct{ Prompt, Reply []int } `json:"prompts"`
		} `json:"card"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		b.Fatal(err)
	}
	m, err := Open(demoDir)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	modes := []spec.Mode{spec.Off, spec.Always, spec.Auto}
	mem := &spec.Memory{} // the policy's measures carry from reply to reply, as in the server
	secs := make([]float64, len(modes))
	tokens := make([]int, len(modes))
	drafted := make([]int, len(modes))
	accepted := make([]int, len(modes))
	for range b.N {
		for _, c := range rep.Card.Prompts {
			for mi, mode := range modes {
				seq, _ := m.NewSequence()
				var first time.Time
				n := 0
				st, err := engine.Run(context.Background(), seq, m.cfg.Vocab, &engine.Decode{
					Prompt: c.Prompt, MaxTokens: len(c.Reply), Speculate: mode, SpecMemory: mem,
					Token: func(int) (bool, error) {
						if n++; n == 1 {
							first = time.Now()
						}
						return false, nil
					},
				})
				secs[mi] += time.Since(first).Seconds()
				seq.Close()
				if err != nil {
					b.Fatal(err)
				}
				tokens[mi] += n - 1
				drafted[mi] += st.Drafted
				accepted[mi] += st.Accepted
			}
		}
	}
	for mi, mode := range modes {
		b.ReportMetric(float64(tokens[mi])/secs[mi], mode.String()+"_tok/s")
		if drafted[mi] > 0 {
			b.ReportMetric(float64(accepted[mi])/float64(drafted[mi]), mode.String()+"_acceptance")
		}
	}
}
