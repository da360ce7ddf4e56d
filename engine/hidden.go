package engine

// HiddenStater is a Sequence that can report the final hidden states of
// the tokens it appends (after the final norm: what the LM head reads),
// from which embeddings are pooled. The CPU backend's sequences are.
type HiddenStater interface {
	Hidden(tokens []int, out []float32) error
}
