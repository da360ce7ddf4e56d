package fit

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// macMemory is this Mac's physical memory in bytes (sysctl hw.memsize).
func macMemory() (int64, error) {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0, err
	}
	if n == 0 || n > math.MaxInt64 {
		return 0, fmt.Errorf("fit: hw.memsize is %d", n)
	}
	return int64(n), nil
}
