package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"

	"petal/engine"
	"petal/engine/spec"
)

func init() {
	commands["generate"] = command{
		summary: "greedy-decode from token ids; prints {\"tokens\":[...]}",
		run:     runGenerate,
	}
}

// defaultGenerateTokens is how many tokens petal generate decodes unless
// told: enough to compare a continuation with the reference's.
const defaultGenerateTokens = 16

func runGenerate(args []string, stdout io.Writer) error {
	fs := newFlags("generate", os.Stderr)
	dir, backend := modelFlags(fs, "checkpoint folder")
	tokens := fs.String("tokens", "", "comma-separated prompt token ids")
	maxTokens := fs.Int("max-tokens", defaultGenerateTokens, "tokens to generate at most")
	specFlag := speculativeFlag(fs, spec.Auto)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	mode, err := parseSpeculative(*specFlag)
	if err != nil {
		return err
	}
	ids, err := parseTokens(*tokens)
	if err != nil {
		return err
	}
	if *maxTokens < 1 {
		return errors.New("--max-tokens must be at least 1")
	}
	return onSequence(*dir, *backend, func(m engine.Model, seq engine.Sequence) error {
		cfg := m.Config()
		var out []int
		st, err := engine.Run(context.Background(), seq, cfg.Vocab, &engine.Decode{
			Prompt: ids, MaxTokens: *maxTokens, Speculate: mode,
			Token: func(id int) (bool, error) {
				out = append(out, id)
				return slices.Contains(cfg.EOS, id), nil
			},
		})
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(struct {
			Tokens []int `json:"tokens"`
			// Drafted and Accepted count the MTP head's drafts and those
			// that stood, when it drafted.
			Drafted  int `json:"drafted,omitempty"`
			Accepted int `json:"accepted,omitempty"`
		}{out, st.Drafted, st.Accepted})
	})
}
