package main

import (
	"bytes"
	"os"
	"testing"

	"petal/internal/menubar"
)

// TestMenuBarIcons checks the icons the macOS menu bar embeds (in
// app_menubar_darwin.go, which builds only there) where the tests run:
// both are template images AppKit can tint, and they differ.
func TestMenuBarIcons(t *testing.T) {
	var icons [][]byte
	for _, name := range []string{"build/darwin/menubar-idle.png", "build/darwin/menubar-busy.png"} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := menubar.CheckIcon(data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		icons = append(icons, data)
	}
	if bytes.Equal(icons[0], icons[1]) {
		t.Error("the busy icon is the idle one")
	}
}
