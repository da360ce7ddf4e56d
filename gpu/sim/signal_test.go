package sim_test

import (
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
