package sim

import "syscall"

// systemMemory is the machine's RAM, the sim's stand-in for a GPU working
// set.
func systemMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
