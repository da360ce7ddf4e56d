package metal

import (
	"fmt"
	"strconv"
	"strings"

	"petal/gpu"
)

// The Mac checks and compile options that need no Mac to decide, so they
// are tested on every platform.

// minMacOS is the oldest macOS the driver accepts: MSL 3.1, which the
// kernels need for bfloat, arrived with macOS 14; on 13 every pipeline would
// fail to compile.
const minMacOS = 14

// macOSVersion is a macOS product version (kern.osproductversion).
type macOSVersion struct{ major, minor, patch int }

func (v macOSVersion) String() string {
	return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
}

// parseMacOSVersion reads "14", "14.6" or "15.0.1".
func parseMacOSVersion(s string) (macOSVersion, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) > 3 {
		return macOSVersion{}, fmt.Errorf("metal: macOS version %q has more than three parts", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return macOSVersion{}, fmt.Errorf("metal: macOS version %q: part %q is not a number", s, p)
		}
		n[i] = v
	}
	return macOSVersion{n[0], n[1], n[2]}, nil
}

// checkMacOS refuses a macOS older than minMacOS.
func checkMacOS(v macOSVersion) error {
	if v.major < minMacOS {
		return fmt.Errorf("%w: Petal's GPU backend needs macOS %d or later (this Mac runs macOS %s)", gpu.ErrUnsupported, minMacOS, v)
	}
	return nil
}

// mathSettings is how the driver turns fast math off on a given macOS
// (gpu/doc.go says why): MTLCompileOptions.fastMathEnabled defaults to YES,
// which lets the compiler assume no NaN and no infinity.
type mathSettings struct {
	// macOS 15 and later: mathMode = MTLMathModeSafe and
	// mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise,
	// which is what fastMathEnabled = NO means there.
	safeMathMode bool
	// macOS 14, which has only the one switch: fastMathEnabled = NO.
	fastMathOff bool
}

// mathFor picks the settings for macOS v (one that checkMacOS accepts).
func mathFor(v macOSVersion) mathSettings {
	if v.major >= 15 {
		return mathSettings{safeMathMode: true}
	}
	return mathSettings{fastMathOff: true}
}
