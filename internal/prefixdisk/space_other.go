//go:build !unix

package prefixdisk

import (
	"errors"
	"syscall"
)

// freeBytes is unknown here; DefaultBudget then uses fallbackBudget.
func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }

func isDiskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }
