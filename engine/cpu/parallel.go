package cpu

import (
	"runtime"
	"sync"
)

// minRowsPerWorker keeps tiny products on one goroutine, where the cost of
// waking another outweighs the work.
const minRowsPerWorker = 16

// parallelFor calls f over [0, n) split into contiguous ranges, one per
// core, and waits for all of them.
func parallelFor(n, grain int, f func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if grain < 1 {
		grain = 1
	}
	if w := n / grain; w < workers {
		workers = w
	}
	if workers <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}
