package engine

// HiddenSequence is a Sequence that can report the final hidden states of
// the tokens it appends (after the final norm: what the LM head reads),
// from which embeddings are pooled: len(tokens)*Hidden floats into out.
type HiddenSequence interface {
	Sequence
	Hidden(tokens []int, out []float32) error
}

// HiddenModel is a Model whose sequences report hidden states. The CPU
// backend's is; the GPU backends keep the states on the device and read
// back only logits.
type HiddenModel interface {
	Model
	NewHiddenSequence() (HiddenSequence, error)
}
