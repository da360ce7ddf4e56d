package tokenizer

import (
	"errors"
	"fmt"

	"petal/engine/damaged"
)

// The error vocabulary of the package; callers test with errors.Is.
var (
	// ErrBadTokenizer marks every error caused by a malformed tokenizer
	// file, so a caller can offer to fetch it again; it is also
	// [damaged.Err].
	ErrBadTokenizer = damaged.New("tokenizer: bad tokenizer file")
	// ErrUnsupported marks a well-formed tokenizer file that needs a
	// feature this package does not implement.
	ErrUnsupported = errors.New("tokenizer: unsupported tokenizer")
)

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadTokenizer, fmt.Sprintf(format, args...))
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}
