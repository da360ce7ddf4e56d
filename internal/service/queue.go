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
	waiting []*ticket
	limit   int
}

// ticket is one request's place in the queue.
type ticket struct {
	q    *queue
	turn chan struct{} // closed when the engine is handed to this ticket
	done bool
}

func newQueue(limit int) *queue { return &queue{limit: limit} }

// join takes a place in the queue, or the engine at once when it is idle;
// a full queue gives ErrQueueFull.
func (q *queue) join() (*ticket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := &ticket{q: q, turn: make(chan struct{})}
	switch {
	case !q.busy && len(q.waiting) == 0:
		q.busy = true
		close(t.turn)
	case len(q.waiting) >= q.limit:
		return nil, ErrQueueFull
	default:
		q.waiting = append(q.waiting, t)
	}
	return t, nil
}

// wait returns when the ticket holds the engine, or with ctx's cause when
// ctx ends first.
func (t *ticket) wait(ctx context.Context) error {
	select {
	case <-t.turn:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// leave gives the engine to the next waiter if the ticket holds it, or
// gives up the ticket's place; calls after the first do nothing.
func (t *ticket) leave() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	select {
	case <-t.turn:
	default:
		for i, w := range q.waiting {
			if w == t {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				return
			}
		}
	}
	if len(q.waiting) == 0 {
		q.busy = false
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	close(next.turn)
}

// depth reports how many requests wait and whether one holds the engine.
func (q *queue) depth() (waiting int, running bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting), q.busy
}
