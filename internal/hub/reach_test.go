package hub

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// offline answers every request as a resolver does on a machine with no
// network.
type offline struct{}

func (offline) RoundTrip(req *http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: req.URL.Hostname(), IsNotFound: true}}
}

// TestPullOfflineSaysSoAtOnce: with no network the first listing attempt's
// failure is reported at once, in words, with the next attempt's time, and
// the pull ends as ErrUnreachable after its retries.
func TestPullOfflineSaysSoAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var events []Event
		start := time.Now()
		o := Options{
			Endpoint: "https://hub.example", Repo: "petal-test/tiny", Revision: "main",
			Dir: filepath.Join(t.TempDir(), "tiny"), NoHFCache: true,
			MaxRetries: 3, RetryBase: time.Second, Transport: offline{},
			FreeSpace: func(string) (int64, error) { return 1 << 50, nil },
			Progress: func(ev Event) {
				mu.Lock()
				defer mu.Unlock()
				if ev.Retry != nil {
					events = append(events, ev)
				}
			},
		}
		_, err := Pull(t.Context(), o)
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("offline pull: %v, want ErrUnreachable", err)
		}
		if d := Diagnose(err); d.Reason != ReasonDNS || d.Message == "" {
			t.Errorf("offline pull diagnosed as %+v, want %s", d, ReasonDNS)
		}
		if took := time.Since(start); took != 7*time.Second {
			t.Errorf("gave up after %v, want 7s (1+2+4 of backoff)", took)
		}
		if len(events) != 3 {
			t.Fatalf("%d retry events, want 3", len(events))
		}
		first := events[0]
		if first.Phase != ListingFiles || first.Attempt != 2 || first.MaxAttempts != 4 || !first.RetryAt.Equal(start.Add(time.Second)) {
			t.Errorf("first retry event %+v, want listing, attempt 2 of 4 at %v", first, start.Add(time.Second))
		}
		if d := Diagnose(first.Retry); d.Reason != ReasonDNS || !d.Unreachable {
			t.Errorf("first retry diagnosed as %+v", d)
		}
	})
}

func TestDiagnoseRealFailures(t *testing.T) {
	// A port nothing listens on refuses.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	// A server whose certificate no system root signed fails the handshake.
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsServer.Close()
	fiveHundred := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer fiveHundred.Close()
	for _, c := range []struct {
		url, reason string
		unreachable bool
	}{
		{closed, ReasonRefused, true},
		{tlsServer.URL, ReasonTLS, true},
		{fiveHundred.URL, ReasonServer, false},
	} {
		_, err := fetchListing(t.Context(), &http.Client{}, c.url, "petal-test/tiny", "main")
		if err == nil {
			t.Fatalf("%s: listing succeeded", c.url)
		}
		if d := Diagnose(err); d.Reason != c.reason || d.Unreachable != c.unreachable || d.Message == "" || d.Detail != err.Error() {
			t.Errorf("%s (%v): diagnosed %+v, want %s", c.url, err, d, c.reason)
		}
	}
}

// failing answers every request with err, as a dialer that cannot connect.
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// TestQuickOfflineGivesUpAtOnce: offline, petal pull retried its listing
// for about five minutes, a raw error line each time (issue 28 B.5). With
// QuickOffline a Hub that is not reached at all (name not found, no route,
// refused) is tried once more a RetryBase later, unreported, and the pull
// ends as ErrUnreachable; a timeout, which may pass, keeps its retries.
func TestQuickOfflineGivesUpAtOnce(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}
	}
	for _, c := range []struct {
		name      string
		transport http.RoundTripper
		reason    string
		took      time.Duration
		retries   int
	}{
		{"no such host", offline{}, ReasonDNS, time.Second, 0},
		{"network is unreachable", failing{dial(syscall.ENETUNREACH)}, ReasonNoRoute, time.Second, 0},
		{"connection refused", failing{dial(syscall.ECONNREFUSED)}, ReasonRefused, time.Second, 0},
		{"timeout", failing{context.DeadlineExceeded}, ReasonTimeout, 7 * time.Second, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				retries := 0
				start := time.Now()
				_, err := Pull(t.Context(), Options{
					Endpoint: "https://hub.example", Repo: "petal-test/tiny", Revision: "main",
					Dir: filepath.Join(t.TempDir(), "tiny"), NoHFCache: true, QuickOffline: true,
					MaxRetries: 3, RetryBase: time.Second, Transport: c.transport,
					FreeSpace: func(string) (int64, error) { return 1 << 50, nil },
					Progress: func(ev Event) {
						mu.Lock()
						defer mu.Unlock()
						if ev.Retry != nil {
							retries++
						}
					},
				})
				if !errors.Is(err, ErrUnreachable) || Diagnose(err).Reason != c.reason {
					t.Fatalf("pull: %v (%s), want ErrUnreachable for %s", err, Diagnose(err).Reason, c.reason)
				}
				if took := time.Since(start); took != c.took || retries != c.retries {
					t.Errorf("gave up after %v and %d reported retries, want %v and %d", took, retries, c.took, c.retries)
				}
			})
		})
	}
}
