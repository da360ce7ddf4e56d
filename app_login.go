package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// loginItemLabel names Petal's login item (the LaunchAgent's label).
const loginItemLabel = "app.petal"

// loginItem is where and what the system starts at login: a LaunchAgent
// on macOS, an XDG autostart entry on Linux desktops.
type loginItem struct {
	path    string
	content string
}

// loginItemFor is the login item of the program exe for goos, with the
// user's home and configuration directories.
func loginItemFor(goos, home, configDir, exe string) (loginItem, error) {
	switch goos {
	case "darwin":
		var esc strings.Builder
		if err := xml.EscapeText(&esc, []byte(exe)); err != nil {
			return loginItem{}, err
		}
		return loginItem{
			path: filepath.Join(home, "Library", "LaunchAgents", loginItemLabel+".plist"),
			content: `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key><string>` + loginItemLabel + `</string>
	<key>ProgramArguments</key><array><string>` + esc.String() + `</string></array>
	<key>RunAtLoad</key><true/>
	<key>ProcessType</key><string>Interactive</string>
</dict>
</plist>
`}, nil
	case "linux", "freebsd", "openbsd", "netbsd":
		if strings.ContainsAny(exe, "\n\r") {
			return loginItem{}, fmt.Errorf("start at login: the program path %q has a line break", exe)
		}
		quoted := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "`", "\\`", "$", `\$`).Replace(exe)
		return loginItem{
			path:    filepath.Join(configDir, "autostart", "petal.desktop"),
			content: "[Desktop Entry]\nType=Application\nName=Petal\nExec=\"" + quoted + "\"\nX-GNOME-Autostart-enabled=true\n",
		}, nil
	}
	return loginItem{}, fmt.Errorf("start at login is not supported on %s", goos)
}

// apply writes the item when enabled and removes it otherwise.
func (li loginItem) apply(enabled bool) error {
	if !enabled {
		if err := os.Remove(li.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(li.path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(li.path, []byte(li.content), 0o644)
}

// setStartAtLogin makes this program start at login, or stops it. It is
// opt-in: nothing is written until the user turns it on in Settings.
func setStartAtLogin(enabled bool) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	configDir, err := os.UserConfigDir()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	li, err := loginItemFor(runtime.GOOS, home, configDir, exe)
	if err != nil {
		if !enabled {
			return nil // nothing can have been written
		}
		return err
	}
	return li.apply(enabled)
}
