package selftest

import (
	"testing"

	"petal/gpu/sim"
	"petal/shaders"
)

// Every case passes on the race-checking sim.
func TestCasesPassOnSim(t *testing.T) {
	d, err := sim.Open(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	k := shaders.NewKernels(d)
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			r, err := c.Run(k)
			if err != nil {
				t.Fatal(err)
			}
			if r.Bytes <= 0 {
				t.Errorf("%d bytes bound", r.Bytes)
			}
		})
	}
}
