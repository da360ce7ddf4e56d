package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostileHeapBound is the most heap a hostile render may hold at once; it
// covers MaxProducedBytes of output and the builder's doubling.
const hostileHeapBound = 1 << 30

var expectRE = regexp.MustCompile(`^\{# expect: ([a-z-]+)\.`)

// TestHostile runs the templates of testdata/hostile: each must fail with
// the class its opening comment names, in bounded time and memory.
func TestHostile(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "hostile", "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no hostile templates: %v", err)
	}
	in := Input{Messages: []Message{{Role: "user", Content: TextContent("hi")}}, AddGenerationPrompt: true}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".jinja"), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := expectRE.FindSubmatch(src)
			if m == nil {
				t.Fatal("file lacks its {# expect: CLASS. #} comment")
			}
			peak := watchHeap(t)
			elapsed := workClock(t)
			wallStart := time.Now()
			tp, err := Parse(string(src))
			if err == nil {
				_, err = tp.Render(t.Context(), in)
			}
			wall := time.Since(wallStart)
			heap := peak()
			switch want := string(m[1]); want {
			case "limit":
				if !errors.Is(err, ErrLimit) {
					t.Fatalf("got %v, want a limit error", err)
				}
			case "bad-template":
				if !errors.Is(err, ErrBadTemplate) {
					t.Fatalf("got %v, want a bad-template error", err)
				}
			case "render":
				if !errors.Is(err, ErrRender) {
					t.Fatalf("got %v, want a render error", err)
				}
			default:
				t.Fatalf("unknown expectation %q", want)
			}
			if elapsed() > MaxRenderTime+clockTick {
				t.Errorf("ran for %v of the render's clock, past MaxRenderTime and its next check", elapsed())
			}
			// The render's clock counts only the steps that read it; one step
			// that runs long between reads (a filter over a huge value) shows
			// only on the wall clock. The bound is far above any machine's
			// load, so it fails only on such a step.
			if wall > hostileWallBound {
				t.Errorf("took %v of wall time, more than %v: some step runs long between the render's checks", wall, hostileWallBound)
			}
			if heap > hostileHeapBound {
				t.Errorf("heap reached %d bytes, more than %d", heap, hostileHeapBound)
			}
			t.Logf("%s in %v of the render's clock, heap peak %d MiB: %v", m[1], elapsed(), heap>>20, err)
		})
	}
}

// hostileWallBound is ten times MaxRenderTime.
const hostileWallBound = 10 * MaxRenderTime

// clockTick is how far workClock advances at each read: the render reads
// its clock every stepCheckEvery steps, so MaxRenderTime is 50 reads (3,200
// steps), whatever the machine's speed and load.
const clockTick = MaxRenderTime / 50

// workClock gives the render a clock that advances by clockTick at each
// read, for the rest of the test, and returns how far it has advanced.
func workClock(t *testing.T) (elapsed func() time.Duration) {
	start := time.Now()
	var reads atomic.Int64
	now = func() time.Time { return start.Add(time.Duration(reads.Add(1)) * clockTick) }
	t.Cleanup(func() { now = time.Now })
	return func() time.Duration { return time.Duration(max(reads.Load()-1, 0)) * clockTick }
}

// TestRenderTimeLimit: a render of endless work stops on its clock, at its
// first check past MaxRenderTime, with the time-limit error.
func TestRenderTimeLimit(t *testing.T) {
	elapsed := workClock(t)
	tp, err := Parse(`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tp.Render(t.Context(), Input{Messages: []Message{{Role: "user", Content: TextContent("hi")}}})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "render took longer") {
		t.Fatalf("got %v, want the time limit", err)
	}
	if e := elapsed(); e <= MaxRenderTime || e > MaxRenderTime+clockTick {
		t.Errorf("stopped at %v of the render's clock, want its first check past %v", e, MaxRenderTime)
	}
}

// heapSampleEvery is how often watchHeap samples the heap.
const heapSampleEvery = 10 * time.Millisecond

// watchHeap samples the live heap until the returned function is called,
// which gives the largest sample.
func watchHeap(t *testing.T) func() uint64 {
	stop := make(chan struct{})
	done := make(chan uint64)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		tk := time.NewTicker(heapSampleEvery)
		defer tk.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				done <- peak
				return
			case <-tk.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		return <-done
	}
}
