package damaged_test

import (
	"errors"
	"fmt"
	"testing"

	"petal/engine/damaged"
)

func TestNewIsErr(t *testing.T) {
	a, b := damaged.New("a: bad file"), damaged.New("b: bad file")
	wrapped := fmt.Errorf("reading x: %w: tensor y", a)
	if !errors.Is(wrapped, damaged.Err) || !errors.Is(wrapped, a) {
		t.Errorf("errors.Is(%q, damaged.Err / a) = false", wrapped)
	}
	if errors.Is(wrapped, b) {
		t.Errorf("errors.Is(%q, b) = true: two markers are one", wrapped)
	}
	if a.Error() != "a: bad file" {
		t.Errorf("Error() = %q, want the text unchanged", a.Error())
	}
	if errors.Is(errors.New("a: bad file"), damaged.Err) {
		t.Error("an unmarked error with the same text is marked")
	}
}
