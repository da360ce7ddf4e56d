package engine

import "io"

// StateSaver is a Sequence whose caches can be written out, so that a
// prefix cache can keep them on disk across restarts.
type StateSaver interface {
	// SaveState writes the caches in the backend's own layout; the
	// StateLoader of the same model reads them back.
	SaveState(w io.Writer) error
}

// StateLoader is a Model that restores sequences StateSaver wrote.
type StateLoader interface {
	// StateClass names the numerics of a saved state (the backend and the
	// KV cache's precision): a state is only loaded by a model of the same
	// class, as another backend's rounding would change answers.
	StateClass() string
	// LoadState reads the state of a sequence after tokens tokens and
	// returns that sequence. It reads exactly what SaveState wrote, never
	// more, and refuses a stream too short for tokens tokens.
	LoadState(r io.Reader, tokens int) (Sequence, error)
}
