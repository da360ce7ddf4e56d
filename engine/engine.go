package engine

import (
	"errors"
	"fmt"

	"petal/engine/checkpoint"
)

// Model is a loaded model on some backend.
type Model interface {
	// Config is the checkpoint's configuration.
	Config() *checkpoint.Config
	// NewSequence starts an empty sequence with its own caches.
	NewSequence() (Sequence, error)
	Close() error
}

// Sequence is one token sequence with its attention KV cache and DeltaNet
// state; tokens are appended by Forward.
type Sequence interface {
	// Forward appends tokens and computes their logits into out: out has
	// len(tokens)*vocab floats for every position, vocab floats for the
	// last position only, or none.
	Forward(tokens []int, out []float32) error
	// Len is the number of tokens processed so far.
	Len() int
	// Fork returns an independent copy of the sequence and its caches: the
	// prefix cache keeps forks at reusable boundaries (a DeltaNet state
	// cannot be rewound, only copied) and continues from them.
	Fork() (Sequence, error)
	// Bytes is the memory the sequence's caches hold.
	Bytes() int64
	// Close frees the sequence's state.
	Close() error
}

// The errors a backend's sequences report; callers test with errors.Is.
var (
	// ErrBadToken reports a token id outside the vocabulary.
	ErrBadToken = errors.New("token id outside the vocabulary")
	// ErrClosed reports a call on a sequence after its Close.
	ErrClosed = errors.New("sequence is closed")
)

// CheckTokens returns an error naming the first id outside [0, vocab).
func CheckTokens(tokens []int, vocab int) error {
	for i, t := range tokens {
		if t < 0 || t >= vocab {
			return fmt.Errorf("%w: token %d at index %d (vocabulary %d)", ErrBadToken, t, i, vocab)
		}
	}
	return nil
}

// CheckOut validates the logits buffer passed to Forward and reports
// whether it asks for every position.
func CheckOut(out []float32, tokens, vocab int) (all bool, err error) {
	switch len(out) {
	case tokens * vocab:
		return true, nil
	case vocab, 0:
		return false, nil
	}
	return false, fmt.Errorf("logits buffer of %d floats fits neither %d positions nor one of vocabulary %d", len(out), tokens, vocab)
}

// Argmax returns the index of the largest value (the first on ties).
func Argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
