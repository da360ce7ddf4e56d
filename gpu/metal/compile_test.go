package metal

import (
	"errors"
	"strings"
	"testing"

	"petal/gpu"
)

func TestParseMacOSVersion(t *testing.T) {
	for in, want := range map[string]macOSVersion{
		"14":       {14, 0, 0},
		"14.6":     {14, 6, 0},
		"15.0.1\n": {15, 0, 1},
		"26.1":     {26, 1, 0},
	} {
		got, err := parseMacOSVersion(in)
		if err != nil || got != want {
			t.Errorf("parseMacOSVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fourteen", "14.x", "14.-1", "1.2.3.4"} {
		if v, err := parseMacOSVersion(bad); err == nil {
			t.Errorf("parseMacOSVersion(%q) = %v, want an error", bad, v)
		}
	}
}

func TestCheckMacOS(t *testing.T) {
	for _, s := range []string{"14.0", "14.6.1", "15.2", "26.0"} {
		v, _ := parseMacOSVersion(s)
		if err := checkMacOS(v); err != nil {
			t.Errorf("macOS %s refused: %v", s, err)
		}
	}
	for _, s := range []string{"13.6.7", "12.0", "10.16"} {
		v, _ := parseMacOSVersion(s)
		err := checkMacOS(v)
		if !errors.Is(err, gpu.ErrUnsupported) || !strings.Contains(err.Error(), "needs macOS 14") || !strings.Contains(err.Error(), s) {
			t.Errorf("macOS %s: %v; want gpu.ErrUnsupported saying it needs macOS 14 and naming %s", s, err, s)
		}
	}
}

// TestMathForTurnsFastMathOff: every accepted macOS gets exactly one way of
// turning fast math off, the one it has.
func TestMathForTurnsFastMathOff(t *testing.T) {
	for s, want := range map[string]mathSettings{
		"14.0":   {fastMathOff: true},
		"14.7.2": {fastMathOff: true},
		"15.0":   {safeMathMode: true},
		"26.1":   {safeMathMode: true},
	} {
		v, _ := parseMacOSVersion(s)
		if got := mathFor(v); got != want {
			t.Errorf("mathFor(%s) = %+v, want %+v", s, got, want)
		}
	}
}
