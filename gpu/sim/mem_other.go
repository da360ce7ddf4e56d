//go:build !linux

package sim

// systemMemory is unknown off Linux; 0 tells the memory-fit check so.
func systemMemory() uint64 { return 0 }
