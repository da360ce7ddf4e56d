package sim_test

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"petal/gpu"
	"petal/gpu/sim"
)

// scaleDispatch is y = x * scale through features.metal's constants kernel.
func scaleDispatch(t *testing.T, d gpu.Device, scale int32, x, y gpu.Buffer) *gpu.Dispatch {
	p := mustPipeline(t, d, features(t), "constants", gpu.IntConstant(0, scale))
	return &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(x.Len()/4, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, x, 0), gpu.BufferArg(1, y, 0)}}
}

// TestMissingBarrierShows runs two dependent dispatches with and without a
// barrier: the sim runs a level's dispatches in reverse, so the missing
// barrier leaves the second reading stale data.
func TestMissingBarrierShows(t *testing.T) {
	d := openSim(t, sim.Options{})
	for _, barrier := range []bool{true, false} {
		in := buffer(t, d, []uint32{1, 2, 3, 4})
		mid, _ := d.NewBuffer(16)
		out, _ := d.NewBuffer(16)
		cb, _ := d.NewCommandBuffer()
		if err := cb.Dispatch(scaleDispatch(t, d, 2, in, mid)); err != nil {
			t.Fatal(err)
		}
		if barrier {
			cb.Barrier()
		}
		if err := cb.Dispatch(scaleDispatch(t, d, 3, mid, out)); err != nil {
			t.Fatal(err)
		}
		if err := cb.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := cb.Wait(); err != nil {
			t.Fatal(err)
		}
		wantLevels, want := 1, uint32(0)
		if barrier {
			wantLevels, want = 2, 6
		}
		if got := u32(out, 0); got != want {
			t.Errorf("barrier=%v: out[0] = %d, want %d", barrier, got, want)
		}
		if tr := cb.Trace(); tr.Dispatches() != 2 || tr.Levels() != wantLevels {
			t.Errorf("barrier=%v: trace has %d dispatches in %d levels", barrier, tr.Dispatches(), tr.Levels())
		}
		if tr := cb.Trace(); tr.Events[0].Pipeline != "constants" || tr.Events[0].Bindings[1].Buffer != mid {
			t.Errorf("trace does not record the pipeline and bindings: %+v", tr.Events[0])
		}
	}
}

// TestCommandBuffersRunInCommitOrder keeps two in flight, as decode does.
func TestCommandBuffersRunInCommitOrder(t *testing.T) {
	d := openSim(t, sim.Options{})
	in := buffer(t, d, []uint32{5, 6, 7, 8})
	mid, _ := d.NewBuffer(16)
	out, _ := d.NewBuffer(16)
	first, _ := d.NewCommandBuffer()
	second, _ := d.NewCommandBuffer()
	if err := second.Dispatch(scaleDispatch(t, d, 3, mid, out)); err != nil {
		t.Fatal(err)
	}
	if err := first.Dispatch(scaleDispatch(t, d, 2, in, mid)); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatal(err)
	}
	if first.Status() != gpu.Completed || second.Status() != gpu.Completed {
		t.Errorf("statuses %v, %v", first.Status(), second.Status())
	}
	if got := u32(out, 3); got != 48 {
		t.Errorf("out[3] = %d, want 48", got)
	}
}

func TestCommandBufferMisuse(t *testing.T) {
	d := openSim(t, sim.Options{})
	in := buffer(t, d, []uint32{1})
	out, _ := d.NewBuffer(4)
	cb, _ := d.NewCommandBuffer()
	if err := cb.Wait(); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("wait before commit: %v", err)
	}
	good := scaleDispatch(t, d, 1, in, out)
	bad := *good
	bad.Threads = size(2048, 1)
	if err := cb.Dispatch(&bad); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("2048 threads: %v", err)
	}
	if err := cb.Dispatch(good); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("encoding error is not sticky: %v", err)
	}
	if err := cb.Commit(); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("commit after encoding error: %v", err)
	}
	if err := cb.Wait(); !errors.Is(err, gpu.ErrInvalid) || cb.Status() != gpu.Failed {
		t.Errorf("wait after encoding error: %v, status %v", err, cb.Status())
	}

	cb2, _ := d.NewCommandBuffer()
	if err := cb2.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb2.Commit(); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("second commit: %v", err)
	}
	if err := cb2.Dispatch(good); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("dispatch after commit: %v", err)
	}
	if err := cb2.Wait(); err != nil {
		t.Errorf("empty command buffer: %v", err)
	}

	other := openSim(t, sim.Options{})
	foreign := scaleDispatch(t, other, 1, in, out)
	cb3, _ := d.NewCommandBuffer()
	if err := cb3.Dispatch(foreign); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("pipeline of another device: %v", err)
	}
	if _, err := d.NewBuffer(0); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("empty buffer: %v", err)
	}
	out.Release()
	out.Release() // a second release is a no-op
	cb4, _ := d.NewCommandBuffer()
	if err := cb4.Dispatch(good); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("released buffer: %v", err)
	}
}

// TestRefusedCommitEndsWait commits a command buffer that cannot run (an
// encoding error, a closed device): Commit says why, Wait returns the same
// error instead of blocking, and a second Commit is refused, not a panic.
func TestRefusedCommitEndsWait(t *testing.T) {
	d := openSim(t, sim.Options{})
	in := buffer(t, d, []uint32{1})
	out, _ := d.NewBuffer(4)
	bad := *scaleDispatch(t, d, 1, in, out)
	bad.Threads = size(2048, 1)

	encoded, _ := d.NewCommandBuffer()
	if err := encoded.Dispatch(&bad); !errors.Is(err, gpu.ErrInvalid) {
		t.Fatalf("2048 threads: %v", err)
	}
	closed, _ := d.NewCommandBuffer()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cb   gpu.CommandBuffer
		want error
	}{{"encoding error", encoded, gpu.ErrInvalid}, {"closed device", closed, gpu.ErrClosed}} {
		if err := c.cb.Commit(); !errors.Is(err, c.want) {
			t.Errorf("%s: Commit = %v, want %v", c.name, err, c.want)
		}
		waited := make(chan error, 1)
		go func() { waited <- c.cb.Wait() }()
		select {
		case err := <-waited:
			if !errors.Is(err, c.want) || c.cb.Status() != gpu.Failed {
				t.Errorf("%s: Wait = %v, status %v", c.name, err, c.cb.Status())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Wait still blocked 10s after a refused Commit", c.name)
		}
		if err := c.cb.Commit(); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("%s: second Commit = %v", c.name, err)
		}
	}
}

// TestWrapNoCopy reads a read-only mapping in place, as the checkpoint
// loader's shards are read.
func TestWrapNoCopy(t *testing.T) {
	d := openSim(t, sim.Options{})
	page := os.Getpagesize()
	f, err := os.CreateTemp(t.TempDir(), "shard")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, page+16)
	for i := 0; i < 4; i++ {
		data[page+4*i] = byte(10 + i)
	}
	f.Write(data)
	m, err := syscall.Mmap(int(f.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if _, err := d.WrapNoCopy(m[4:]); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("unaligned wrap: %v", err)
	}
	w, err := d.WrapNoCopy(m)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	if &w.Contents()[0] != &m[0] {
		t.Error("WrapNoCopy copied the region")
	}
	out, _ := d.NewBuffer(16)
	disp := scaleDispatch(t, d, 2, out, out) // sizes the grid: 4 threads
	disp.Args[0] = gpu.BufferArg(0, w, page)
	if err := runOne(t, d, disp); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if got := u32(out, i); got != uint32(2*(10+i)) {
			t.Errorf("out[%d] = %d, want %d", i, got, 2*(10+i))
		}
	}
}

// TestFastSkipsTheRaceCheck shows what Options.Fast gives up.
func TestFastSkipsTheRaceCheck(t *testing.T) {
	for _, fast := range []bool{false, true} {
		d := openSim(t, sim.Options{Fast: fast})
		src := testdataSource(t, "rmsnorm_no_barrier.metal")
		p := mustPipeline(t, d, src, "rmsnorm_f32_bf16")
		err := runOne(t, d, rmsnormSetup(t, d, p))
		if fast != (err == nil) || (!fast && !errors.Is(err, sim.ErrRace)) {
			t.Errorf("fast=%v: %v", fast, err)
		}
	}
}

// TestCrossGroupRace: two threadgroups writing one element is a race the
// second, reversed run exposes.
func TestCrossGroupRace(t *testing.T) {
	d := openSim(t, sim.Options{Workers: 1})
	p := mustPipeline(t, d, features(t), "last_group_wins")
	out, _ := d.NewBuffer(4)
	err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(40, 1), Threads: size(32, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, out, 0)}})
	if !errors.Is(err, sim.ErrRace) {
		t.Errorf("got %v, want sim.ErrRace", err)
	}
}

// TestConcurrentWait holds the gpu contract both drivers keep: any number of
// goroutines may Wait on one command buffer and poll its Status, and all see
// the same outcome (run it with -race). A failing buffer (a divide by zero
// in features.metal's divide kernel) gives every waiter its error.
func TestConcurrentWait(t *testing.T) {
	d := openSim(t, sim.Options{Fast: true})
	p := mustPipeline(t, d, features(t), "divide")
	for _, divisor := range []uint32{3, 0} {
		for range 10 {
			in := buffer(t, d, []uint32{1, 2, divisor, 4})
			out, _ := d.NewBuffer(16)
			cb, _ := d.NewCommandBuffer()
			if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(4, 1),
				Args: []gpu.Arg{gpu.BufferArg(0, in, 0), gpu.BufferArg(1, out, 0)}}); err != nil {
				t.Fatal(err)
			}
			if err := cb.Commit(); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 8)
			for range cap(errs) {
				go func() {
					cb.Status()
					errs <- cb.Wait()
				}()
			}
			for range cap(errs) {
				err := <-errs
				if (divisor == 0) != errors.Is(err, sim.ErrTrap) {
					t.Fatalf("divisor %d: Wait = %v", divisor, err)
				}
			}
			if want := map[bool]gpu.Status{true: gpu.Failed, false: gpu.Completed}[divisor == 0]; cb.Status() != want {
				t.Fatalf("divisor %d: status %v after Wait, want %v", divisor, cb.Status(), want)
			}
		}
	}
}
