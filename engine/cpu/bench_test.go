package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"petal/engine/checkpoint/checkpointtest"
)

// BenchmarkQMV measures the quantized matrix-vector product at the 35B
// model's common shapes; bytes/s counts the packed weights, scales and
// biases read.
func BenchmarkQMV(b *testing.B) {
	for _, c := range []struct{ rows, cols, bits int }{
		{2048, 2048, 4}, {8192, 2048, 4}, {2048, 4096, 4}, {256, 2048, 8},
	} {
		b.Run(fmt.Sprintf("rows=%d/cols=%d/bits=%d", c.rows, c.cols, c.bits), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			w := make([]float32, c.rows*c.cols)
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			codes, sc, bi := checkpointtest.Quantize(w, c.cols, c.bits, 64)
			m := &matrix{rows: c.rows, cols: c.cols, bits: c.bits, group: 64, words: codes, scales: sc, biases: bi}
			x := make([]float32, c.cols)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			out := make([]float32, c.rows)
			work := newScratch()
			b.SetBytes(int64(4*len(codes) + 2*len(sc) + 2*len(bi)))
			b.ReportAllocs()
			for b.Loop() {
				m.mul(work, 0, x, 1, out)
			}
		})
	}
}

// BenchmarkDecode measures one decode step (one token, last-position
// logits) after a 64-token prompt on each fixture. GB/s counts the weight
// bytes a step reads (checkpoint.Model.DecodeWeightBytes).
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"tiny-a", "real-heads"} {
		b.Run("fixture="+name, func(b *testing.B) {
			m, err := Open(fixturesDir + "/" + name)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			seq, _ := m.NewSequence()
			logits := make([]float32, m.cfg.Vocab)
			if err := seq.Forward(randomTokens(64, m.cfg.Vocab, 1), logits); err != nil {
				b.Fatal(err)
			}
			bytes := m.ckpt.DecodeWeightBytes()
			b.SetBytes(bytes)
			b.ReportAllocs()
			next := 1
			for b.Loop() {
				if err := seq.Forward([]int{next}, logits); err != nil {
					b.Fatal(err)
				}
				next = (next + 1) % m.cfg.Vocab
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
