package doctor

import "syscall"

// osVersion is "macOS <product version>" from the kernel.
func osVersion() string {
	v, err := syscall.Sysctl("kern.osproductversion")
	if err != nil {
		return "macOS (version unknown: " + err.Error() + ")"
	}
	return "macOS " + v
}
