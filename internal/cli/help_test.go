package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestFitPerVerdict: petal fit told a 64 GB Mac to quit other apps and
// that Macs under 32 GB cannot run the model, exited 0 when the verdict
// was no, and listed the model's float32 vectors as "0.00 GiB" (issue 28
// B.7).
func TestFitPerVerdict(t *testing.T) {
	var big bytes.Buffer
	if err := Run([]string{"fit", "--memory-gb", "64"}, &big); err != nil {
		t.Fatalf("fit on 64 GB: %v", err)
	}
	for _, lack := range []string{"quit other", "less than 32 GB", "0.00 GiB", " 0.0 MiB"} {
		if strings.Contains(big.String(), lack) {
			t.Errorf("fit on 64 GB says %q:\n%s", lack, big.String())
		}
	}
	if !strings.Contains(big.String(), "float32 copies of the model's vectors") || !strings.Contains(big.String(), " MB\n") {
		t.Errorf("fit on 64 GB does not give the vectors' megabytes:\n%s", big.String())
	}

	var small bytes.Buffer
	err := Run([]string{"fit", "--memory-gb", "16"}, &small)
	if err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("fit on 16 GB: error %v, want the verdict no as a failure", err)
	}
	if !strings.Contains(small.String(), "Macs with less than 32 GB cannot run it") {
		t.Errorf("fit on 16 GB does not say which Macs run it:\n%s", small.String())
	}
	var js bytes.Buffer
	if err := Run([]string{"fit", "--memory-gb", "16", "--json"}, &js); err == nil {
		t.Error("fit --json on 16 GB succeeded")
	}
	var r struct{ Verdict string }
	if err := json.Unmarshal(js.Bytes(), &r); err != nil || r.Verdict != "no" {
		t.Errorf("fit --json on 16 GB: %v %s", err, js.String())
	}
}

// stderrOf runs f with os.Stderr, where the commands' flag sets print
// their usage, read into a string.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	f()
	os.Stderr = saved
	w.Close()
	return <-out
}

// TestHelpPerCommand: `petal help serve` printed the general usage (issue
// 28 B.7). It, `petal serve -h` and `petal serve --help` print serve's own
// usage and flags; so does every command; bench's internal --arm is left
// out; an unknown command is an error.
func TestHelpPerCommand(t *testing.T) {
	for name, c := range commands {
		for _, args := range [][]string{{"help", name}, {name, "-h"}, {name, "--help"}} {
			var stdout bytes.Buffer
			var err error
			usage := stderrOf(t, func() { err = Run(args, &stdout) })
			if err != nil || !strings.HasPrefix(usage, "usage: petal "+name+" [flags]\n") || !strings.Contains(usage, c.summary) {
				t.Errorf("petal %s: %v, usage %q", strings.Join(args, " "), err, usage)
			}
			if strings.Contains(stdout.String(), "commands:") {
				t.Errorf("petal %s printed the general usage", strings.Join(args, " "))
			}
		}
	}
	usage := stderrOf(t, func() { Run([]string{"help", "serve"}, io.Discard) })
	for _, flag := range []string{"-addr", "-api-key", "-settings", "-context"} {
		if !strings.Contains(usage, flag) {
			t.Errorf("serve's usage lacks %s:\n%s", flag, usage)
		}
	}
	usage = stderrOf(t, func() { Run([]string{"help", "bench"}, io.Discard) })
	if strings.Contains(usage, "-arm") || !strings.Contains(usage, "-dry-run") {
		t.Errorf("bench's usage:\n%s", usage)
	}
	if err := Run([]string{"help", "nope"}, io.Discard); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("help of an unknown command: %v", err)
	}
	var general bytes.Buffer
	if err := Run([]string{"help"}, &general); err != nil || !strings.Contains(general.String(), "petal help <command>") {
		t.Errorf("petal help: %v %q", err, general.String())
	}
}

// TestVersion: there was no petal version (issue 28 B.7). It says the
// module version, the commit and its time when Go recorded them, and the
// toolchain and platform.
func TestVersion(t *testing.T) {
	var b bytes.Buffer
	err := writeVersion(&b, &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "petal", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-03T14:00:00Z"}, {Key: "vcs.modified", Value: "true"}}})
	want := "petal v1.2.3\ncommit 0123abcd (with uncommitted changes), 2026-12-03T14:00:00Z\ngo1.26.0 "
	if err != nil || !strings.HasPrefix(b.String(), want) {
		t.Errorf("version %q (%v), want it to start %q", b.String(), err, want)
	}
	b.Reset()
	if err := writeVersion(&b, nil); err != nil || !strings.HasPrefix(b.String(), "petal unknown\ngo") || strings.Contains(b.String(), "commit") {
		t.Errorf("version without build info: %q (%v)", b.String(), err)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		b.Reset()
		if err := Run(args, &b); err != nil || !strings.HasPrefix(b.String(), "petal ") || !strings.Contains(b.String(), "go1.") {
			t.Errorf("petal %s: %q (%v)", args[0], b.String(), err)
		}
	}
	if err := Run([]string{"version", "extra"}, io.Discard); err == nil {
		t.Error("petal version extra succeeded")
	}
}

// TestFitOffAMacSaysNoMacWords: petal fit on Linux spoke of Metal's
// working set and in GiB where the web UI writes GB (issue 28 B.3). Off a
// Mac, this machine's report has neither; a simulated Mac keeps its words.
func TestFitOffAMacSaysNoMacWords(t *testing.T) {
	var here bytes.Buffer
	err := Run([]string{"fit"}, &here)
	if err != nil && !errors.Is(err, errDoesNotFit) {
		t.Fatal(err)
	}
	if goruntime.GOOS != "darwin" {
		for _, lack := range []string{"Mac", "Metal", "working set", "GiB", "MiB"} {
			if strings.Contains(here.String(), lack) {
				t.Errorf("fit on this machine says %q:\n%s", lack, here.String())
			}
		}
	}
	if !strings.Contains(here.String(), " GB\n") || !strings.Contains(here.String(), " GB (") {
		t.Errorf("fit on this machine gives no sizes in GB:\n%s", here.String())
	}
	var mac bytes.Buffer
	Run([]string{"fit", "--memory-gb", "16"}, &mac)
	for _, want := range []string{"simulated 16 GB Mac", "Metal's working set", "Apple's 16 GB are 17.2 GB", "A 32 GB Mac runs"} {
		if !strings.Contains(mac.String(), want) {
			t.Errorf("fit --memory-gb 16 lacks %q:\n%s", want, mac.String())
		}
	}
}
