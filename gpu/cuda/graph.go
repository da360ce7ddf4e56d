package cuda

import (
	"fmt"
	"os"
	"unsafe"
)

// graphMode is how command buffers reach the GPU ($PETAL_CUDA_GRAPHS).
type graphMode int

const (
	// graphLevels: a CUDA graph per command buffer shape, each dispatch a
	// kernel node depending on the dispatches of the level before it, so
	// the dispatches of one level may run at once, as Metal's concurrent
	// compute pass lets them.
	graphLevels graphMode = iota
	// graphSerial: the graph's nodes in a chain, in encoding order.
	graphSerial
	// graphOff: one cuLaunchKernel a dispatch on the stream.
	graphOff
)

func graphModeFrom(env string) (graphMode, error) {
	switch env {
	case "", "levels":
		return graphLevels, nil
	case "serial":
		return graphSerial, nil
	case "off":
		return graphOff, nil
	}
	return 0, fmt.Errorf("$PETAL_CUDA_GRAPHS=%q: want levels, serial or off", env)
}

// A decode step encodes the same kernels in the same levels step after
// step; only positions, lengths and now and then a buffer change. So each
// shape of command buffer (its kernels and their levels) is built into a
// CUDA graph once, and a command buffer of a shape seen before replays that
// graph, setting anew only the kernel nodes whose launch changed. One
// cuGraphLaunch replaces hundreds of cuLaunchKernel calls, and the GPU runs
// the nodes without waiting on the host between them.
type graph struct {
	exec, g uintptr
	fns     []uintptr
	levels  []int32
	nodes   []uintptr
	// set is each node's launch as last given to it, inline slots pointing
	// into arena.
	set []launch
	// arena holds the command buffer's setBytes data, copied in on the
	// stream before each replay, so that nodes keep their arguments.
	arena    uintptr
	arenaCap int
	// timing, with $PETAL_CUDA_PROFILE=1: an event node before the first
	// kernel and after each, in a chain.
	timing *timings
	used   uint64
}

// maxGraphs bounds the graphs kept; the least recently replayed goes.
const maxGraphs = 32

type graphCache struct {
	mode   graphMode
	graphs map[uint64][]*graph
	n      int
	tick   uint64
}

func newGraphCache() (*graphCache, error) {
	mode, err := graphModeFrom(os.Getenv("PETAL_CUDA_GRAPHS"))
	if err != nil {
		return nil, err
	}
	return &graphCache{mode: mode, graphs: map[uint64][]*graph{}}, nil
}

// shape hashes each launch's kernel and level.
func shape(ls []launch) uint64 {
	h := uint64(14695981039346656037)
	for i := range ls {
		h = (h ^ uint64(ls[i].fn)) * 1099511628211
		h = (h ^ uint64(ls[i].level)) * 1099511628211
	}
	return h
}

func (gr *graph) fits(ls []launch) bool {
	if len(ls) != len(gr.fns) {
		return false
	}
	for i := range ls {
		if ls[i].fn != gr.fns[i] || ls[i].level != gr.levels[i] {
			return false
		}
	}
	return true
}

// replay runs c's launches as a graph on the stream (the context is
// current, d.mu held): the graph of c's shape, updated, or a new one. A
// graph that fails to update or launch is dropped, so that the next
// command buffer of its shape builds it anew rather than trusting nodes in
// an unknown state.
func (gc *graphCache) replay(d *Device, c *commandBuffer) (*graph, error) {
	gc.tick++
	key := shape(c.launches)
	var gr *graph
	for _, g := range gc.graphs[key] {
		if g.fits(c.launches) {
			gr = g
			break
		}
	}
	if gr == nil {
		built, err := gc.build(d, c)
		if err != nil {
			return nil, err
		}
		if gc.n == maxGraphs {
			gc.evict(d)
		}
		gc.graphs[key] = append(gc.graphs[key], built)
		gc.n++
		gr = built
	} else if err := gr.update(d, c); err != nil {
		gc.drop(d, key, gr)
		return nil, err
	}
	gr.used = gc.tick
	if err := gr.launch(d, c); err != nil {
		gc.drop(d, key, gr)
		return nil, err
	}
	return gr, nil
}

// update gives gr's nodes c's launches where they differ from the last.
func (gr *graph) update(d *Device, c *commandBuffer) error {
	api := d.api
	if err := gr.ensureArena(d, len(c.bytes)); err != nil {
		return err
	}
	patchInline(c.launches, gr.arena)
	for i := range c.launches {
		if c.launches[i] == gr.set[i] {
			continue
		}
		p := nodeParams(&c.launches[i])
		if err := api.check(api.cuGraphExecKernelNodeSetParams(gr.exec, gr.nodes[i], &p), "updating "+c.launches[i].name); err != nil {
			return err
		}
		gr.set[i] = c.launches[i]
	}
	return nil
}

// launch copies c's inline bytes into the arena and launches gr.
func (gr *graph) launch(d *Device, c *commandBuffer) error {
	api := d.api
	if len(c.bytes) > 0 {
		// From pageable memory the copy is staged before the call returns,
		// so c.bytes may go; on the stream it precedes the replay, and
		// follows every earlier replay that read the arena.
		if err := api.check(api.cuMemcpyHtoDAsync(gr.arena, unsafe.Pointer(&c.bytes[0]), uint64(len(c.bytes)), d.stream), "copying inline bytes"); err != nil {
			return err
		}
	}
	return api.check(api.cuGraphLaunch(gr.exec, d.stream), "launching a graph")
}

// ensureArena makes the arena hold n bytes; an outgrown one is freed in
// stream order, after the replays that read it.
func (gr *graph) ensureArena(d *Device, n int) error {
	if n <= gr.arenaCap {
		return nil
	}
	api := d.api
	if gr.arena != 0 {
		api.cuMemFreeAsync(gr.arena, d.stream)
		gr.arena, gr.arenaCap = 0, 0
	}
	size := (n + 4095) &^ 4095
	if err := api.check(api.cuMemAllocAsync(&gr.arena, uint64(size), d.stream), "allocating inline bytes"); err != nil {
		return err
	}
	gr.arenaCap = size
	return nil
}

// patchInline points each launch's inline slots into arena.
func patchInline(ls []launch, arena uintptr) {
	for i := range ls {
		l := &ls[i]
		for slot, off := range l.inline {
			if off >= 0 {
				l.params.buffers[slot] = uint64(arena) + uint64(off)
			}
		}
	}
}

// nodeParams describes l as a kernel node; CUDA copies the Params during
// the call that takes them.
func nodeParams(l *launch) kernelNodeParams {
	args := &[1]unsafe.Pointer{unsafe.Pointer(&l.params)}
	return kernelNodeParams{
		fn:    l.fn,
		gridX: l.grid[0], gridY: l.grid[1], gridZ: l.grid[2],
		blkX: l.block[0], blkY: l.block[1], blkZ: l.block[2],
		shmem:  l.shmem,
		params: unsafe.Pointer(args),
	}
}

// build makes and instantiates the graph of c's launches.
func (gc *graphCache) build(d *Device, c *commandBuffer) (_ *graph, err error) {
	api := d.api
	gr := &graph{set: append([]launch(nil), c.launches...)}
	defer func() {
		if err != nil {
			gr.destroy(d)
		}
	}()
	if err := gr.ensureArena(d, len(c.bytes)); err != nil {
		return nil, err
	}
	patchInline(gr.set, gr.arena)
	if err := api.check(api.cuGraphCreate(&gr.g, 0), "creating a graph"); err != nil {
		return nil, err
	}
	serial := gc.mode == graphSerial || d.prof != nil
	// prev is what the next node depends on: the nodes of the level before
	// (or, serial, the node before).
	var prev, cur []uintptr
	level := int32(-1)
	add := func(what string, deps []uintptr, f func(n *uintptr, deps *uintptr, nd uint64) result) (uintptr, error) {
		var n uintptr
		var p *uintptr
		if len(deps) > 0 {
			p = &deps[0]
		}
		err := api.check(f(&n, p, uint64(len(deps))), what)
		return n, err
	}
	event := func(deps []uintptr) (uintptr, error) {
		var ev uintptr
		if err := api.check(api.cuEventCreate(&ev, 0), "cuEventCreate"); err != nil {
			return 0, err
		}
		gr.timing.events = append(gr.timing.events, ev)
		return add("adding an event node", deps, func(n *uintptr, deps *uintptr, nd uint64) result {
			return api.cuGraphAddEventRecordNode(n, gr.g, deps, nd, ev)
		})
	}
	if d.prof != nil {
		gr.timing = &timings{}
		n, err := event(nil)
		if err != nil {
			return nil, err
		}
		prev = []uintptr{n}
	}
	for i := range gr.set {
		l := &gr.set[i]
		if !serial && l.level != level {
			prev, cur, level = cur, nil, l.level
		}
		p := nodeParams(l)
		n, err := add("adding "+l.name, prev, func(n *uintptr, deps *uintptr, nd uint64) result {
			return api.cuGraphAddKernelNode(n, gr.g, deps, nd, &p)
		})
		if err != nil {
			return nil, err
		}
		gr.fns, gr.levels, gr.nodes = append(gr.fns, l.fn), append(gr.levels, l.level), append(gr.nodes, n)
		switch {
		case gr.timing != nil:
			gr.timing.names, gr.timing.fns = append(gr.timing.names, l.name), append(gr.timing.fns, l.fn)
			ev, err := event([]uintptr{n})
			if err != nil {
				return nil, err
			}
			prev = []uintptr{ev}
		case serial:
			prev = []uintptr{n}
		default:
			cur = append(cur, n)
		}
	}
	if err := api.check(api.cuGraphInstantiateWithFlags(&gr.exec, gr.g, 0), "instantiating a graph"); err != nil {
		return nil, err
	}
	return gr, nil
}

// evict destroys the least recently replayed graph.
func (gc *graphCache) evict(d *Device) {
	var oldKey uint64
	var old *graph
	for k, gs := range gc.graphs {
		for _, g := range gs {
			if old == nil || g.used < old.used {
				oldKey, old = k, g
			}
		}
	}
	if old != nil {
		gc.drop(d, oldKey, old)
	}
}

// drop removes gr from the cache and destroys it.
func (gc *graphCache) drop(d *Device, key uint64, gr *graph) {
	gs := gc.graphs[key]
	for i, g := range gs {
		if g == gr {
			gc.graphs[key] = append(gs[:i:i], gs[i+1:]...)
			gc.n--
		}
	}
	if len(gc.graphs[key]) == 0 {
		delete(gc.graphs, key)
	}
	gr.destroy(d)
}

// destroy frees gr; CUDA frees an executable graph still running once it
// completes, and the arena goes in stream order.
func (gr *graph) destroy(d *Device) {
	api := d.api
	if gr.exec != 0 {
		api.cuGraphExecDestroy(gr.exec)
	}
	if gr.g != 0 {
		api.cuGraphDestroy(gr.g)
	}
	if gr.arena != 0 {
		api.cuMemFreeAsync(gr.arena, d.stream)
	}
	if gr.timing != nil {
		for _, ev := range gr.timing.events {
			api.cuEventDestroy(ev)
		}
	}
}

// close destroys every graph (the stream is idle).
func (gc *graphCache) close(d *Device) {
	for _, gs := range gc.graphs {
		for _, g := range gs {
			g.destroy(d)
		}
	}
	gc.graphs, gc.n = nil, 0
}
