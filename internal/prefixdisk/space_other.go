//go:build !unix

package prefixdisk

import (
	"errors"
	"syscall"
)

// freeBytes is unknown here; DefaultBudget then uses fallbackBudget.
func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }

func isDiskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// syncDir does nothing: a folder opened for reading cannot be flushed on
// Windows. A power cut there may lose a snapshot just renamed, never
// corrupt one.
func syncDir(string) error { return nil }
