//go:build desktop

package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/wailsapp/wails/v2"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
	"github.com/wailsapp/wails/v2/pkg/options/linux"
	"github.com/wailsapp/wails/v2/pkg/options/mac"
	wruntime "github.com/wailsapp/wails/v2/pkg/runtime"

	"petal/frontend"
	"petal/internal/manage"
)

// Size of the chat window.
const (
	windowWidth     = 900
	windowHeight    = 680
	windowMinWidth  = 420
	windowMinHeight = 480
)

// platformStartup holds what a platform adds once the window exists (the
// menu-bar item on macOS).
var platformStartup []func(a *desktopApp)

// desktopApp is the App once its window exists, with Wails' context, which
// Wails' runtime calls need.
type desktopApp struct {
	*App
	ctx context.Context
}

func init() { runDesktop = desktopMain }

// desktopMain runs the app until the user quits.
func desktopMain() error {
	logger := desktopLogger()
	store, err := openSettings()
	if err != nil {
		return err
	}
	// The model loads while the window opens; the window shows it
	// loading (loading.go).
	a, err := startApp(store, logger)
	if err != nil {
		return err
	}
	defer a.Close()
	onMac := runtime.GOOS == "darwin"
	err = wails.Run(&options.App{
		Title:     "Petal",
		Width:     windowWidth,
		Height:    windowHeight,
		MinWidth:  windowMinWidth,
		MinHeight: windowMinHeight,
		// On a Mac the app lives in the menu bar: closing the window hides
		// it, and the menu-bar item opens it again.
		HideWindowOnClose: onMac,
		AssetServer: &assetserver.Options{
			Assets:  frontend.Files(),
			Handler: a.Window,
		},
		OnStartup: a.startup,
		Mac: &mac.Options{
			About: &mac.AboutInfo{Title: "Petal", Message: "Qwen3.6-35B-A3B on this Mac's GPU."},
		},
		Linux: &linux.Options{ProgramName: "petal"},
	})
	if err != nil {
		return fmt.Errorf("desktop window: %w", err)
	}
	return nil
}

// startup keeps Wails' context and lets the platform add its parts.
func (a *App) startup(ctx context.Context) {
	d := &desktopApp{App: a, ctx: ctx}
	for _, f := range platformStartup {
		f(d)
	}
}

// ShowWindow brings the chat window up at a view of the UI ("" for chat,
// "settings", ...).
func (a *desktopApp) ShowWindow(view string) {
	if view != "" {
		wruntime.WindowExecJS(a.ctx, fmt.Sprintf("location.hash = %q", "#/"+view))
	}
	wruntime.WindowShow(a.ctx)
}

// CopyEndpoint puts the endpoint URL on the clipboard.
func (a *desktopApp) CopyEndpoint() error {
	return wruntime.ClipboardSetText(a.ctx, a.Endpoint)
}

// Quit ends the app.
func (a *desktopApp) Quit() { wruntime.Quit(a.ctx) }

// openSettings opens the user's settings file.
func openSettings() (*manage.SettingsStore, error) {
	path, err := manage.DefaultSettingsPath()
	if err != nil {
		return nil, err
	}
	return manage.OpenSettings(path)
}
