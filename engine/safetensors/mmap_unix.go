//go:build unix

package safetensors

import (
	"os"
	"syscall"
)

// mapFile maps the whole file read-only and shared, so the page cache backs
// the weights and nothing is copied into the Go heap.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, corrupt("empty file")
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmap(b []byte) error { return syscall.Munmap(b) }
