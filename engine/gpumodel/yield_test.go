package gpumodel

import (
	"slices"
	"testing"

	"petal/engine"
)

// TestDecodeYields stops a device loop through Yield: the token in flight
// is handed over and left unfed, so the sequence goes on from it with
// Forward (as a batched scheduler does) to the tokens of an unbroken loop.
func TestDecodeYields(t *testing.T) {
	m, _ := openTinyA(t)
	prompt := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3}
	const steps = 9
	want, _, ws := run(t, m, engine.Decode{Prompt: prompt, MaxTokens: steps}, -1)
	ws.Close()

	for _, at := range []int{0, 2, 5} {
		asked := 0
		got, st, seq := run(t, m, engine.Decode{Prompt: prompt, MaxTokens: steps, Yield: func() bool {
			asked++
			return asked > at
		}}, -1)
		if len(got) != at+1 || st.Tokens != at+1 {
			t.Errorf("yield after %d: %d tokens, want %d", at, len(got), at+1)
		}
		if seq.Len() != len(prompt)+at {
			t.Errorf("yield after %d: the sequence holds %d tokens, want %d (the last pick unfed)", at, seq.Len(), len(prompt)+at)
		}
		logits := make([]float32, m.cfg.Vocab)
		for len(got) < steps {
			if err := seq.Forward(got[len(got)-1:], logits); err != nil {
				t.Fatal(err)
			}
			got = append(got, engine.Argmax(logits))
		}
		seq.Close()
		if !slices.Equal(got, want) {
			t.Errorf("yield after %d, then Forward: %v, unbroken %v", at, got, want)
		}
	}
}
