// Package damaged holds the one marker for a model whose files are bad.
//
// Each parser of a model folder's files (safetensors headers, the
// checkpoint's config and tensors, tokenizer.json, the chat template) keeps
// its own sentinel, which names where the fault was found, and makes it with
// [New], so that errors.Is(err, [Err]) answers "is the model damaged?"
// whichever layer found it. The remedy is the same for all of them: download
// the model again. The UI shows that one remedy for the one marker.
package damaged

import "errors"

// Err marks every error caused by the contents of a model's files.
var Err = errors.New("the model's files are damaged")

// New returns a sentinel with the given text that is also [Err] under
// errors.Is; the text is kept as it is, so messages do not grow.
func New(text string) error { return &marked{text} }

type marked struct{ text string }

func (e *marked) Error() string { return e.text }
func (e *marked) Unwrap() error { return Err }
