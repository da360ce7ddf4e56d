package engine

// Drafter is a Sequence whose model has a draft head, its multi-token-
// prediction (MTP) layer: from the sequence's last final hidden state and
// the token picked after it, the head proposes the token after that, and
// one Forward of the sequence over [picked, draft] verifies the proposal
// (docs/speculative.md).
type Drafter interface {
	Sequence
	// SetDrafting turns the head on or off for the sequence and reports
	// whether it is on: false when the model has no head. On, every
	// Forward and Step keeps for the head what it needs of their tokens;
	// off, the head's state is dropped and the sequence computes exactly
	// as one of a model without a head.
	SetDrafting(on bool) bool
	// Draft takes next, the token picked after the sequence's last and not
	// yet fed, runs the head over every position it has not seen and
	// writes into out (vocab floats) its logits for the token after next.
	Draft(next int, out []float32) error
	// KeepForRewind makes the next Forward or Step of the sequence keep
	// what Rewind needs to take back any of its tokens but the first.
	KeepForRewind()
	// Rewind takes back the last n tokens of the last Forward or Step,
	// which KeepForRewind preceded: the sequence's caches, its DeltaNet
	// states included, and its head's are then exactly those of a
	// sequence that never saw them.
	Rewind(n int) error
}
