package gpumodel

import (
	"slices"
	"testing"

	"petal/engine"
	"petal/engine/sample"
)

// A request with a logit bias draws on the device (Sampling.Bias), greedy
// or sampled with penalties, and gets the CPU backend's tokens from its
// host loop with the CPU sampler biased alike, reading no logits back. The
// bias bans the unbiased reply's first token, so a device that ignored it
// would start with that token.
func TestDecodeBias(t *testing.T) {
	m, c := openTinyA(t)
	v := m.cfg.Vocab
	prompt := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3}
	const steps = 9 // more than tokenRing, so slots are reused

	plain, _, cs := run(t, c, engine.Decode{Prompt: prompt, MaxTokens: steps}, -1)
	cs.Close()
	// Assigned in order: a later id that equals an earlier one overrides
	// it, and the ban comes last.
	bias := sample.LogitBias{}
	bias[prompt[2]] = 1.5 // a prompt id: the bias comes before the penalties
	bias[plain[1]] = 2.5
	bias[v-1] = 3
	bias[plain[0]] = -sample.MaxLogitBias

	seed := uint64(11)
	for _, tc := range []struct {
		name   string
		params sample.Params
	}{
		{"greedy", sample.Params{TopP: 1, RepetitionPenalty: 1, Seed: &seed}},
		{"sampled", sample.Params{Temperature: 0.8, TopK: 20, TopP: 0.95, PresencePenalty: 1.5, RepetitionPenalty: 1.1, Seed: &seed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sampler := func() *sample.Sampler {
				sp, err := sample.New(tc.params, sample.Vocab{Size: v}, prompt)
				if err == nil {
					err = sp.SetLogitBias(bias)
				}
				if err != nil {
					t.Fatal(err)
				}
				return sp
			}
			want, _, cs := run(t, c, engine.Decode{Prompt: prompt, MaxTokens: steps, Picker: sampler()}, -1)
			cs.Close()
			got, st, gs := run(t, m, engine.Decode{
				Prompt: prompt, MaxTokens: steps, Picker: sampler(),
				Sampling: &engine.Sampling{Params: tc.params, Prompt: prompt, Bias: bias},
			}, -1)
			gs.Close()
			if !slices.Equal(got, want) {
				t.Errorf("GPU sampler %v, CPU backend %v", got, want)
			}
			if st.LogitsReadBytes != 0 {
				t.Errorf("%d logits bytes read back", st.LogitsReadBytes)
			}
			if slices.Contains(got, plain[0]) {
				t.Errorf("picked the banned id %d: %v", plain[0], got)
			}
		})
	}
}
