package doctor

import (
	"strings"
	"testing"

	"petal/gpu"
)

func TestAppleBandwidth(t *testing.T) {
	for name, want := range map[string]float64{
		"Apple M1": 68.25, "Apple M2": 100, "Apple M2 Pro": 200, "Apple M2 Max": 400, "Apple M3 Ultra": 819,
		"Apple M4 Pro": 273, "Apple M9": 0, "Apple M2 Proton": 0, "Petal sim (2 workers, c++)": 0,
	} {
		if got := appleBandwidth(name); got != want {
			t.Errorf("%s: %g GB/s, want %g", name, got, want)
		}
	}
}

// The device checks hold a Mac to what the Metal backend needs and say
// what they found.
func TestDeviceChecks(t *testing.T) {
	checks := func(backend, os string, info gpu.Info) []Check {
		run := &runner{r: &Report{OS: os}}
		run.osCheck(backend)
		run.deviceChecks(backend == "metal", info)
		return run.r.Checks
	}
	good := gpu.Info{Name: "Apple M2 Pro", AppleFamily: 8, RecommendedMaxWorkingSetSize: 22 << 30, UnifiedMemory: true}
	for _, c := range checks("metal", "macOS 14.5", good) {
		if !c.Pass {
			t.Errorf("%s", c.Line())
		}
	}
	bad := checks("metal", "macOS 13.6.1", gpu.Info{Name: "Apple M0", AppleFamily: 6})
	for i, want := range []string{"need macOS 14 or later", "Petal needs Apple7", "working set of 0 bytes", "not known for Apple M0"} {
		if !strings.Contains(bad[i].Message, want) {
			t.Errorf("check %d: %q, want %q in it", i, bad[i].Message, want)
		}
	}
	if bad[0].Pass || bad[1].Pass || bad[2].Pass || !bad[3].Pass {
		t.Errorf("pass flags: %v %v %v %v", bad[0].Pass, bad[1].Pass, bad[2].Pass, bad[3].Pass)
	}
	// The sim has no family and runs on any OS.
	for _, c := range checks("sim", "linux 6.1", gpu.Info{Name: "Petal sim", RecommendedMaxWorkingSetSize: 1 << 30}) {
		if !c.Pass {
			t.Errorf("sim: %s", c.Line())
		}
	}
}
