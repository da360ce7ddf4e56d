//go:build !unix

package hub

import (
	"errors"
	"runtime"
	"syscall"
)

var errNoDiskProbe = errors.New("hub: pulling needs a Unix system (macOS or Linux) on " + runtime.GOOS)

func freeSpace(string) (int64, error) { return 0, errNoDiskProbe }

func diskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

func lock(string) (func(), error) { return nil, errNoDiskProbe }
