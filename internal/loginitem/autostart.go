//go:build !darwin

package loginitem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// entry is an XDG autostart entry: a desktop file the session starts at
// login.
type entry struct {
	path    string
	content string
}

// autostartEntry is the autostart entry of the program exe for goos, with
// the user's configuration directory.
func autostartEntry(goos, configDir, exe string) (entry, error) {
	switch goos {
	case "linux", "freebsd", "openbsd", "netbsd":
	default:
		return entry{}, fmt.Errorf("start at login is not supported on %s", goos)
	}
	if strings.ContainsAny(exe, "\n\r") {
		return entry{}, fmt.Errorf("start at login: the program path %q has a line break", exe)
	}
	quoted := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "`", "\\`", "$", `\$`).Replace(exe)
	return entry{
		path:    filepath.Join(configDir, "autostart", "petal.desktop"),
		content: "[Desktop Entry]\nType=Application\nName=Petal\nExec=\"" + quoted + "\"\nX-GNOME-Autostart-enabled=true\n",
	}, nil
}

// apply writes the entry when enabled and removes it otherwise.
func (e entry) apply(enabled bool) error {
	if !enabled {
		if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(e.path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(e.path, []byte(e.content), 0o644)
}
