package doctor

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"petal/gpu"
)

// minMacOS is the oldest macOS the Metal backend runs on: the kernels need
// MSL 3.1, which macOS 14 brought.
const minMacOS = 14

// osCheck adds the OS check; it runs before the device opens, so a Mac too
// old for the Metal backend says why even when the device cannot open.
func (run *runner) osCheck(backend string) {
	os := Check{Section: SectionDevice, Name: "operating system", Pass: true, Message: run.r.OS + " " + runtime.GOARCH}
	if backend == "metal" {
		major, ok := macOSMajor(run.r.OS)
		switch {
		case !ok:
			os.Pass, os.Message = false, fmt.Sprintf("cannot read the macOS version (%q); Petal's Metal kernels need macOS %d or later", run.r.OS, minMacOS)
		case major < minMacOS:
			os.Pass, os.Message = false, fmt.Sprintf("%s: Petal's Metal kernels need macOS %d or later (MSL 3.1)", run.r.OS, minMacOS)
		}
	}
	run.add(os)
}

// deviceChecks adds the GPU family, working-set and bandwidth checks of
// an opened device, an Apple GPU's where apple is set.
func (run *runner) deviceChecks(apple bool, info gpu.Info) {
	fam := Check{Section: SectionDevice, Name: "GPU family", Pass: true}
	switch {
	case !apple:
		fam.Message = "none: the sim stands in for an Apple GPU (Apple7+ limits enforced)"
	case info.AppleFamily < gpu.MinAppleFamily:
		fam.Pass, fam.Message = false, fmt.Sprintf("Apple%d: Petal needs Apple%d (M1) or later", info.AppleFamily, gpu.MinAppleFamily)
	default:
		fam.Message = fmt.Sprintf("Apple%d", info.AppleFamily)
	}
	run.add(fam)

	ws := Check{Section: SectionDevice, Name: "working set", Pass: info.RecommendedMaxWorkingSetSize > 0,
		Message: fmt.Sprintf("%.1f GiB the device can use (recommendedMaxWorkingSetSize), unified memory %v",
			float64(info.RecommendedMaxWorkingSetSize)/(1<<30), info.UnifiedMemory)}
	if !ws.Pass {
		ws.Message = "the device reports a working set of 0 bytes"
	}
	run.add(ws)

	bw := Check{Section: SectionDevice, Name: "memory bandwidth", Pass: true, Message: "not known for " + info.Name + ": kernels are timed without a share"}
	if g := appleBandwidth(info.Name); g > 0 {
		bw.Message = fmt.Sprintf("%g GB/s (Apple's figure for %s)", g, info.Name)
	}
	run.add(bw)
}

// macOSMajor is the major version of an osVersion string "macOS 14.5".
func macOSMajor(s string) (int, bool) {
	v, ok := strings.CutPrefix(s, "macOS ")
	if !ok {
		return 0, false
	}
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return n, err == nil
}

// appleChipGBps is each Apple silicon chip's memory bandwidth as Apple
// states it, keyed by the name Metal gives its GPU. Where binned parts of
// one chip differ (M3 Max, M4 Max) it is the full part's, so a share
// against it is a lower bound.
var appleChipGBps = map[string]float64{
	"Apple M1": 68.25, "Apple M1 Pro": 200, "Apple M1 Max": 400, "Apple M1 Ultra": 800,
	"Apple M2": 100, "Apple M2 Pro": 200, "Apple M2 Max": 400, "Apple M2 Ultra": 800,
	"Apple M3": 100, "Apple M3 Pro": 150, "Apple M3 Max": 400, "Apple M3 Ultra": 819,
	"Apple M4": 120, "Apple M4 Pro": 273, "Apple M4 Max": 546,
}

// appleBandwidth is the table's figure for the device named name, 0 for
// a name not in it.
func appleBandwidth(name string) float64 { return appleChipGBps[name] }

// skipGPU reports the checks that need a real GPU as skipped on an Apple
// GPU of family fam, below Apple7. Every Apple silicon GPU is Apple7 or
// later, so such a GPU is a virtual machine's paravirtual one (a hosted CI
// Mac's is Apple5), which the Metal driver refuses to open: these checks
// cannot run there, which is not a fault of the kernels or of the Mac
// Petal will run on.
func (run *runner) skipGPU(backend, name string, fam int, compileOnly bool) {
	why := fmt.Sprintf("skipped: %s is an Apple%d GPU, and Petal's Metal driver opens Apple%d (M1) or later only", orUnknown(name), fam, gpu.MinAppleFamily)
	run.add(Check{Section: SectionDevice, Name: "GPU family", Skipped: true,
		Message: fmt.Sprintf("Apple%d (%s): every Apple silicon GPU is Apple%d or later, so this is a virtual machine's paravirtual GPU; the checks that need a real GPU are skipped", fam, orUnknown(name), gpu.MinAppleFamily)})
	skipped := []Check{
		{Section: SectionDevice, Name: "open the " + backend + " device"},
		{Section: SectionCompile, Name: "every kernel function with each function-constant set the ops use"},
	}
	if !compileOnly {
		skipped = append(skipped,
			Check{Section: SectionKernel, Name: "every kernel's self-test against its Go reference"},
			Check{Section: SectionModel, Name: demoCheck})
	}
	for _, c := range skipped {
		c.Skipped, c.Message = true, why
		run.add(c)
	}
}
