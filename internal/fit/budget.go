package fit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"

	"petal/gpu"
)

// GiB is the unit of Macs' memory sizes: Apple's "32 GB" are 32 GiB.
const GiB = 1 << 30

// Limits of a simulated Mac's memory, in GiB: Apple silicon Macs ship with
// 8 to 512 GB.
const (
	MinMacMemoryGiB = 8
	MaxMacMemoryGiB = 512
)

// largeMacGiB is where macOS's working-set rule changes (see
// [WorkingSetFraction]).
const largeMacGiB = 36

// meminfoPath is where Linux reports available memory.
const meminfoPath = "/proc/meminfo"

// ErrNoBudget says the machine's GPU memory budget could not be found.
var ErrNoBudget = errors.New("fit: cannot tell this machine's GPU memory budget (pass --memory-gb)")

// Budget is the memory the model may use.
type Budget struct {
	Bytes int64
	// Source says where Bytes came from, for the user.
	Source string
	// Mac says the budget is a Mac's, real or simulated: the advice then
	// speaks of Macs, and never off one.
	Mac bool
}

// WorkingSetFraction is the share of a Mac's memory that Metal's
// recommendedMaxWorkingSetSize grants the GPU by default: 2/3 below 36
// GiB, 3/4 from 36 GiB. That is the value macOS 13 to 15 reported on
// Apple silicon (16 GB: 10922.67 MiB; 32 GB: 21845.34 MiB; 36 GB: 27 GiB;
// 64 GB: 48 GiB; 128 GB: 96 GiB in llama.cpp's logs). Newer systems report
// somewhat more on some machines (about 22.4 GiB on 32 GB, 107.5 GiB on
// 128 GB under macOS 26), so a simulated Mac errs on the small side; on a
// real Mac, [Host] reads the value itself.
func WorkingSetFraction(memoryGiB float64) (num, den int64) {
	if memoryGiB < largeMacGiB {
		return 2, 3
	}
	return 3, 4
}

// SimulatedMac is the budget of an Apple silicon Mac with memoryGiB of
// memory (Apple's "32 GB" is 32 GiB).
func SimulatedMac(memoryGiB float64) (Budget, error) {
	if math.IsNaN(memoryGiB) || memoryGiB < MinMacMemoryGiB || memoryGiB > MaxMacMemoryGiB {
		return Budget{}, fmt.Errorf("fit: a Mac has %d to %d GB of memory, not %g", MinMacMemoryGiB, MaxMacMemoryGiB, memoryGiB)
	}
	num, den := WorkingSetFraction(memoryGiB)
	return Budget{
		Bytes: int64(memoryGiB*GiB) * num / den,
		Source: fmt.Sprintf("simulated %g GB Mac: Metal's working set is %d/%d of its memory; Apple's %g GB are %s",
			memoryGiB, num, den, memoryGiB, FormatBytes(int64(memoryGiB*GiB))),
		Mac: true,
	}, nil
}

// Host is this machine's budget where the model's memory is the host's
// (the CPU backend, the simulator): the memory Linux reports available; on
// a Mac, the share of its memory Metal grants the GPU by default
// ([WorkingSetFraction]), as the machine is one memory for both.
func Host() (Budget, error) {
	switch runtime.GOOS {
	case "darwin":
		n, err := macMemory()
		if err != nil {
			return Budget{}, fmt.Errorf("%w: %w", ErrNoBudget, err)
		}
		num, den := WorkingSetFraction(float64(n) / GiB)
		return Budget{Bytes: n / den * num, Source: fmt.Sprintf("%d/%d of this Mac's memory, Metal's default working set", num, den), Mac: true}, nil
	case "linux":
		f, err := os.Open(meminfoPath)
		if err != nil {
			return Budget{}, fmt.Errorf("%w: %w", ErrNoBudget, err)
		}
		defer f.Close()
		n, err := memAvailable(f)
		if err != nil {
			return Budget{}, fmt.Errorf("%w: %w", ErrNoBudget, err)
		}
		return Budget{Bytes: n, Source: "the memory this machine has available, MemAvailable"}, nil
	}
	return Budget{}, fmt.Errorf("%w: no probe for %s", ErrNoBudget, runtime.GOOS)
}

// Device is the budget of the GPU that will run the model, from its
// gpu.Info (the caller has opened it): what its driver says the GPU can
// use, Metal's recommendedMaxWorkingSetSize on a Mac, the memory free on
// an NVIDIA card (cuMemGetInfo).
func Device(info gpu.Info) (Budget, error) {
	ws := info.RecommendedMaxWorkingSetSize
	if ws == 0 || ws > math.MaxInt64 {
		return Budget{}, fmt.Errorf("%w: %s reports a working set of %d bytes", ErrNoBudget, info.Name, ws)
	}
	// Only Metal devices run on macOS.
	return Budget{Bytes: int64(ws), Source: "the memory " + info.Name + " reports it can use", Mac: runtime.GOOS == "darwin"}, nil
}

// FormatBytes writes n in decimal units, as disks, the Hugging Face Hub
// and the web UI count them (19.5 GB, not GiB), as the UI writes them:
// one decimal below 100 of a unit, none from 100.
func FormatBytes(n int64) string {
	if n < 0 {
		return "-" + FormatBytes(-n)
	}
	units := []string{"B", "KB", "MB", "GB", "TB"}
	v, i := float64(n), 0
	for v >= 1000 && i < len(units)-1 {
		v /= 1000
		i++
	}
	if v >= 100 || i == 0 {
		return fmt.Sprintf("%.0f %s", v, units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// memAvailable reads MemAvailable from /proc/meminfo contents.
func memAvailable(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("fit: odd MemAvailable line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
			return 0, fmt.Errorf("fit: odd MemAvailable line %q", sc.Text())
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("fit: no MemAvailable line in " + meminfoPath)
}
