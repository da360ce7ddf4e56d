package sample

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// FuzzNext feeds arbitrary logits and settings: the sampler either returns
// an id it may sample or an error, and never panics.
func FuzzNext(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64}, 1.0, 0, 1.0, 0.0, 0.0, 1.0, uint64(1))
	f.Add([]byte{0, 0, 128, 255, 0, 0, 192, 127, 0, 0, 0, 0}, 0.5, 2, 0.5, 0.1, 1.5, 1.3, uint64(2))
	f.Fuzz(func(t *testing.T, raw []byte, temp float64, topK int, topP, minP, presence, rep float64, seed uint64) {
		n := len(raw) / 4
		if n == 0 {
			return
		}
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := Params{Temperature: temp, TopK: topK, TopP: topP, MinP: minP, PresencePenalty: presence,
			RepetitionPenalty: rep, Seed: &seed}
		s, err := New(p, Vocab{Size: n, TokenizerSize: max(1, n-1)}, []int{0})
		if err != nil {
			if p.Validate() == nil {
				t.Fatalf("valid params %+v rejected: %v", p, err)
			}
			return
		}
		for range 3 {
			row := append([]float32(nil), logits...)
			id, err := s.Next(row)
			if err != nil {
				return
			}
			if id < 0 || id >= max(1, n-1) {
				t.Fatalf("id %d outside [0, %d)", id, max(1, n-1))
			}
		}
	})
}

// FuzzStopper checks that a text cut in two pieces stops like the whole and
// that no stop string is ever emitted.
func FuzzStopper(f *testing.F) {
	f.Add("hello </end> world", "</end>", "lo", 7)
	f.Add("aaab", "aab", "b", 2)
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, cut int) {
		stops := []string{stop1, stop2}
		whole, err := NewStopper(stops)
		if err != nil {
			return
		}
		split, _ := NewStopper(stops)
		cut = min(max(cut, 0), len(text))
		wantText, wantStop := whole.Push(text)
		if !wantStop {
			wantText += whole.Flush()
		}
		got, stop := split.Push(text[:cut])
		if !stop {
			more, s2 := split.Push(text[cut:])
			got, stop = got+more, s2
		}
		if !stop {
			got += split.Flush()
		}
		if got != wantText || stop != wantStop {
			t.Fatalf("cut %d: got %q %v, whole %q %v", cut, got, stop, wantText, wantStop)
		}
		for _, st := range stops {
			if st != "" && strings.Contains(got, st) {
				t.Fatalf("emitted %q contains stop %q", got, st)
			}
		}
	})
}
