//go:build desktop && darwin

package main

import (
	_ "embed"
	"time"

	"petal/internal/menubar"
)

// The item's icons in the menu bar, its state at a glance: monochrome
// template images that macOS tints for the bar (build/darwin holds them).
var (
	//go:embed build/darwin/menubar-idle.png
	menuBarIdleIcon []byte
	//go:embed build/darwin/menubar-busy.png
	menuBarBusyIcon []byte
)

const (
	// menuBarTitle is the item's tooltip and spoken name.
	menuBarTitle = "Petal"
	// menuBarPoll is how often the item follows the model's state. The
	// service's metrics never wait on generation, so reading them is safe
	// at any time.
	menuBarPoll = time.Second
	// menuBarModelLine is the index of the menu line that names the model.
	menuBarModelLine = 1
	// wailsWindowClass is the NSWindow subclass Wails v2 makes its window
	// with (internal/frontend/desktop/darwin/WailsContext.h), which the
	// menu bar finds to place the window under its item.
	wailsWindowClass = "WailsWindow"
)

func init() {
	platformStartup = append(platformStartup, installMenuBar)
}

// modelLine is the menu's line about the served model.
func modelLine(a *App) string {
	rt := a.loaded()
	if rt == nil {
		select {
		case <-a.ready:
			return "Model: failed to load (see Model)"
		default:
			return "Model: loading…"
		}
	}
	name := rt.Info().Name
	if a.Demo && name == a.modelName {
		return "Model: demo (download the real one in Model)"
	}
	return "Model: " + name + " (ready)"
}

// installMenuBar adds Petal's menu-bar item and makes the app an accessory.
func installMenuBar(a *desktopApp) {
	var item *menubar.StatusItem
	open := func(view string) func() {
		return func() {
			// The chat window opens under the item, as a menu would: it
			// is moved there before the app is unhidden.
			if err := item.PlaceUnder(wailsWindowClass); err != nil {
				a.log.Printf("menu bar: %v", err)
			}
			if err := menubar.ShowInDock(true); err != nil {
				a.log.Printf("menu bar: %v", err)
			}
			a.ShowWindow(view)
		}
	}
	line := modelLine(a.App)
	item, err := menubar.Install(menuBarTitle, menuBarIdleIcon, []menubar.Item{
		{Title: "Open Chat", Key: "o", Action: open("chat")},
		{Title: line, Action: open("setup")},
		{},
		{Title: "Copy Endpoint URL", Key: "c", Action: func() {
			if err := a.CopyEndpoint(); err != nil {
				a.log.Printf("copy endpoint: %v", err)
			}
		}},
		{Title: "Settings…", Key: ",", Action: open("settings")},
		{},
		{Title: "Quit Petal", Key: "q", Action: a.Quit},
	})
	if err != nil {
		a.log.Printf("menu bar: %v", err)
		return
	}
	if err := menubar.ShowInDock(true); err != nil {
		a.log.Printf("menu bar: %v", err)
	}
	// Closing the window hides the app (HideWindowOnClose), which takes
	// the icon out of the Dock, and opening it puts it back.
	if err := menubar.DockFollowsWindow(); err != nil {
		a.log.Printf("menu bar: %v", err)
	}
	go followState(a, item, line)
}

// followState shows in the menu bar whether the model is generating, and
// names the model a load from the Setup screen put in place, until the
// app quits.
func followState(a *desktopApp, item *menubar.StatusItem, line string) {
	busy := false
	t := time.NewTicker(menuBarPoll)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if now := modelLine(a.App); now != line {
			line = now
			if err := item.SetItemTitle(menuBarModelLine, line); err != nil {
				a.log.Printf("menu bar: %v", err)
				return
			}
		}
		rt := a.loaded()
		if rt == nil {
			continue
		}
		m := rt.Metrics()
		now := m.Running > 0 || m.Waiting > 0
		if now == busy {
			continue
		}
		busy = now
		icon := menuBarIdleIcon
		if busy {
			icon = menuBarBusyIcon
		}
		if err := item.SetIcon(icon); err != nil {
			a.log.Printf("menu bar: %v", err)
			return
		}
	}
}
