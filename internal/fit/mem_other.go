//go:build !darwin

package fit

import "errors"

// macMemory is for Macs only; Host does not ask for it elsewhere.
func macMemory() (int64, error) { return 0, errors.New("fit: not a Mac") }
