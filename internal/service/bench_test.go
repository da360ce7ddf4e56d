package service

import (
	"context"
	"strings"
	"testing"

	"petal/engine/reply"
)

// BenchmarkGenerate measures the service's own cost per generated token
// (sampling, detokenizing, stop strings, reply parsing, events) on a
// scripted model that costs almost nothing, without HTTP.
func BenchmarkGenerate(b *testing.B) {
	text := "Let me see.</think>\n\n" + strings.Repeat("word ", 37)
	for _, mode := range []string{"greedy", "sampled"} {
		b.Run("sampling="+mode, func(b *testing.B) {
			s, _ := scripted(b, Options{}, constant(text))
			req := &Request{Messages: user("bench"), Stop: []string{"never appears"}}
			if mode == "greedy" {
				zero := 0.0
				req.Sampling.Temperature = &zero
			}
			tokens := 0
			for b.Loop() {
				sum, err := s.Generate(context.Background(), req, func(reply.Event) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				tokens += sum.CompletionTokens
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/tok")
		})
	}
}
