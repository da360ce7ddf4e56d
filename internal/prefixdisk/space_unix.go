//go:build unix

package prefixdisk

import (
	"errors"
	"math"
	"os"
	"syscall"
)

// freeBytes is what an unprivileged user may still write under dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(min(uint64(st.Bavail)*uint64(st.Bsize), math.MaxInt64)), nil
}

// isDiskFull reports the file system's "no space left" or "quota exceeded".
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// syncDir flushes dir's entries: the renames and removals in it.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
