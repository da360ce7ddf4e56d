//go:build !unix

package hub

import (
	"errors"
	"runtime"
)

var errNoDiskProbe = errors.New("hub: pulling needs a Unix system (macOS or Linux) on " + runtime.GOOS)

func freeSpace(string) (int64, error) { return 0, errNoDiskProbe }

func lock(string) (func(), error) { return nil, errNoDiskProbe }
