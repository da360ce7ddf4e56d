package service

import "sync"

// Slot holds the service that new requests go to, and lets a server put
// another one in its place while requests run (a model loaded from the
// Setup screen). A request holds the service it began on until it ends, so
// a replaced service finishes what it started, and it is released (its
// model closed) only once its last request has ended.
type Slot struct {
	mu  sync.Mutex
	cur *slotted
}

// slotted is one service in a slot's history.
type slotted struct {
	svc     *Service
	release func()
	// refs counts the requests holding svc.
	refs int
	// retired is set once another service took the slot, or it closed.
	retired  bool
	released bool
}

// NewSlot returns a slot holding svc. release, when not nil, frees svc
// and its model; it is called once svc is replaced or the slot closed,
// and no request holds it any more.
func NewSlot(svc *Service, release func()) *Slot {
	return &Slot{cur: &slotted{svc: svc, release: release}}
}

// Acquire returns the service for a request that starts now, and the
// function to call when the request has ended.
func (s *Slot) Acquire() (*Service, func()) {
	s.mu.Lock()
	e := s.cur
	e.refs++
	s.mu.Unlock()
	var once sync.Once
	return e.svc, func() {
		once.Do(func() {
			s.mu.Lock()
			e.refs--
			free := s.freeable(e)
			s.mu.Unlock()
			if free {
				e.release()
			}
		})
	}
}

// Current is the service new requests go to, for reading its description
// and metrics; a request that generates must Acquire it instead.
func (s *Slot) Current() *Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.svc
}

// Swap makes svc the service of every request that starts from now on;
// release is as for NewSlot. The replaced service is released at once if
// no request holds it, else when its last request ends.
func (s *Slot) Swap(svc *Service, release func()) {
	s.mu.Lock()
	old := s.cur
	s.cur = &slotted{svc: svc, release: release}
	old.retired = true
	free := s.freeable(old)
	s.mu.Unlock()
	if free {
		old.release()
	}
}

// Close retires the current service, to be released once no request holds
// it. Requests that acquire it afterwards still get it, and it is never
// released twice.
func (s *Slot) Close() {
	s.mu.Lock()
	e := s.cur
	e.retired = true
	free := s.freeable(e)
	s.mu.Unlock()
	if free {
		e.release()
	}
}

// freeable reports whether e is to be released now, and marks it so; s.mu
// is held.
func (s *Slot) freeable(e *slotted) bool {
	if !e.retired || e.refs > 0 || e.released || e.release == nil {
		return false
	}
	e.released = true
	return true
}
