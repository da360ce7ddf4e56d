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
// Only what the menu-bar item needs: a status item showing a monochrome
// template icon (PNG bytes, tinted by macOS for the bar's appearance), a
// menu of titled items (with key equivalents) and separators, placing a
// window just under the item, and the activation policy, which follows
// whether the app is hidden (closing Wails' window hides it). Elsewhere than on
// macOS only the icon check ([CheckIcon]) and the placement arithmetic
// build, so that they are tested everywhere: a Linux desktop opens a
// normal window instead.
//
// Reference: https://developer.apple.com/documentation/appkit/nsstatusitem
package menubar
