package cpu

import (
	"runtime"
	"sync"
)

// minRowsPerWorker keeps tiny products on one goroutine, where the cost of
// waking another outweighs the work.
const minRowsPerWorker = 16

// A task is work over [0, n) whose ranges can run at once. It is a pointer
// kept in a scratch, not a closure, so that handing it to the workers
// allocates nothing; p holds the buffers of the range's part alone.
type task interface {
	run(p *part, lo, hi int)
}

type piece struct {
	t      task
	p      *part
	lo, hi int
	done   *sync.WaitGroup
}

// pool is one worker per core but the first, started once and kept, which
// every Forward of every model shares: a goroutine started per range
// would allocate.
var pool struct {
	once  sync.Once
	parts int
	work  chan piece
}

// numParts is how many ranges parallelFor splits work into at most:
// GOMAXPROCS as it was when first asked.
func numParts() int {
	pool.once.Do(func() {
		pool.parts = runtime.GOMAXPROCS(0)
		pool.work = make(chan piece, pool.parts)
		for range pool.parts - 1 {
			go func() {
				for pc := range pool.work {
					pc.t.run(pc.p, pc.lo, pc.hi)
					pc.done.Done()
				}
			}()
		}
	})
	return pool.parts
}

// parallelFor runs t over [0, n) split into contiguous ranges, one per
// core, the caller taking the first, and waits for all of them.
func (sc *scratch) parallelFor(n, grain int, t task) {
	workers := min(len(sc.parts), n/max(grain, 1))
	if workers <= 1 {
		t.run(&sc.parts[0], 0, n)
		return
	}
	step := (n + workers - 1) / workers
	for i, lo := 1, step; lo < n; i, lo = i+1, lo+step {
		sc.wg.Add(1)
		pool.work <- piece{t, &sc.parts[i], lo, min(lo+step, n), &sc.wg}
	}
	t.run(&sc.parts[0], 0, step)
	sc.wg.Wait()
}
