package gpumodel

import (
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/sample"
)

// Decode called directly (engine.Run sends such a request to its host
// loop) refuses what only the sampler can do: without Sampling the argmax
// would pick, ignoring a constraint's mask and reporting no logprobs. The
// refusal comes before the sequence takes the tail.
func TestDecodeRefusesWithoutSampling(t *testing.T) {
	m, _ := openTinyA(t)
	for _, tc := range []struct {
		name string
		d    engine.Decode
	}{
		{"constraint", engine.Decode{Constraint: &modConstraint{}}},
		{"logprobs", engine.Decode{Logprobs: func(sample.Logprobs) {}}},
	} {
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		tc.d.MaxTokens = 3
		tc.d.Token = func(int) (bool, error) { return false, nil }
		_, err = seq.(engine.Decoder).Decode(t.Context(), []int{5, 17, 300}, &tc.d)
		if err == nil || !strings.Contains(err.Error(), "needs Sampling") {
			t.Errorf("%s without Sampling: Decode = %v, want a refusal", tc.name, err)
		}
		if n := seq.Len(); n != 0 {
			t.Errorf("%s: the refused decode left %d tokens in the sequence", tc.name, n)
		}
		seq.Close()
	}
}
