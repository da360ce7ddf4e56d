package main

import (
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
)

// appLogMax bounds the Mac app's log file: a start that finds it larger
// begins it anew.
const appLogMax = 4 << 20

// desktopLogger writes the app's log to stderr and, on a Mac, also to
// ~/Library/Logs/Petal.log (Console lists it under Log Reports): an app
// opened from Finder has its stderr on /dev/null.
func desktopLogger() *log.Logger {
	path := ""
	if runtime.GOOS == "darwin" {
		if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, "Library", "Logs", "Petal.log")
		}
	}
	return newAppLogger(path)
}

// newAppLogger is the app's logger, writing to stderr and, when path is
// not "", the log file there. The log package's default logger writes
// where it does, so that what the packages below log through it (the
// demo model mended at start) reaches the file too.
func newAppLogger(path string) *log.Logger {
	w := io.Writer(os.Stderr)
	if path != "" {
		if f, err := openAppLog(path); err == nil {
			w = io.MultiWriter(os.Stderr, f)
		}
	}
	logger := log.New(w, appLogPrefix, log.LstdFlags)
	log.SetOutput(w)
	log.SetPrefix(appLogPrefix)
	log.SetFlags(log.LstdFlags)
	return logger
}

// appLogPrefix starts every line of the app's log.
const appLogPrefix = "petal: "

// openAppLog opens the log file at path for appending, emptied first when
// it has grown past appLogMax.
func openAppLog(path string) (*os.File, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if st, err := os.Stat(path); err == nil && st.Size() > appLogMax {
		flags |= os.O_TRUNC
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, flags, 0o644)
}
