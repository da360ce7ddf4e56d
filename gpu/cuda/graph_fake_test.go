package cuda

import (
	"errors"
	"testing"
	"unsafe"
)

// fakeDriver stands in for libcuda's graph and memory calls, so the graph
// cache's bookkeeping and error paths run without a GPU. fail names a call
// that returns an error (CUDA_ERROR_INVALID_VALUE) the next failN times.
type fakeDriver struct {
	next           uintptr
	fail           string
	failN          int
	calls          map[string]int
	graphs, execs  map[uintptr]bool // live
	arenas         map[uintptr]int  // live, by size
	freed          []uintptr
	setParams      []uintptr // nodes updated, in order
	lastParams     map[uintptr]kernelNodeParams
	destroyedExecs int
	launchedExecs  []uintptr
	nodes          int
}

func (f *fakeDriver) call(name string) result {
	f.calls[name]++
	if f.fail == name && f.failN > 0 {
		f.failN--
		return 1
	}
	return cudaSuccess
}

func (f *fakeDriver) handle() uintptr { f.next++; return f.next }

func newFakeDevice(t *testing.T, mode graphMode) (*Device, *fakeDriver) {
	t.Helper()
	f := &fakeDriver{calls: map[string]int{}, graphs: map[uintptr]bool{}, execs: map[uintptr]bool{},
		arenas: map[uintptr]int{}, lastParams: map[uintptr]kernelNodeParams{}}
	name := []byte("CUDA_ERROR_INVALID_VALUE\x00")
	api := &driverAPI{
		cuGetErrorName: func(_ result, s **byte) result { *s = &name[0]; return cudaSuccess },
		cuMemAllocAsync: func(p *uintptr, n uint64, _ uintptr) result {
			if r := f.call("cuMemAllocAsync"); r != cudaSuccess {
				return r
			}
			*p = f.handle()
			f.arenas[*p] = int(n)
			return cudaSuccess
		},
		cuMemFreeAsync: func(p uintptr, _ uintptr) result {
			delete(f.arenas, p)
			f.freed = append(f.freed, p)
			return f.call("cuMemFreeAsync")
		},
		cuMemcpyHtoDAsync: func(dst uintptr, _ unsafe.Pointer, n uint64, _ uintptr) result {
			if f.arenas[dst] < int(n) {
				t.Errorf("copy of %d bytes into an arena of %d", n, f.arenas[dst])
			}
			return f.call("cuMemcpyHtoDAsync")
		},
		cuGraphCreate: func(g *uintptr, _ uint32) result {
			if r := f.call("cuGraphCreate"); r != cudaSuccess {
				return r
			}
			*g = f.handle()
			f.graphs[*g] = true
			return cudaSuccess
		},
		cuGraphDestroy: func(g uintptr) result {
			if !f.graphs[g] {
				t.Errorf("graph %d destroyed twice or never made", g)
			}
			delete(f.graphs, g)
			return cudaSuccess
		},
		cuGraphAddKernelNode: func(n *uintptr, g uintptr, _ *uintptr, _ uint64, p *kernelNodeParams) result {
			if r := f.call("cuGraphAddKernelNode"); r != cudaSuccess {
				return r
			}
			*n = f.handle()
			f.nodes++
			f.lastParams[*n] = *p
			return cudaSuccess
		},
		cuGraphInstantiateWithFlags: func(e *uintptr, _ uintptr, _ uint64) result {
			if r := f.call("cuGraphInstantiateWithFlags"); r != cudaSuccess {
				return r
			}
			*e = f.handle()
			f.execs[*e] = true
			return cudaSuccess
		},
		cuGraphExecKernelNodeSetParams: func(_, n uintptr, p *kernelNodeParams) result {
			if r := f.call("cuGraphExecKernelNodeSetParams"); r != cudaSuccess {
				return r
			}
			f.setParams = append(f.setParams, n)
			f.lastParams[n] = *p
			return cudaSuccess
		},
		cuGraphExecDestroy: func(e uintptr) result {
			delete(f.execs, e)
			f.destroyedExecs++
			return cudaSuccess
		},
		cuGraphLaunch: func(e, _ uintptr) result {
			if !f.execs[e] {
				t.Errorf("launch of graph exec %d, which is not live", e)
			}
			f.launchedExecs = append(f.launchedExecs, e)
			return f.call("cuGraphLaunch")
		},
	}
	return &Device{api: api, graphs: &graphCache{mode: mode, graphs: map[uint64][]*graph{}}}, f
}

// fakeBuffer builds a command buffer of kernels fns at levels, each with
// inlineLen inline bytes in slot 0 and a buffer at addr in slot 1.
func fakeBuffer(fns []uintptr, levels []int32, inlineLen int, addr uint64) *commandBuffer {
	c := &commandBuffer{}
	for i, fn := range fns {
		l := launch{name: "k", fn: fn, grid: [3]uint32{1, 1, 1}, block: [3]uint32{32, 1, 1}, level: levels[i]}
		for s := range l.inline {
			l.inline[s] = -1
		}
		l.inline[0] = int32(len(c.bytes))
		c.bytes = append(c.bytes, make([]byte, (inlineLen+inlineAlign-1)&^(inlineAlign-1))...)
		l.params.buffers[1] = addr
		c.launches = append(c.launches, l)
	}
	return c
}

// A failure partway through building a graph is an error, not a panic,
// and what was made is freed; the next command buffer builds again.
func TestGraphBuildFailure(t *testing.T) {
	for _, call := range []string{"cuMemAllocAsync", "cuGraphCreate", "cuGraphAddKernelNode", "cuGraphInstantiateWithFlags"} {
		t.Run(call, func(t *testing.T) {
			d, f := newFakeDevice(t, graphLevels)
			f.fail, f.failN = call, 1
			c := fakeBuffer([]uintptr{7, 8}, []int32{0, 1}, 4, 100)
			_, err := d.graphs.replay(d, c)
			var ce *Error
			if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_INVALID_VALUE" {
				t.Fatalf("got %v, want the driver's error", err)
			}
			if d.graphs.n != 0 || len(f.graphs) != 0 || len(f.execs) != 0 || len(f.arenas) != 0 {
				t.Fatalf("after the failure: %d cached, %d graphs, %d execs, %d arenas live", d.graphs.n, len(f.graphs), len(f.execs), len(f.arenas))
			}
			if _, err := d.graphs.replay(d, c); err != nil || d.graphs.n != 1 || len(f.launchedExecs) != 1 {
				t.Fatalf("retry: %v, %d cached, %d launches", err, d.graphs.n, len(f.launchedExecs))
			}
		})
	}
}

// A replay updates only the nodes whose launch changed. Where the update
// or the launch fails, the graph is dropped, so the next command buffer of
// the shape builds it anew instead of skipping a node it thinks current.
func TestGraphUpdateFailure(t *testing.T) {
	d, f := newFakeDevice(t, graphLevels)
	fns, levels := []uintptr{7, 8, 9}, []int32{0, 0, 1}
	if _, err := d.graphs.replay(d, fakeBuffer(fns, levels, 4, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.graphs.replay(d, fakeBuffer(fns, levels, 4, 100)); err != nil || len(f.setParams) != 0 {
		t.Fatalf("same launches: %v, %d nodes updated", err, len(f.setParams))
	}
	moved := fakeBuffer(fns, levels, 4, 100)
	moved.launches[1].params.buffers[1] = 200
	if _, err := d.graphs.replay(d, moved); err != nil || len(f.setParams) != 1 {
		t.Fatalf("one buffer moved: %v, %d nodes updated, want 1", err, len(f.setParams))
	}
	if got := f.lastParams[f.setParams[0]]; got.fn != 8 {
		t.Fatalf("updated the node of kernel %d, want 8", got.fn)
	}
	for _, call := range []string{"cuGraphExecKernelNodeSetParams", "cuMemcpyHtoDAsync", "cuGraphLaunch"} {
		f.fail, f.failN = call, 1
		back := fakeBuffer(fns, levels, 4, 100) // differs from the last in node 1
		if _, err := d.graphs.replay(d, back); err == nil {
			t.Fatalf("%s failing: no error", call)
		}
		if d.graphs.n != 0 || len(f.execs) != 0 {
			t.Fatalf("%s failing: %d graphs cached, %d execs live; want the graph dropped", call, d.graphs.n, len(f.execs))
		}
		nodes := f.nodes
		if _, err := d.graphs.replay(d, back); err != nil || f.nodes != nodes+3 {
			t.Fatalf("after %s failed: %v, %d nodes added, want the graph built again (3)", call, err, f.nodes-nodes)
		}
		// Leave node 1 as moved, so the next round's command buffer
		// differs from it again.
		if _, err := d.graphs.replay(d, moved); err != nil {
			t.Fatal(err)
		}
	}
}

// More inline bytes than the arena holds grow it: the old one is freed in
// stream order and every node with an inline slot points into the new one.
func TestGraphArenaGrows(t *testing.T) {
	d, f := newFakeDevice(t, graphLevels)
	fns, levels := []uintptr{7, 8}, []int32{0, 1}
	if _, err := d.graphs.replay(d, fakeBuffer(fns, levels, 16, 100)); err != nil {
		t.Fatal(err)
	}
	var first uintptr
	for a := range f.arenas {
		first = a
	}
	big := fakeBuffer(fns, levels, 3000, 100) // two slots of 3008 bytes: past 4096
	if _, err := d.graphs.replay(d, big); err != nil {
		t.Fatal(err)
	}
	if len(f.freed) != 1 || f.freed[0] != first || len(f.arenas) != 1 {
		t.Fatalf("freed %v (want the first arena %d), %d arenas live", f.freed, first, len(f.arenas))
	}
	var arena uintptr
	for a, n := range f.arenas {
		arena = a
		if n < len(big.bytes) {
			t.Fatalf("new arena %d bytes for %d", n, len(big.bytes))
		}
	}
	if len(f.setParams) != 2 {
		t.Fatalf("%d nodes updated, want both", len(f.setParams))
	}
	for i, n := range f.setParams {
		p := (*[1]*params)(f.lastParams[n].params)[0]
		if want := uint64(arena) + uint64(big.launches[i].inline[0]); p.buffers[0] != want {
			t.Fatalf("node %d reads its inline bytes at %#x, want %#x in the new arena", i, p.buffers[0], want)
		}
	}
}

// Past maxGraphs the least recently replayed graph goes, not the newest.
func TestGraphEvictsLeastRecent(t *testing.T) {
	d, f := newFakeDevice(t, graphLevels)
	shapeOf := func(k int) *commandBuffer { return fakeBuffer([]uintptr{uintptr(1000 + k)}, []int32{0}, 4, 100) }
	for k := range maxGraphs {
		if _, err := d.graphs.replay(d, shapeOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.graphs.replay(d, shapeOf(0)); err != nil { // shape 1 is now the least recent
		t.Fatal(err)
	}
	nodes := f.nodes
	if _, err := d.graphs.replay(d, shapeOf(maxGraphs)); err != nil || d.graphs.n != maxGraphs || f.destroyedExecs != 1 {
		t.Fatalf("one past the bound: %v, %d cached, %d destroyed", err, d.graphs.n, f.destroyedExecs)
	}
	for _, k := range []int{0, maxGraphs} {
		if _, err := d.graphs.replay(d, shapeOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	if f.nodes != nodes+1 {
		t.Fatalf("shapes 0 and %d rebuilt: %d nodes added since, want 1 (the newest's)", maxGraphs, f.nodes-nodes-1)
	}
	if _, err := d.graphs.replay(d, shapeOf(1)); err != nil || f.nodes != nodes+2 {
		t.Fatalf("shape 1 should have been evicted and built again: %v, %d nodes", err, f.nodes-nodes)
	}
}
