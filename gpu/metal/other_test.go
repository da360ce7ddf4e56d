//go:build !(darwin && arm64)

package metal

import (
	"errors"
	"testing"

	"petal/gpu"
)

func TestOpenRefusesNonMac(t *testing.T) {
	d, err := Open()
	if d != nil || !errors.Is(err, gpu.ErrUnsupported) {
		t.Fatalf("Open() = %v, %v; want nil, gpu.ErrUnsupported", d, err)
	}
}
