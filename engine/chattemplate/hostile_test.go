package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
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
			start := time.Now()
			tp, err := Parse(string(src))
			if err == nil {
				_, err = tp.Render(t.Context(), in)
			}
			elapsed := time.Since(start)
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
			if elapsed > 2*MaxRenderTime {
				t.Errorf("took %v, more than twice MaxRenderTime", elapsed)
			}
			if heap > hostileHeapBound {
				t.Errorf("heap reached %d bytes, more than %d", heap, hostileHeapBound)
			}
			t.Logf("%s in %v, heap peak %d MiB: %v", m[1], elapsed.Round(time.Millisecond), heap>>20, err)
		})
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
