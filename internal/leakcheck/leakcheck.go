// Package leakcheck fails a package's tests when they leave goroutines
// running, as net/http's own tests do: a goroutine that outlives its test
// is a server, stream or download that was not stopped, which in the
// product is memory and work that never ends.
//
// A package calls [Main] from its TestMain. The check runs once every test
// has passed, after idle client connections are closed; goroutines that
// are on their way out are given [Grace] to exit.
package leakcheck

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Grace is how long goroutines that are exiting may take: a closed
// connection's readers and a cancelled request's writer end a scheduler
// round or a network poll after the test that stopped them.
const Grace = 5 * time.Second

// ignored are goroutines the runtime, the standard library and Petal keep
// for the process's lifetime: the CPU backend's workers are started once
// and shared by every model.
var ignored = []string{
	"numParts.func1", // petal/engine/cpu, inlined into its caller or not
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"testing.(*M).",
	"testing.runTests.",
	"runtime.goexit0",
}

// Main runs the tests and then checks that none left a goroutine behind.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := Check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Check returns an error listing the goroutines, other than the caller and
// those of the runtime, still running after Grace.
func Check() error {
	http.DefaultClient.CloseIdleConnections()
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	deadline := time.Now().Add(Grace)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		left := others()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutines outlived the tests:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(wait)
	}
}

// others returns the stacks of every goroutine but the caller's and the
// ignored ones.
func others() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	return slices.DeleteFunc(stacks[1:], func(s string) bool { // [0] is the caller
		return slices.ContainsFunc(ignored, func(fn string) bool { return strings.Contains(s, fn) })
	})
}
