// Package loginitem makes Petal start when the user logs in, or stops it.
//
// On macOS the app bundle itself becomes the login item, through
// ServiceManagement's SMAppService (mainAppService, macOS 13 and later;
// Petal needs 14), called through the Objective-C runtime with purego: no
// cgo. The system then lists Petal in System Settings > General > Login
// Items, where the user can also turn it off. Only an app bundle at a
// lasting path can be one: [AppBundle] refuses a bare executable, an app
// that App Translocation runs from a temporary copy (one opened where it
// was downloaded) and one on a mounted volume such as a disk image.
//
// On Linux and the BSDs it writes an XDG autostart entry.
package loginitem
