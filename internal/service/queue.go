package service

import (
	"context"
	"sync"
	"time"
)

// queue hands the engine to at most parallel requests at a time, which
// run together (one at a time when parallel is 1). Waiting requests are
// served by client in turn: the next one is the earliest request of the
// client served least recently, so one client's burst (an agent firing a
// dozen requests) does not hold another client (the chat window) back by
// more than one generation. Requests of one client go in arrival order.
// At most limit requests wait; the rest are refused at once.
type queue struct {
	mu       sync.Mutex
	running  int
	parallel int
	waiting  []*ticket // in arrival order
	limit    int
	// served counts hand-overs; lastServed[client] is the count at that
	// client's latest one.
	served     uint64
	lastServed map[string]uint64
	// changed is closed, and replaced, whenever a request joins or leaves.
	changed chan struct{}
}

// ticket is one request's place in the queue.
type ticket struct {
	q      *queue
	client string
	turn   chan struct{} // closed when the engine is handed to this ticket
	done   bool
	// joined and granted are when the ticket joined and got the engine.
	joined, granted time.Time
}

func newQueue(limit, parallel int) *queue {
	return &queue{limit: limit, parallel: parallel, lastServed: map[string]uint64{}, changed: make(chan struct{})}
}

// changedLocked wakes those waiting for the queue to change.
func (q *queue) changedLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// nextChange returns a channel closed at the queue's next change.
func (q *queue) nextChange() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changed
}

// join takes a place in the queue for client, or the engine at once when
// it is idle; a full queue gives ErrQueueFull.
func (q *queue) join(client string) (*ticket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := &ticket{q: q, client: client, turn: make(chan struct{}), joined: time.Now()}
	switch {
	case q.running < q.parallel && len(q.waiting) == 0:
		q.grantLocked(t)
	case len(q.waiting) >= q.limit:
		return nil, ErrQueueFull
	default:
		q.waiting = append(q.waiting, t)
	}
	q.changedLocked()
	return t, nil
}

func (q *queue) grantLocked(t *ticket) {
	q.running++
	t.granted = time.Now()
	q.served++
	q.lastServed[t.client] = q.served
	close(t.turn)
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

// leave gives the ticket's share of the engine to the next waiter if it
// holds one, or gives up the ticket's place; calls after the first do
// nothing.
func (t *ticket) leave() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	defer q.changedLocked()
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
	q.running--
	for len(q.waiting) > 0 && q.running < q.parallel {
		q.grantNextLocked()
	}
	if len(q.lastServed) > 2*q.limit+1 {
		q.forgetIdleLocked()
	}
}

// grantNextLocked gives the engine to the earliest waiter of the client
// served least recently; a client never served counts as served at 0.
func (q *queue) grantNextLocked() {
	next := 0
	for i, w := range q.waiting {
		if q.lastServed[w.client] < q.lastServed[q.waiting[next].client] {
			next = i
		}
	}
	t := q.waiting[next]
	q.waiting = append(q.waiting[:next], q.waiting[next+1:]...)
	q.grantLocked(t)
}

// forgetIdleLocked drops the turns of clients with nothing waiting, which
// bounds lastServed; a forgotten client's next request counts as the
// turn of a new client, which it is as far as fairness goes.
func (q *queue) forgetIdleLocked() {
	waiting := map[string]bool{}
	for _, w := range q.waiting {
		waiting[w.client] = true
	}
	for c := range q.lastServed {
		if !waiting[c] {
			delete(q.lastServed, c)
		}
	}
}

// depth reports how many requests wait and how many hold the engine.
func (q *queue) depth() (waiting, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting), q.running
}
