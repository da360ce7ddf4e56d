//go:build desktop && darwin

package main

import (
	"time"

	"petal/internal/menubar"
)

// The item's text in the menu bar: its state at a glance. The service's
// metrics never wait on generation, so reading them is safe at any time.
const (
	menuBarTitle     = "Petal"
	menuBarBusyTitle = "Petal ●"
	// menuBarPoll is how often the title follows the model's state.
	menuBarPoll = time.Second
)

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
	item, err := menubar.Install(menuBarTitle, []menubar.Item{
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
	go followState(a, item)
}

// followState shows in the menu bar whether the model is generating,
// until the app quits.
func followState(a *App, item *menubar.StatusItem) {
	busy := false
	t := time.NewTicker(menuBarPoll)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		m := a.live.slot.Current().Metrics()
		now := m.Running > 0 || m.Waiting > 0
		if now == busy {
			continue
		}
		busy = now
		title := menuBarTitle
		if busy {
			title = menuBarBusyTitle
		}
		if err := item.SetTitle(title); err != nil {
			a.log.Printf("menu bar: %v", err)
			return
		}
	}
}
