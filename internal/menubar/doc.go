// Package menubar puts Petal's item in the macOS menu bar (an
// NSStatusItem with a menu) and switches the app between an accessory
// (no Dock icon) and a regular app, through the Objective-C runtime with
// purego: no cgo.
//
// # Threads
//
// AppKit must be driven from the main thread. Every exported function may
// be called from any goroutine: the work is queued on the main dispatch
// queue (dispatch_async_f) and runs when the app's run loop, which Wails
// owns, gets to it.
//
// # Scope
//
// Only what the menu-bar item needs: a status item with a text title, a
// menu of titled items (with key equivalents) and separators, and the
// activation policy. Elsewhere than on macOS the package has no code: a
// Linux desktop opens a normal window instead.
//
// Reference: https://developer.apple.com/documentation/appkit/nsstatusitem
package menubar
