package grammar

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
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

// enums is an anyOf of k enums of n strings each, all alive after `"s`:
// k*n states.
func enums(k, n int) string {
	alts := make([]string, k)
	for i := range alts {
		vals := make([]string, n)
		for j := range vals {
			vals[j] = fmt.Sprintf(`"s%05d"`, i*n+j)
		}
		alts[i] = `{"enum":[` + strings.Join(vals, ",") + `]}`
	}
	return `{"anyOf":[` + strings.Join(alts, ",") + `]}`
}

// objects is an anyOf of k anyOfs of n objects, each with a string "a"
// and its own other property: k*n states inside "a"'s string.
func objects(k, n int) string {
	alts := make([]string, k)
	for i := range alts {
		objs := make([]string, n)
		for j := range objs {
			objs[j] = fmt.Sprintf(`{"type":"object","properties":{"a":{"type":"string"},"b%d":{"type":"integer"}},"required":["a"]}`, i*n+j)
		}
		alts[i] = `{"anyOf":[` + strings.Join(objs, ",") + `]}`
	}
	return `{"anyOf":[` + strings.Join(alts, ",") + `]}`
}

// BenchmarkMaskWorstCase measures one token's mask (Allowed) on issue 28's
// hostile schemas over Qwen3's vocabulary, at the deepest state each
// reaches: the exponential schemas merged to one state, the unmergeable
// one at an eighth of MaxStates, MaxStates enum values alive at once,
// MaxAlternatives strings of distinct maxLengths, free JSON and a string
// beside a string const walking most or every token, and 4,000 nested
// objects. ns/op, B/op and allocs/op are per token; states is how many the
// matcher holds.
func BenchmarkMaskWorstCase(b *testing.B) {
	_, v := qwen3(b)
	mask := make([]uint64, (v.Size()+63)/64)
	for _, c := range []struct {
		name, schema, prefix string
	}{
		{"branches-2", branches(2, false), strings.Repeat("[", 2*MaxDepth-2)},
		{"branches-256", branches(256, false), strings.Repeat("[", 2*MaxDepth-2)},
		// 2^7 readings: Qwen's "[[[" would pass MaxStates from 2^8.
		{"distinct-2", branches(2, true), strings.Repeat("[", 7)},
		{"enums-1024", enums(4, 256), `"s`},
		{"objects-1024", objects(4, 256), `{"a":"x`},
		{"objects-1024-after", objects(4, 256), `{"a":"x"`},
		{"free-json", `{}`, `{"a":[`},
		{"bounded-strings-256", boundedStrings(MaxAlternatives, 1000), `"Hello`},
		{"string-or-const", `{"anyOf":[{"type":"string","maxLength":1000},{"const":"x"}]}`, `"`},
		{"nested-4000", deepSchema(4000), `{`},
	} {
		b.Run("schema="+c.name, func(b *testing.B) {
			g, err := Compile([]byte(c.schema))
			if err != nil {
				b.Fatal(err)
			}
			m := g.Matcher(v)
			if err := m.Advance([]byte(c.prefix), false); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Allowed(context.Background(), mask); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(m.states)), "states")
		})
	}
}
