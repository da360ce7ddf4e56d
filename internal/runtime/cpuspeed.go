package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"petal/engine/cpu"
)

// cpuMeasureTime is how long the Setup screen's CPU speed is measured for:
// long enough for a few hundred of the measured products, short enough to
// wait for on the screen once.
const cpuMeasureTime = time.Second

// cpuSpeedFile is the file under Petal's cache folder that keeps the
// measurement for the next start.
const cpuSpeedFile = "cpu-speed.json"

// cpuKey is what a measurement holds for: the CPU, the cores Petal uses
// and the Petal build (whose kernels may be faster or slower than the one
// that measured).
type cpuKey struct {
	CPU     string `json:"cpu"`
	Cores   int    `json:"cores"`
	Version string `json:"version"`
}

// cpuMeasurement is one run of cpu.MeasureDecodeRead on this machine.
type cpuMeasurement struct {
	cpuKey
	ReadBytesPerSecond float64   `json:"read_bytes_per_second"`
	Measured           time.Time `json:"measured"`
	Seconds            float64   `json:"seconds"`
	// Load is the system's load average over the minute before, where
	// the system gives one (Linux): other programs' work slows the
	// measurement, and the screen says so.
	Load *float64 `json:"load_average,omitempty"`
}

// cpuSpeed is this machine's CPU decode rate, measured the first time it
// is asked for and kept in a file, so that each Petal build measures it
// once on each machine.
type cpuSpeed struct {
	// path is the file kept; "" keeps nothing (no cache folder).
	path string
	// key says which machine and build this is; measure times the
	// product; now is the clock and load the load average. Tests replace
	// them.
	key     func() (cpuKey, error)
	measure func(context.Context, time.Duration) (float64, error)
	now     func() time.Time
	load    func() (float64, bool)

	mu sync.Mutex // one measurement at a time: two would halve each other
}

// newCPUSpeed keeps the measurement in the user's cache folder.
func newCPUSpeed() *cpuSpeed {
	c := &cpuSpeed{key: thisCPU, measure: cpu.MeasureDecodeRead, now: time.Now, load: loadAverage}
	if dir, err := os.UserCacheDir(); err == nil {
		c.path = filepath.Join(dir, cacheFolder, cpuSpeedFile)
	}
	return c
}

// cacheFolder is Petal's folder in the user's cache folder (the demo
// model is unpacked there too).
const cacheFolder = "petal"

// get returns the kept measurement for this machine and build, else
// measures now and keeps it. A file that cannot be written costs a
// measurement at the next start, not this one's result.
func (c *cpuSpeed) get(ctx context.Context) (cpuMeasurement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, err := c.key()
	if err != nil {
		return cpuMeasurement{}, err
	}
	if m, ok := c.kept(key); ok {
		return m, nil
	}
	start := c.now()
	rate, err := c.measure(ctx, cpuMeasureTime)
	if err != nil {
		return cpuMeasurement{}, fmt.Errorf("measuring the CPU backend's decode: %w", err)
	}
	m := cpuMeasurement{cpuKey: key, ReadBytesPerSecond: rate, Measured: start.UTC().Truncate(time.Second),
		Seconds: cpuMeasureTime.Seconds()}
	if c.load != nil {
		if l, ok := c.load(); ok {
			m.Load = &l
		}
	}
	if c.path != "" {
		if b, err := json.MarshalIndent(m, "", "  "); err == nil {
			if os.MkdirAll(filepath.Dir(c.path), 0o755) == nil {
				_ = writeFileAtomic(c.path, append(b, '\n'))
			}
		}
	}
	return m, nil
}

// where says where the measurement is kept, for the screen.
func (c *cpuSpeed) where() string {
	if c.path == "" {
		return "not kept (this machine has no cache folder), so each start of Petal measures again"
	}
	return "kept in " + c.path + " (delete it to measure again)"
}

// kept is the file's measurement when it holds one for key.
func (c *cpuSpeed) kept(key cpuKey) (cpuMeasurement, bool) {
	if c.path == "" {
		return cpuMeasurement{}, false
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return cpuMeasurement{}, false
	}
	var m cpuMeasurement
	if json.Unmarshal(b, &m) != nil || m.cpuKey != key || !(m.ReadBytesPerSecond > 0) {
		return cpuMeasurement{}, false
	}
	return m, true
}

// writeFileAtomic writes b to path through a temporary file renamed over
// it, so that a reader never sees half a file.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// thisCPU is this machine's CPU, the cores Petal's CPU backend uses and
// this build of Petal.
func thisCPU() (cpuKey, error) {
	v, err := petalBuild()
	if err != nil {
		return cpuKey{}, err
	}
	return cpuKey{CPU: cpuName(), Cores: runtime.GOMAXPROCS(0), Version: v}, nil
}

// loadAverage is the system's load average over the last minute, where
// the system gives one (Linux's /proc/loadavg).
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	l, err := strconv.ParseFloat(f[0], 64)
	return l, err == nil
}

// cpuName is the CPU's model name where the system gives one (Linux's
// /proc/cpuinfo), else the operating system and architecture.
func cpuName() string {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// petalBuild names this build: its module version and commit where the
// build recorded a clean one, else a hash of the executable (go run and
// builds of changed trees record none that tells them apart).
var petalBuild = sync.OnceValues(func() (string, error) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" && modified == "false" {
			return bi.Main.Version + " " + rev, nil
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "build " + hex.EncodeToString(h.Sum(nil))[:16], nil
})
