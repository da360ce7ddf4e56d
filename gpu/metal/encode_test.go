package metal

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"petal/gpu"
)

func one() gpu.Size { return gpu.Size{X: 1, Y: 1, Z: 1} }

// TestEncodeSendsOnlyChanges: the encoder keeps its bindings across
// dispatches, so the driver sends a pipeline, buffer or threadgroup memory
// length only when it changes, a run of slots in one call, only the offset
// when a lone slot's buffer stays, no
// barrier without a dispatch before it, and opens pools only to make the
// command buffer and to commit it.
func TestEncodeSendsOnlyChanges(t *testing.T) {
	d, f := newFake(t, 1<<30)
	p1, _ := d.NewPipeline(gpu.Source{Name: "a.metal"}, "a")
	p2, _ := d.NewPipeline(gpu.Source{Name: "a.metal"}, "b")
	x, _ := d.NewBuffer(4096)
	y, _ := d.NewBuffer(4096)
	for i, v := range x.Contents() {
		if v != 0 {
			t.Fatalf("new buffer byte %d is %#x, want 0", i, v)
		}
	}
	f.counts()
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	disp := func(p gpu.Pipeline, tg int, args ...gpu.Arg) {
		t.Helper()
		var mem []int
		if tg > 0 {
			mem = []int{tg}
		}
		if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one(), Threads: one(), Args: args, ThreadgroupMemory: mem}); err != nil {
			t.Fatal(err)
		}
	}
	params := []byte{1, 2, 3, 4}
	disp(p1, 256, gpu.BufferArg(0, x, 0), gpu.BufferArg(1, y, 0), gpu.BytesArg(2, params))
	disp(p1, 256, gpu.BufferArg(0, x, 0), gpu.BufferArg(1, y, 64), gpu.BytesArg(2, params)) // y's offset moves
	cb.Barrier()
	cb.Barrier() // orders nothing
	disp(p2, 512, gpu.BufferArg(0, y, 0), gpu.BufferArg(1, y, 64), gpu.BytesArg(2, params))
	disp(p2, 512, gpu.BufferArg(0, y, 0), gpu.BytesArg(1, params), gpu.BytesArg(2, params)) // bytes replace y at 1
	disp(p2, 512, gpu.BufferArg(0, y, 0), gpu.BufferArg(1, y, 64), gpu.BytesArg(2, params))
	cb.Barrier()
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	want := map[call]int{
		cPoolPush: 2, cPoolPop: 2, cCommandBuffer: 1, cEncoder: 1, cRetain: 2,
		cSetPipeline: 2, cSetBuffers: 1, cSetBuffer: 2, cSetBufferOffset: 1, cSetBytes: 6, cSetThreadgroupMemory: 2,
		cDispatch: 5, cBarrier: 2, cEndEncoding: 1, cRelease: 2, cCommit: 1, cWait: 1, cStatus: 1,
	}
	got := f.counts()
	for c := range numCalls {
		if got[c] != want[c] {
			t.Errorf("%s: %d calls, want %d", callNames[c], got[c], want[c])
		}
	}
	if f.pools != 0 {
		t.Errorf("%d autorelease pools left open", f.pools)
	}
	if tr := cb.Trace(); tr.Dispatches() != 5 || tr.Levels() != 2 {
		t.Errorf("trace: %d dispatches in %d levels, want 5 in 2", tr.Dispatches(), tr.Levels())
	}
}

// TestCommandBufferErrors: a failed command buffer reports Metal's error,
// and misuse is refused.
func TestCommandBufferErrors(t *testing.T) {
	d, f := newFake(t, 1<<30)
	p, _ := d.NewPipeline(gpu.Source{Name: "a.metal"}, "a")
	other, _ := newFake(t, 1<<30)
	foreign, _ := other.NewBuffer(16)

	cb, _ := d.NewCommandBuffer()
	err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one(), Threads: one(), Args: []gpu.Arg{gpu.BufferArg(0, foreign, 0)}})
	if !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("another device's buffer: %v", err)
	}
	if err := cb.Commit(); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("commit after a refused dispatch: %v", err)
	}
	if cb.Status() != gpu.Failed {
		t.Errorf("status %v after a refused dispatch", cb.Status())
	}

	f.status = cbError
	cb, _ = d.NewCommandBuffer()
	if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one(), Threads: one()}); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("wait before commit: %v", err)
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if cb.Status() != gpu.Failed {
		t.Errorf("status %v of a command buffer Metal failed", cb.Status())
	}
	if err := cb.Wait(); !errors.Is(err, gpu.ErrExecution) || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("wait: %v, want gpu.ErrExecution with Metal's error", err)
	}
	if err := cb.Commit(); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("second commit: %v", err)
	}
	if f.pools != 0 {
		t.Errorf("%d autorelease pools left open", f.pools)
	}
}

// TestCommandBuffersOnManyGoroutines: command buffers encoded on
// goroutines of their own, each waited on and polled by several more,
// share no argument block (run it with -race), keep the pools balanced
// and release each command buffer once.
func TestCommandBuffersOnManyGoroutines(t *testing.T) {
	const cbs, waiters = 64, 4
	d, f := newFake(t, 1<<30)
	p, _ := d.NewPipeline(gpu.Source{Name: "a.metal"}, "a")
	x, _ := d.NewBuffer(4096)
	f.counts()
	var wg sync.WaitGroup
	for range cbs {
		wg.Go(func() {
			cb, err := d.NewCommandBuffer()
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 8 {
				if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one(), Threads: one(),
					Args: []gpu.Arg{gpu.BufferArg(0, x, 16*i), gpu.BytesArg(1, []byte{byte(i), 0, 0, 0})}}); err != nil {
					t.Error(err)
				}
				cb.Barrier()
			}
			if err := cb.Commit(); err != nil {
				t.Error(err)
			}
			// Pollers message the command buffer until it completes,
			// unsynchronised with the waiters' calls inside Wait.
			var polls sync.WaitGroup
			for range waiters {
				polls.Go(func() {
					for cb.Status() == gpu.Committed {
					}
				})
			}
			for range waiters {
				polls.Go(func() {
					if err := cb.Wait(); err != nil {
						t.Error(err)
					}
					if s := cb.Status(); s != gpu.Completed {
						t.Errorf("status %v after Wait", s)
					}
				})
			}
			polls.Wait()
		})
	}
	wg.Wait()
	n := f.counts()
	if n[cCommandBuffer] != cbs || n[cWait] != cbs || n[cRelease] != 2*cbs || n[cRetain] != 2*cbs {
		t.Errorf("%d command buffers, %d waits, %d retains, %d releases; want %d, %d, %d, %d",
			n[cCommandBuffer], n[cWait], n[cRetain], n[cRelease], cbs, cbs, 2*cbs, 2*cbs)
	}
	if f.pools != 0 {
		t.Errorf("%d autorelease pools left open", f.pools)
	}
}
