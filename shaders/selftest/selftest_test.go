package selftest

import (
	"testing"

	"petal/gpu/gputest"
	"petal/shaders"
)

// Every case passes on the race-checking sim.
func TestCasesPassOnSim(t *testing.T) {
	d := gputest.Open(t, false)
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

// The model-size timing setups run (on the fast sim: they are only timed).
func TestBenchesRun(t *testing.T) {
	d := gputest.Open(t, true)
	k := shaders.NewKernels(d)
	n := 0
	for _, c := range Cases() {
		r, err := c.Bench(k)
		if err != nil || r == nil {
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
			continue
		}
		n++
		if r.Bytes < 512<<10 {
			t.Errorf("%s: %d bytes at the model's size", c.Name, r.Bytes)
		}
		if _, err := r.Time(1); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	if n == 0 {
		t.Error("no case has a model-size setup")
	}
}
