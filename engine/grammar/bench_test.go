package grammar

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
)

// Qwen3.6's vocabulary has 248,320 ids; the repo keeps Qwen3's (151,669)
// only, so the benchmark also runs on that vocabulary grown to Qwen3.6's
// size with tokens made as BPE makes them, by merging two existing ones,
// keeping the share of tokens that hold a quote (the ones the mask walks
// inside strings) at the base vocabulary's.
const qwen36Vocab = 248_320

func grownVocab(b *testing.B) *Vocab {
	tok, _ := qwen3(b)
	base := tok.MaxID() + 1
	rng := rand.New(rand.NewPCG(3, 6))
	merged := make([][]byte, qwen36Vocab-base)
	pick := func() []byte {
		for {
			id := rng.IntN(base)
			if bs, ok := tok.Bytes(id); ok && !tok.IsSpecial(id) {
				return bs
			}
		}
	}
	quoted := 0
	for id := range base {
		if bs, _ := tok.Bytes(id); bytes.IndexByte(bs, '"') >= 0 {
			quoted++
		}
	}
	share := float64(quoted) / float64(base)
	for i := 0; i < len(merged); {
		m := append(append([]byte(nil), pick()...), pick()...)
		if bytes.IndexByte(m, '"') >= 0 && rng.Float64() >= share {
			continue
		}
		merged[i] = m
		i++
	}
	return NewVocab(qwen36Vocab, func(id int) ([]byte, bool) {
		if id >= base {
			return merged[id-base], true
		}
		if tok.IsSpecial(id) {
			return nil, false
		}
		return tok.Bytes(id)
	}, []int{eosID})
}

// BenchmarkAllowed measures the mask of one decode step at the states a
// structured reply passes through.
func BenchmarkAllowed(b *testing.B) {
	_, qwen := qwen3(b)
	vocabs := []struct {
		name string
		v    *Vocab
	}{{"qwen3-151669", qwen}, {"grown-248320", grownVocab(b)}}
	g, err := Compile([]byte(schemas[0].schema))
	if err != nil {
		b.Fatal(err)
	}
	for _, voc := range vocabs {
		mask := make([]uint64, (voc.v.Size()+63)/64)
		for _, c := range []struct {
			name, prefix string
			g            *Grammar
		}{
			{"start", ``, g},
			{"key", `{"na`, g},
			{"string", `{"name":"Ann`, g},
			{"number", `{"name":"Ann","age":4`, g},
			{"free-key", `{"`, JSONObject()},
		} {
			b.Run("vocab="+voc.name+"/state="+c.name, func(b *testing.B) {
				m := c.g.Matcher(voc.v)
				if err := m.Advance([]byte(c.prefix), false); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					m.Allowed(context.Background(), mask)
				}
			})
		}
	}
}
