//go:build !(darwin && arm64)

package metal

import (
	"fmt"

	"petal/gpu"
)

// Open fails off Apple silicon Macs; use petal/gpu/sim there.
func Open() (gpu.Device, error) {
	return nil, fmt.Errorf("%w: the Metal driver needs an Apple silicon Mac (use the sim backend)", gpu.ErrUnsupported)
}
