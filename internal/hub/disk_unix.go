//go:build unix

package hub

import (
	"errors"
	"fmt"
	"math"
	"os"
	"syscall"
)

// freeSpace is the space an unprivileged user may still write in dir.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("hub: free space of %s: %w", dir, err)
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	return int64(min(free, math.MaxInt64)), nil
}

// lock takes an exclusive lock on path for this process; the system drops
// it if the process dies, so a crash never leaves a stale lock.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrBusy, path)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
