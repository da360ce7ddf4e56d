package metal

import (
	"sync"
	"testing"

	"petal/gpu"
)

// recycler is a device's command buffers run one dispatch each.
type recycler struct {
	t testing.TB
	d *Device
	p gpu.Pipeline
	x gpu.Buffer
}

func newRecycler(t testing.TB) (*recycler, *fake) {
	d, f := newFake(t, 1<<30)
	p, err := d.NewPipeline(gpu.Source{Name: "a.metal"}, "a")
	if err != nil {
		t.Fatal(err)
	}
	x, err := d.NewBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	return &recycler{t: t, d: d, p: p, x: x}, f
}

// committed makes a command buffer, encodes the dispatch and commits it.
func (r *recycler) committed() *commandBuffer {
	r.t.Helper()
	cb, err := r.d.NewCommandBuffer()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cb.Dispatch(&gpu.Dispatch{Pipeline: r.p, Groups: one(), Threads: one(),
		Args: []gpu.Arg{gpu.BufferArg(0, r.x, 0), gpu.BytesArg(1, []byte{1, 2, 3, 4})}}); err != nil {
		r.t.Fatal(err)
	}
	if err := cb.Commit(); err != nil {
		r.t.Fatal(err)
	}
	return cb.(*commandBuffer)
}

// settled is committed and waited for.
func (r *recycler) settled() *commandBuffer {
	r.t.Helper()
	cb := r.committed()
	if err := cb.Wait(); err != nil {
		r.t.Fatal(err)
	}
	return cb
}

// next is the command buffer NewCommandBuffer hands out now.
func (r *recycler) next() *commandBuffer {
	r.t.Helper()
	cb, err := r.d.NewCommandBuffer()
	if err != nil {
		r.t.Fatal(err)
	}
	return cb.(*commandBuffer)
}

// TestRecycledCommandBufferStartsAfresh: a settled command buffer handed
// back is the next one made, and it starts as a new one: a failed run's
// status and error are gone, and its first dispatch binds the pipeline
// and buffers again on its new encoder (a kept binding cache would skip
// them, and the GPU would run the kernel unbound).
func TestRecycledCommandBufferStartsAfresh(t *testing.T) {
	r, f := newRecycler(t)
	f.status = cbError
	cb := r.committed()
	if err := cb.Wait(); err == nil {
		t.Fatal("Metal failed the command buffer, Wait returned nil")
	}
	gpu.Recycle(cb)
	f.status = cbCompleted
	f.counts()
	again := r.next()
	if again != cb {
		t.Fatal("a recycled command buffer was not reused")
	}
	if s := again.Status(); s != gpu.Encoding {
		t.Errorf("reused command buffer's status %v, want encoding", s)
	}
	if err := again.Dispatch(&gpu.Dispatch{Pipeline: r.p, Groups: one(), Threads: one(),
		Args: []gpu.Arg{gpu.BufferArg(0, r.x, 0), gpu.BytesArg(1, []byte{1, 2, 3, 4})}}); err != nil {
		t.Fatal(err)
	}
	if err := again.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := again.Wait(); err != nil {
		t.Errorf("reused command buffer: %v, want its own outcome", err)
	}
	n := f.counts()
	if n[cCommandBuffer] != 1 || n[cEncoder] != 1 || n[cSetPipeline] != 1 || n[cSetBuffer] != 1 || n[cWait] != 1 {
		t.Errorf("reused: %d command buffers, %d encoders, %d pipeline binds, %d buffer binds, %d waits; want 1 each",
			n[cCommandBuffer], n[cEncoder], n[cSetPipeline], n[cSetBuffer], n[cWait])
	}
	if tr := again.Trace(); tr.Dispatches() != 1 {
		t.Errorf("reused command buffer's trace: %d dispatches, want 1", tr.Dispatches())
	}
}

// TestRecycleRefusesMisuse: recycling before the command buffer settled,
// or twice, hands nothing back twice and nothing unsettled out again, and
// makes no Objective-C call (every object is retained and released once).
func TestRecycleRefusesMisuse(t *testing.T) {
	r, f := newRecycler(t)
	f.counts()

	// Before Wait: ignored, and the command buffer still runs to its end.
	cb := r.committed()
	gpu.Recycle(cb)
	early := r.next()
	if early == cb {
		t.Fatal("a command buffer recycled before Wait was handed out again")
	}
	if err := cb.Wait(); err != nil {
		t.Fatalf("wait after a refused recycle: %v", err)
	}
	// Never committed: ignored too.
	gpu.Recycle(early)
	encoding := r.next()
	if encoding == early {
		t.Fatal("a command buffer recycled while encoding was handed out again")
	}

	// Twice: handed out once.
	gpu.Recycle(cb)
	gpu.Recycle(cb)
	first, second := r.next(), r.next()
	if first != cb {
		t.Error("a command buffer recycled after Wait was not reused")
	}
	if second == cb {
		t.Error("a command buffer recycled twice was handed out twice")
	}
	for _, c := range []*commandBuffer{early, encoding, first, second} {
		if err := c.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	n := f.counts()
	if n[cRetain] != n[cRelease] || n[cRetain] != 2*n[cCommandBuffer] {
		t.Errorf("%d command buffers, %d retains, %d releases; want each command buffer and encoder retained and released once",
			n[cCommandBuffer], n[cRetain], n[cRelease])
	}
	if f.pools != 0 {
		t.Errorf("%d autorelease pools left open", f.pools)
	}
}

// TestRecycleBounded: a device keeps at most maxRecycled command buffers
// for reuse, and none once closed.
func TestRecycleBounded(t *testing.T) {
	r, _ := newRecycler(t)
	old := map[*commandBuffer]bool{}
	var cbs []*commandBuffer
	for range maxRecycled + 2 {
		cb := r.settled()
		old[cb] = true
		cbs = append(cbs, cb)
	}
	for _, cb := range cbs {
		gpu.Recycle(cb)
	}
	reused := 0
	for range maxRecycled + 2 {
		if old[r.next()] {
			reused++
		}
	}
	if reused != maxRecycled {
		t.Errorf("%d of %d recycled command buffers reused, want %d", reused, len(cbs), maxRecycled)
	}

	last := r.settled()
	r.d.Close()
	gpu.Recycle(last)
	if r.d.nfree != 0 {
		t.Errorf("a closed device keeps %d command buffers", r.d.nfree)
	}
}

// TestRecycleOnManyGoroutines: goroutines making, running and recycling
// command buffers of one device share its free list safely (run it with
// -race), and every command buffer and encoder is released once.
func TestRecycleOnManyGoroutines(t *testing.T) {
	const workers, steps = 8, 50
	r, f := newRecycler(t)
	f.counts()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range steps {
				cb, err := r.d.NewCommandBuffer()
				if err != nil {
					t.Error(err)
					return
				}
				if err := cb.Dispatch(&gpu.Dispatch{Pipeline: r.p, Groups: one(), Threads: one(),
					Args: []gpu.Arg{gpu.BufferArg(0, r.x, 0)}}); err != nil {
					t.Error(err)
				}
				if err := cb.Commit(); err != nil {
					t.Error(err)
				}
				if err := cb.Wait(); err != nil {
					t.Error(err)
				}
				gpu.Recycle(cb)
			}
		})
	}
	wg.Wait()
	n := f.counts()
	if n[cCommandBuffer] != workers*steps || n[cRetain] != 2*workers*steps || n[cRelease] != 2*workers*steps {
		t.Errorf("%d command buffers, %d retains, %d releases; want %d, %d, %d",
			n[cCommandBuffer], n[cRetain], n[cRelease], workers*steps, 2*workers*steps, 2*workers*steps)
	}
}
