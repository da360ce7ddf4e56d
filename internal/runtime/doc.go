// Package runtime composes what serves a model: the memory-fit-checked
// load on a backend (load.go), the live model the Setup screen replaces
// with a download without a restart (live.go), the listener, the API
// server of package petal/internal/api and the web UI with its /manage/
// routes behind it (ui.go). petal serve and the desktop app are each a few
// lines over [Open].
package runtime
