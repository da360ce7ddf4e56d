package sim_test

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

// TestGoFaultsStillPanic checks that the sim's fault handler passes faults
// outside simulated kernels on to Go: a nil dereference in Go must still be
// a recoverable panic after the handler is installed.
func TestGoFaultsStillPanic(t *testing.T) {
	d := openSim(t, sim.Options{})
	in := buffer(t, d, []uint32{1})
	out, _ := d.NewBuffer(4)
	if err := runOne(t, d, scaleDispatch(t, d, 1, in, out)); err != nil {
		t.Fatal(err)
	}
	var p *gpu.Size
	recovered := func() (r any) {
		defer func() { r = recover() }()
		_ = p.X
		return nil
	}()
	if recovered == nil {
		t.Fatal("nil dereference did not panic")
	}
}

func TestTrapsAreReported(t *testing.T) {
	d := openSim(t, sim.Options{})
	src := features(t)
	p := mustPipeline(t, d, src, "divide")
	out, _ := d.NewBuffer(8)
	err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(2, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, buffer(t, d, []uint32{5, 0}), 0), gpu.BufferArg(1, out, 0)}})
	if !errors.Is(err, sim.ErrTrap) {
		t.Errorf("division by zero: %v", err)
	}

	p = mustPipeline(t, d, src, "shift_left")
	for _, c := range []struct {
		by   uint32
		trap bool
	}{{31, false}, {32, true}, {0xffffffff / 32, true}} {
		err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(2, 1),
			Args: []gpu.Arg{gpu.BufferArg(0, buffer(t, d, []uint32{0, c.by}), 0), gpu.BufferArg(1, out, 0)}})
		if c.trap != errors.Is(err, sim.ErrTrap) || c.trap != (err != nil) || c.trap && !strings.Contains(err.Error(), "shift") {
			t.Errorf("shift by %d: %v, want a trap: %t", c.by, err, c.trap)
		}
	}

	page := os.Getpagesize()
	m, err := syscall.Mmap(-1, 0, page, syscall.PROT_READ, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	ro, err := d.WrapNoCopy(m)
	if err != nil {
		t.Fatal(err)
	}
	p = mustPipeline(t, d, src, "store_one")
	err = runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(1, 1),
		Args: []gpu.Arg{gpu.BufferArg(0, ro, 0)}})
	if !errors.Is(err, sim.ErrOutOfBounds) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("write to read-only memory: %v", err)
	}
}

// TestOutOfBoundsBothEnds: reads past the end of a buffer and before its
// start (page-sized buffers start on the guard page's edge) are reported.
func TestOutOfBoundsBothEnds(t *testing.T) {
	d := openSim(t, sim.Options{})
	p := mustPipeline(t, d, features(t), "shifted_copy")
	n := os.Getpagesize() / 4
	x := f32buf(t, d, make([]float32, n))
	y, _ := d.NewBuffer(4 * n)
	for _, c := range []struct {
		shift int32
		want  error
		where string
	}{{0, nil, ""}, {1, sim.ErrOutOfBounds, "past the end"}, {-1, sim.ErrOutOfBounds, "before the start"}} {
		shift := []byte{byte(c.shift), byte(c.shift >> 8), byte(c.shift >> 16), byte(c.shift >> 24)}
		err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(n/64, 1), Threads: size(64, 1),
			Args: []gpu.Arg{gpu.BufferArg(0, x, 0), gpu.BufferArg(1, y, 0), gpu.BytesArg(2, shift)}})
		if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Errorf("shift %d: got %v, want %v", c.shift, err, c.want)
		}
		if c.want != nil && (err == nil || !strings.Contains(err.Error(), c.where) || !strings.Contains(err.Error(), "index [0]")) {
			t.Errorf("shift %d: %v does not say %q of index 0", c.shift, err, c.where)
		}
	}
}
