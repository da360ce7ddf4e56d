package cli

import (
	"slices"

	"petal/engine/spec"
)

// benchSpeculative is an arm decoded with the MTP head's drafts, against
// the same context's arm without them.
type benchSpeculative struct {
	Mode string `json:"mode"`
	// Decode is the drafting arm's decode, its tokens included.
	Decode benchDecode `json:"decode"`
	// Acceptance is Accepted over Drafted (0 without drafts).
	Acceptance float64 `json:"acceptance"`
	// Speedup is the drafting arm's decode tokens per second over the
	// plain arm's.
	Speedup float64 `json:"speedup"`
	// SameTokens reports whether both arms decoded the same tokens, as
	// greedy decoding with drafts must.
	SameTokens bool `json:"same_tokens"`
}

// benchSpeculativeArm runs the drafting arm (args, its process's flags)
// and compares it with plain, the same context's decode without drafts.
func benchSpeculativeArm(args []string, mode spec.Mode, plain benchDecode) (*benchSpeculative, error) {
	var a benchArm
	if err := runArm(args, &a); err != nil {
		return nil, err
	}
	s := &benchSpeculative{Mode: mode.String(), Decode: a.Decode, SameTokens: slices.Equal(a.Decode.TokenIDs, plain.TokenIDs)}
	if d := a.Decode; d.Drafted > 0 {
		s.Acceptance = float64(d.Accepted) / float64(d.Drafted)
	}
	if plain.TokS > 0 {
		s.Speedup = a.Decode.TokS / plain.TokS
	}
	return s, nil
}
