//go:build !darwin

package doctor

import (
	"os"
	"runtime"
	"strings"
)

// osVersion is the OS name and, on Linux, the kernel release.
func osVersion() string {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		return runtime.GOOS + " " + strings.TrimSpace(string(b))
	}
	return runtime.GOOS
}
