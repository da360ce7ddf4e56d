package sample

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkNext samples from full-width Qwen3.6 rows (248320 logits,
// 248077 sampleable) under each selection path, on a peaked row like a
// language model's and on a flat one (the worst case for top-p alone).
func BenchmarkNext(b *testing.B) {
	const size, tokenizerSize = 248320, 248077
	r := rand.New(rand.NewPCG(1, 1))
	flat := make([]float32, size)
	peaked := make([]float32, size)
	for i := range flat {
		flat[i] = float32(r.NormFloat64() * 2)
		peaked[i] = float32(r.NormFloat64() * 1.5)
	}
	for range 50 {
		peaked[r.IntN(tokenizerSize)] += 15 + 5*r.Float32()
	}
	work := make([]float32, size)
	cases := []struct {
		name string
		p    Params
	}{
		{"mode=greedy", Params{TopP: 1, RepetitionPenalty: 1}},
		{"mode=card_thinking", PresetThinking.Card()},
		{"mode=top_p_only", Params{Temperature: 1, TopP: 0.95, RepetitionPenalty: 1}},
		{"mode=full", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
	}
	prompt := make([]int, 4096)
	for i := range prompt {
		prompt[i] = r.IntN(tokenizerSize)
	}
	for _, rows := range []struct {
		name string
		row  []float32
	}{{"row=peaked", peaked}, {"row=flat", flat}} {
		for _, c := range cases {
			b.Run(rows.name+"/"+c.name, func(b *testing.B) {
				c.p.Seed = seed(1)
				s, err := New(c.p, Vocab{Size: size, TokenizerSize: tokenizerSize}, prompt)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					copy(work, rows.row)
					if _, err := s.Next(work); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
