package loginitem

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// AppBundle is the app bundle (the folder ending in .app) that the program
// at exe, a path with its symbolic links resolved, runs from, when macOS
// can start that bundle at login.
func AppBundle(exe string) (string, error) {
	exe = filepath.Clean(exe)
	if !filepath.IsAbs(exe) {
		return "", fmt.Errorf("start at login: the program path %q is not absolute", exe)
	}
	macOS := filepath.Dir(exe)
	contents := filepath.Dir(macOS)
	app := filepath.Dir(contents)
	if filepath.Base(macOS) != "MacOS" || filepath.Base(contents) != "Contents" || filepath.Ext(app) != ".app" {
		return "", fmt.Errorf("start at login needs Petal.app, and this program (%s) is not in an app bundle: build the app with scripts/macapp.sh and open it from Applications", exe)
	}
	// A quarantined app opened where it was downloaded runs from a
	// randomised read-only copy under .../AppTranslocation/<UUID>/d/,
	// gone once it quits.
	if slices.Contains(strings.Split(app, "/"), "AppTranslocation") {
		return "", fmt.Errorf("start at login: macOS runs this Petal from a temporary copy (%s), as it does for an app opened where it was downloaded; move Petal.app to Applications and open it from there", app)
	}
	if strings.HasPrefix(app, "/Volumes/") {
		return "", fmt.Errorf("start at login: Petal.app is on a mounted volume (%s), such as a disk image, which may be gone at the next login; copy it to Applications and open it from there", app)
	}
	return app, nil
}
