//go:build !darwin

package loginitem

import (
	"fmt"
	"os"
	"runtime"
)

// Set writes this program's autostart entry, or removes it. Where there is
// none to write, turning it off does nothing.
func Set(enabled bool) error {
	configDir, err := os.UserConfigDir()
	if err != nil {
		return fmt.Errorf("start at login: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start at login: %w", err)
	}
	e, err := autostartEntry(runtime.GOOS, configDir, exe)
	if err != nil {
		if !enabled {
			return nil
		}
		return err
	}
	if err := e.apply(enabled); err != nil {
		return fmt.Errorf("start at login: %w", err)
	}
	return nil
}
