package engine

import (
	"errors"
	"fmt"
)

// Row is one sequence's share of a batched step: Tokens are appended to
// Seq and their logits written to Out, exactly as Seq.Forward(Tokens, Out)
// would (Out: every position, the last one, or none). A row of one token
// is a decode step; a row of several is a piece of a prompt (chunked
// prefill) or draft tokens to verify (Out for every position).
type Row struct {
	Seq    Sequence
	Tokens []int
	Out    []float32
}

// Stepper is a Model that runs several sequences' rows as one step: each
// weight is read once for all rows, while attention and DeltaNet use each
// row's own sequence. A row's logits do not depend on the rows beside it:
// on the CPU backend they are bit for bit those of Forward alone.
type Stepper interface {
	// Step runs rows, whose sequences are this model's and distinct. On
	// an error no row's sequence is to be trusted: a caller closes them.
	Step(rows []Row) error
}

// ErrStepRows reports a batched step's rows that break Step's rules.
var ErrStepRows = errors.New("engine: bad rows for a step")

// CheckRows validates rows for a Step on a model of vocab logits: at
// least one row, each with tokens in the vocabulary, a fitting logits
// buffer and its own sequence.
func CheckRows(rows []Row, vocab int) error {
	if len(rows) == 0 {
		return fmt.Errorf("%w: none", ErrStepRows)
	}
	seen := make(map[Sequence]bool, len(rows))
	for i, r := range rows {
		if r.Seq == nil || len(r.Tokens) == 0 {
			return fmt.Errorf("%w: row %d has no sequence or no tokens", ErrStepRows, i)
		}
		if seen[r.Seq] {
			return fmt.Errorf("%w: row %d repeats a sequence", ErrStepRows, i)
		}
		seen[r.Seq] = true
		if err := CheckTokens(r.Tokens, vocab); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		if _, err := CheckOut(r.Out, len(r.Tokens), vocab); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	return nil
}

// Step runs rows as one step of m when m is a Stepper, else one Forward
// after another, which gives the same logits at no saving.
func Step(m Model, rows []Row) error {
	if s, ok := m.(Stepper); ok {
		return s.Step(rows)
	}
	if err := CheckRows(rows, m.Config().Vocab); err != nil {
		return err
	}
	for _, r := range rows {
		if err := r.Seq.Forward(r.Tokens, r.Out); err != nil {
			return err
		}
	}
	return nil
}
