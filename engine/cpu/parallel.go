package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
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
	t    task
	p    *part
	c    *chunks
	done *sync.WaitGroup
}

// chunks hands out the ranges of one parallelFor, step long, to whoever
// asks next; left counts the workers not yet done with it.
type chunks struct {
	next    atomic.Int64
	left    atomic.Int32
	n, step int
}

// do runs t over the ranges left until there are none.
func (c *chunks) do(t task, p *part) {
	for {
		lo := (int(c.next.Add(1)) - 1) * c.step
		if lo >= c.n {
			return
		}
		t.run(p, lo, min(lo+c.step, c.n))
	}
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
				for {
					pc := nextPiece()
					pc.c.do(pc.t, pc.p)
					pc.c.left.Add(-1)
					pc.done.Done()
				}
			}()
		}
	})
	return pool.parts
}

// spinFor is how long a worker polls for its next piece, and the caller
// of parallelFor for the workers to finish, before blocking. A goroutine
// woken from blocking waits for the scheduler to move it to the idle
// core: a piece sent to a blocked worker started 40-300 us late here,
// about half a 2048x2048 product. Decode's products come microseconds
// apart, so polling catches each at once: the demo model decoded 300-313
// tokens/s after 256 with it and 195-210 without, at the same tokens per
// CPU second.
const spinFor = 50 * time.Microsecond

// nextPiece is a worker's next piece of work.
func nextPiece() piece {
	start := time.Now()
	for i := 0; ; i++ {
		select {
		case pc := <-pool.work:
			return pc
		default:
		}
		if i%64 == 63 && time.Since(start) > spinFor {
			return <-pool.work
		}
	}
}

// rangesPerWorker is how many ranges parallelFor splits work into per
// core, at most: a worker that starts late (see spinFor) or whose core
// the host lends elsewhere for a while leaves its ranges to the others,
// and the last range bounds how long one core waits for the other (with
// 4 a 2048x2048 product lost a sixth of its rate to that wait; the
// commit that set 8 has the figures, prefill's at the real dimensions
// among them).
const rangesPerWorker = 8

// parallelFor runs t over [0, n) split into contiguous ranges of at least
// grain, which the caller and one worker per other core take in turn, and
// waits for all of them.
func (sc *scratch) parallelFor(n, grain int, t task) {
	grain = max(grain, 1)
	workers := min(len(sc.parts), n/grain)
	if workers <= 1 {
		t.run(&sc.parts[0], 0, n)
		return
	}
	ranges := min(n/grain, workers*rangesPerWorker)
	c := &sc.chunks
	c.n, c.step = n, (n+ranges-1)/ranges
	c.next.Store(0)
	c.left.Store(int32(workers - 1))
	for i := 1; i < workers; i++ {
		sc.wg.Add(1)
		pool.work <- piece{t, &sc.parts[i], c, &sc.wg}
	}
	c.do(t, &sc.parts[0])
	for start, i := time.Now(), 0; c.left.Load() > 0; i++ {
		if i%64 == 63 && time.Since(start) > spinFor {
			break
		}
	}
	sc.wg.Wait()
}
