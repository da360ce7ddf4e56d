package leakcheck

import (
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// A goroutine blocked for good is found, with its stack; once it ends, the
// check passes.
func TestCheckFindsAGoroutine(t *testing.T) {
	stop := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		blockedForGood(stop)
	}()
	// Started or not, its stack names the test that created it.
	left := others()
	if len(left) != 1 || !strings.Contains(left[0], "created by petal/internal/leakcheck.TestCheckFindsAGoroutine") {
		t.Fatalf("others() = %q, want the blocked goroutine", left)
	}
	close(stop)
	<-exited
	if err := Check(); err != nil {
		t.Fatal(err)
	}
}

func blockedForGood(stop chan struct{}) { <-stop }
