package sim

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestCompatHeadersAtOnce: processes sharing a cache directory write the
// compat headers at the same time (parallel go test packages do); each must
// succeed and leave the one complete directory, whichever rename won.
func TestCompatHeadersAtOnce(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &Device{opts: Options{CacheDir: dir}}
			errs[i] = d.writeCompatHeaders()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != compatDir {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("cache directory holds %v, want only %s", names, compatDir)
	}
	for _, h := range compatHeaders {
		b, err := os.ReadFile(filepath.Join(dir, compatDir, h.Name))
		if err != nil {
			t.Fatal(err)
		}
		if want := "#pragma GCC system_header\n" + h.Text; string(b) != want {
			t.Errorf("%s: %d bytes, want the %d of the header marked as a system header", h.Name, len(b), len(want))
		}
	}
}
