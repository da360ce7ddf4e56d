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
	"petal/gpu/cuda"
	"petal/gpu/metal"
)

// GiB is the unit every printed size is in.
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
		Bytes:  int64(memoryGiB*GiB) * num / den,
		Source: fmt.Sprintf("simulated %g GB Mac: Metal's working set is %d/%d of its memory", memoryGiB, num, den),
	}, nil
}

// Host is this machine's budget: Metal's recommendedMaxWorkingSetSize on
// a Mac, the memory Linux reports available elsewhere.
func Host() (Budget, error) {
	switch runtime.GOOS {
	case "darwin":
		return Metal()
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
		return Budget{Bytes: n, Source: "MemAvailable of this machine"}, nil
	}
	return Budget{}, fmt.Errorf("%w: no probe for %s", ErrNoBudget, runtime.GOOS)
}

// Metal is the budget of this Mac's GPU: Metal's
// recommendedMaxWorkingSetSize. It fails where there is no Metal device.
func Metal() (Budget, error) {
	dev, err := metal.Open()
	if errors.Is(err, gpu.ErrUnsupported) {
		return Budget{}, err // no Mac: --memory-gb would not make Metal run
	}
	if err != nil {
		return Budget{}, fmt.Errorf("%w: %w", ErrNoBudget, err)
	}
	defer dev.Close()
	ws := dev.Info().RecommendedMaxWorkingSetSize
	if ws == 0 || ws > math.MaxInt64 {
		return Budget{}, fmt.Errorf("%w: Metal reports a working set of %d bytes", ErrNoBudget, ws)
	}
	return Budget{Bytes: int64(ws), Source: "Metal's recommendedMaxWorkingSetSize of this Mac"}, nil
}

// CUDA is the budget of this machine's first NVIDIA GPU: the memory free on
// it now (cuMemGetInfo), which is what the weights, caches and activations
// must fit in. It fails where there is no NVIDIA driver or GPU.
func CUDA() (Budget, error) {
	dev, err := cuda.Open(cuda.Options{})
	if errors.Is(err, gpu.ErrUnsupported) {
		return Budget{}, err
	}
	if err != nil {
		return Budget{}, fmt.Errorf("%w: %w", ErrNoBudget, err)
	}
	defer dev.Close()
	info := dev.Info()
	if info.RecommendedMaxWorkingSetSize == 0 || info.RecommendedMaxWorkingSetSize > math.MaxInt64 {
		return Budget{}, fmt.Errorf("%w: CUDA reports %d bytes free", ErrNoBudget, info.RecommendedMaxWorkingSetSize)
	}
	return Budget{Bytes: int64(info.RecommendedMaxWorkingSetSize), Source: "free memory of " + info.Name}, nil
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
