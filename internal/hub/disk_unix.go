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

// diskFull reports whether err is the file system's "no space" or "quota
// exceeded".
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// lock takes an exclusive lock on path for this process; the system drops
// it if the process dies, so a crash never leaves a stale lock. unlock
// removes the file while still holding it, so no pull leaves one behind;
// a process that opened the file before it was removed finds, once it has
// the lock, that the path no longer names what it locked, and tries again.
func lock(path string) (unlock func(), err error) {
	for range maxLockTries {
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
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return func() { os.Remove(path); f.Close() }, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("%w: %s keeps being replaced", ErrBusy, path)
}

// maxLockTries bounds lock's retries when the lock file is removed under it.
const maxLockTries = 8
