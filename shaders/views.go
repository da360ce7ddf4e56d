package shaders

import (
	"fmt"

	"petal/gpu"
)

// The one vocabulary every op checks its views with: a viewBytes names a
// view and the bytes the op needs of it (f32 counts floats), requireViews
// checks a list of them, requireView one with an alignment of its own.

// requireView checks that v holds bytes bytes at an offset aligned to align.
func requireView(op, what string, v View, bytes, align int) error {
	switch {
	case v.Buf == nil:
		return fmt.Errorf("%w: shaders: %s: %s has no buffer", gpu.ErrInvalid, op, what)
	case v.Off < 0 || v.Off%align != 0:
		return fmt.Errorf("%w: shaders: %s: %s offset %d is not a multiple of %d", gpu.ErrInvalid, op, what, v.Off, align)
	case bytes < 0 || bytes > v.Buf.Len()-v.Off:
		return fmt.Errorf("%w: shaders: %s: %s needs %d bytes at offset %d of a %d-byte buffer", gpu.ErrInvalid, op, what, bytes, v.Off, v.Buf.Len())
	}
	return nil
}

// viewBytes names a view and the bytes an op needs of it.
type viewBytes struct {
	what  string
	v     View
	bytes int
}

// f32 is the viewBytes of n float32s.
func f32(what string, v View, n int) viewBytes { return viewBytes{what, v, 4 * n} }

// requireViews checks views in order with requireView at offsetAlign.
func requireViews(op string, views []viewBytes) error {
	for _, v := range views {
		if err := requireView(op, v.what, v.v, v.bytes, offsetAlign); err != nil {
			return err
		}
	}
	return nil
}
