// Command petal runs Qwen3.6-35B-A3B locally: a desktop app, a local
// OpenAI-compatible server, and tools for checking the engine.
//
// # Subcommands
//
// With arguments, petal runs a subcommand of package petal/internal/cli
// (`petal help` lists them); this package holds only the entry point and
// the desktop shell.
//
// # The desktop app
//
// With no arguments, a binary built with -tags desktop opens the chat
// window (app_wails.go): the web UI embedded from package petal/frontend,
// answered in-process by the same handler the local endpoint serves
// (app.go). On macOS the window hides on close and a menu-bar item brings
// it back (app_menubar_darwin.go); package petal/internal/loginitem starts
// Petal at login. Without the tag, no arguments print the usage.
package main
