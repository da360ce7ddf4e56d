package gpu

// Trace records what a command buffer encoded, the same way for every
// driver.
type Trace struct {
	Events []Event
}

// Event is one encoded dispatch, or a barrier when Barrier is true.
type Event struct {
	Barrier  bool
	Pipeline string
	Groups   Size
	Threads  Size
	Bindings []Binding
}

// Binding is a recorded buffer argument; inline bytes record only their
// length (Buffer is nil).
type Binding struct {
	Index  int
	Buffer Buffer
	Offset int
	Inline int
}

// AddDispatch records d.
func (t *Trace) AddDispatch(d *Dispatch) {
	e := Event{Pipeline: d.Pipeline.Name(), Groups: d.Groups, Threads: d.Threads}
	for _, a := range d.Args {
		e.Bindings = append(e.Bindings, Binding{Index: a.Index, Buffer: a.Buffer, Offset: a.Offset, Inline: len(a.Bytes)})
	}
	t.Events = append(t.Events, e)
}

// AddBarrier records a barrier. A barrier with no dispatch since the last one
// orders nothing and is not recorded.
func (t *Trace) AddBarrier() {
	if n := len(t.Events); n > 0 && !t.Events[n-1].Barrier {
		t.Events = append(t.Events, Event{Barrier: true})
	}
}

// Dispatches counts the recorded dispatches.
func (t *Trace) Dispatches() int {
	n := 0
	for _, e := range t.Events {
		if !e.Barrier {
			n++
		}
	}
	return n
}

// Levels counts dependency levels: runs of dispatches between barriers,
// which the GPU may overlap.
func (t *Trace) Levels() int {
	n := 0
	open := false
	for _, e := range t.Events {
		if e.Barrier {
			open = false
		} else if !open {
			n++
			open = true
		}
	}
	return n
}
