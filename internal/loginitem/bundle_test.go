package loginitem

import (
	"strings"
	"testing"
)

func TestAppBundle(t *testing.T) {
	for _, exe := range []string{
		"/Applications/Petal.app/Contents/MacOS/petal",
		"/Users/ana/Applications/Petal Beta.app/Contents/MacOS/petal",
		"/Applications/Petal.app/Contents/MacOS/../MacOS/petal",
	} {
		app, err := AppBundle(exe)
		if err != nil {
			t.Errorf("%s: %v", exe, err)
		} else if !strings.HasSuffix(app, ".app") || !strings.HasPrefix(exe, app) {
			t.Errorf("%s: bundle %s", exe, app)
		}
	}
	for _, tc := range []struct{ exe, want string }{
		{"/private/var/folders/x1/abc/T/AppTranslocation/7A1F3C5E-0B6D-4F1E-9C7A-3D2B1E0F9A8C/d/Petal.app/Contents/MacOS/petal", "temporary copy"},
		{"/Volumes/Petal/Petal.app/Contents/MacOS/petal", "mounted volume"},
		{"/usr/local/bin/petal", "not in an app bundle"},
		{"/Users/ana/src/petal/petal", "not in an app bundle"},
		{"/Applications/Petal/Contents/MacOS/petal", "not in an app bundle"},
		{"/Applications/Petal.app/Contents/Resources/petal", "not in an app bundle"},
		{"Petal.app/Contents/MacOS/petal", "not absolute"},
	} {
		if app, err := AppBundle(tc.exe); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: bundle %q, error %v; want an error saying %q", tc.exe, app, err, tc.want)
		}
	}
}
