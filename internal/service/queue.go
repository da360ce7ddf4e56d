package service

import (
	"context"
	"sync"
)

// queue hands the engine to one request at a time, in arrival order. At
// most limit requests wait; the rest are refused at once.
type queue struct {
	mu      sync.Mutex
	busy    bool
	waiting []chan struct{}
	limit   int
}

func newQueue(limit int) *queue { return &queue{limit: limit} }

// acquire waits for the engine. The returned release must be called
// exactly once when the request is done with it.
func (q *queue) acquire(ctx context.Context) (release func(), err error) {
	q.mu.Lock()
	if !q.busy && len(q.waiting) == 0 {
		q.busy = true
		q.mu.Unlock()
		return q.onceRelease(), nil
	}
	if len(q.waiting) >= q.limit {
		q.mu.Unlock()
		return nil, ErrQueueFull
	}
	turn := make(chan struct{})
	q.waiting = append(q.waiting, turn)
	q.mu.Unlock()

	select {
	case <-turn:
		return q.onceRelease(), nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	for i, c := range q.waiting {
		if c == turn {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			q.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
	q.mu.Unlock()
	// The engine was handed over just as ctx ended: pass it on.
	q.release()
	return nil, context.Cause(ctx)
}

func (q *queue) onceRelease() func() {
	var once sync.Once
	return func() { once.Do(q.release) }
}

// release gives the engine to the first waiter, or marks it idle.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.busy = false
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	close(next)
}

// depth reports how many requests wait and whether one is running.
func (q *queue) depth() (waiting int, running bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting), q.busy
}
