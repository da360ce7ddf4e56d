//go:build desktop && darwin

package main

import "petal/internal/menubar"

// menuBarTitle is the item's text in the menu bar.
const menuBarTitle = "Petal"

func init() {
	platformStartup = append(platformStartup, installMenuBar)
	platformClose = append(platformClose, func(a *App) {
		// No Dock icon while no window is open.
		if err := menubar.ShowInDock(false); err != nil {
			a.log.Printf("menu bar: %v", err)
		}
	})
}

// installMenuBar adds Petal's menu-bar item and makes the app an accessory.
func installMenuBar(a *App) {
	open := func(view string) func() {
		return func() {
			if err := menubar.ShowInDock(true); err != nil {
				a.log.Printf("menu bar: %v", err)
			}
			a.ShowWindow(view)
		}
	}
	status := "Model: " + a.ModelName + " (ready)"
	if a.Demo {
		status = "Model: demo (download the real one in Model)"
	}
	_, err := menubar.Install(menuBarTitle, []menubar.Item{
		{Title: "Open Chat", Key: "o", Action: open("chat")},
		{Title: status, Action: open("setup")},
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
}
