package shaders_test

import (
	"errors"
	"strings"
	"testing"

	"petal/gpu"
	"petal/shaders"
)

// TestCheckAligned: what a model checks once at load, instead of every
// dispatch: codes at multiples of 8 (qmv reads uint2), scales and biases
// at multiples of 4 (Metal's binding offsets).
func TestCheckAligned(t *testing.T) {
	for _, c := range []struct {
		codes, scales, biases int
		bad                   string
	}{
		{0, 0, 0, ""},
		{8, 4, 12, ""},
		{4, 0, 0, "codes offset 4"},
		{12, 0, 0, "codes offset 12"},
		{8, 2, 0, "scales offset 2"},
		{8, 4, 6, "biases offset 6"},
	} {
		m := shaders.QMatrix{Codes: shaders.View{Off: c.codes}, Scales: shaders.View{Off: c.scales}, Biases: shaders.View{Off: c.biases}}
		err := m.CheckAligned()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad) || !errors.Is(err, gpu.ErrInvalid)):
			t.Errorf("%+v: error %v, want one naming %q", c, err, c.bad)
		}
	}
}
