package gpu

// Trace records what a command buffer encoded, the same way for every
// driver: always how many dispatches in how many dependency levels, and
// with Keep every event too. Only what reads the events (tests, tools)
// keeps them, so encoding a step allocates nothing for its trace.
type Trace struct {
	// Keep makes the trace record Events.
	Keep   bool
	Events []Event

	dispatches, levels int
	open               bool // a dispatch since the last barrier
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
	t.dispatches++
	if !t.open {
		t.levels++
		t.open = true
	}
	if !t.Keep {
		return
	}
	e := Event{Pipeline: d.Pipeline.Name(), Groups: d.Groups, Threads: d.Threads}
	for _, a := range d.Args {
		e.Bindings = append(e.Bindings, Binding{Index: a.Index, Buffer: a.Buffer, Offset: a.Offset, Inline: len(a.Bytes)})
	}
	t.Events = append(t.Events, e)
}

// AddBarrier records a barrier. A barrier with no dispatch since the last one
// orders nothing and is not recorded.
func (t *Trace) AddBarrier() {
	if !t.open {
		return
	}
	t.open = false
	if t.Keep {
		t.Events = append(t.Events, Event{Barrier: true})
	}
}

// Dispatches counts the recorded dispatches.
func (t *Trace) Dispatches() int { return t.dispatches }

// Levels counts dependency levels: runs of dispatches between barriers,
// which the GPU may overlap.
func (t *Trace) Levels() int { return t.levels }
