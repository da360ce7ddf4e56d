package cli

import (
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"runtime/debug"
)

func init() {
	commands["version"] = command{
		summary: "print petal's version, the commit it was built from, and the Go version and platform",
		run:     runVersion,
	}
}

func runVersion(args []string, stdout io.Writer) error {
	fs := newFlags("version", os.Stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo() // nil without build info
	return writeVersion(stdout, info)
}

// writeVersion says what the build info holds: the module's version (a
// tag, or "(devel)" for a build from a checkout), the VCS revision and
// time Go records when it builds inside a repository (marked modified for
// uncommitted changes), and the toolchain and platform. info is nil when
// the binary carries none.
func writeVersion(w io.Writer, info *debug.BuildInfo) error {
	version, goVersion := "unknown", goruntime.Version()
	var revision, when, modified string
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (with uncommitted changes)"
				}
			}
		}
	}
	fmt.Fprintf(w, "petal %s\n", version)
	if revision != "" {
		fmt.Fprintf(w, "commit %s%s", revision, modified)
		if when != "" {
			fmt.Fprintf(w, ", %s", when)
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "%s %s/%s\n", goVersion, goruntime.GOOS, goruntime.GOARCH)
	return err
}
