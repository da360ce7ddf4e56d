package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"petal/internal/fit"
	"petal/internal/hub"
)

// fakeCPU is a cpuSpeed over a file in a test folder whose measurements
// are counted and return rate.
type fakeCPU struct {
	*cpuSpeed
	runs int
}

func newFakeCPU(t *testing.T, key cpuKey, rate float64) *fakeCPU {
	f := &fakeCPU{}
	f.cpuSpeed = &cpuSpeed{path: filepath.Join(t.TempDir(), "petal", cpuSpeedFile),
		key: func() (cpuKey, error) { return key, nil },
		measure: func(_ context.Context, d time.Duration) (float64, error) {
			if d != cpuMeasureTime {
				t.Errorf("measured for %v, want %v", d, cpuMeasureTime)
			}
			f.runs++
			return rate, nil
		},
		now: func() time.Time { return time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC) }}
	return f
}

var testKey = cpuKey{CPU: "Test CPU 9000", Cores: 2, Version: "v1 abc"}

func TestCPUSpeedMeasuresOnceAndKeepsIt(t *testing.T) {
	c := newFakeCPU(t, testKey, 12e9)
	for range 3 {
		m, err := c.get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.ReadBytesPerSecond != 12e9 || m.cpuKey != testKey {
			t.Fatalf("got %+v", m)
		}
	}
	if c.runs != 1 {
		t.Fatalf("measured %d times, want once", c.runs)
	}
	// The next start reads the file and measures nothing.
	next := newFakeCPU(t, testKey, 1)
	next.path = c.path
	if m, err := next.get(context.Background()); err != nil || m.ReadBytesPerSecond != 12e9 || next.runs != 0 {
		t.Fatalf("after a restart: %+v, %v, %d runs", m, err, next.runs)
	}
}

// TestCPUSpeedMeasuresAgain: another CPU, core count or Petal build, and a
// damaged file, each measure again and keep the new figure.
func TestCPUSpeedMeasuresAgain(t *testing.T) {
	for name, change := range map[string]func(*fakeCPU){
		"another CPU":   func(f *fakeCPU) { f.key = func() (cpuKey, error) { return cpuKey{"Other", 2, "v1 abc"}, nil } },
		"another count": func(f *fakeCPU) { f.key = func() (cpuKey, error) { return cpuKey{"Test CPU 9000", 8, "v1 abc"}, nil } },
		"another build": func(f *fakeCPU) { f.key = func() (cpuKey, error) { return cpuKey{"Test CPU 9000", 2, "v2 def"}, nil } },
		"damaged file":  func(f *fakeCPU) { os.WriteFile(f.path, []byte(`{"cpu":`), 0o644) },
		"zero rate": func(f *fakeCPU) {
			b, _ := json.Marshal(cpuMeasurement{cpuKey: testKey})
			os.WriteFile(f.path, b, 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			first := newFakeCPU(t, testKey, 12e9)
			if _, err := first.get(context.Background()); err != nil {
				t.Fatal(err)
			}
			next := newFakeCPU(t, testKey, 7e9)
			next.path = first.path
			change(next)
			m, err := next.get(context.Background())
			if err != nil || m.ReadBytesPerSecond != 7e9 || next.runs != 1 {
				t.Fatalf("got %+v, %v after %d runs; want a new measurement", m, err, next.runs)
			}
			if kept, ok := next.kept(m.cpuKey); !ok || kept.ReadBytesPerSecond != 7e9 {
				t.Fatalf("the new figure was not kept: %+v", kept)
			}
		})
	}
}

func TestCPUSpeedFailures(t *testing.T) {
	// A measurement that fails is an error, and nothing is kept.
	c := newFakeCPU(t, testKey, 0)
	c.measure = func(context.Context, time.Duration) (float64, error) { return 0, errors.New("no cores today") }
	if _, err := c.get(context.Background()); err == nil || !strings.Contains(err.Error(), "no cores today") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(c.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed measurement left a file: %v", err)
	}
	// A folder that cannot be written still gives this run's figure.
	ro := newFakeCPU(t, testKey, 5e9)
	ro.path = filepath.Join(t.TempDir(), "file", cpuSpeedFile)
	os.WriteFile(filepath.Dir(ro.path), nil, 0o644) // a file where the folder should be
	if m, err := ro.get(context.Background()); err != nil || m.ReadBytesPerSecond != 5e9 {
		t.Fatalf("got %+v, %v", m, err)
	}
}

// TestQwenFitCPU: on the CPU backend the verdict carries this machine's
// figure, its tokens per second the rate over the bytes a token reads;
// without a figure it says why, and other backends are not measured.
func TestQwenFitCPU(t *testing.T) {
	t.Setenv(hub.EnvModels, t.TempDir())
	budget := func() (fit.Budget, error) { return fit.Budget{Bytes: 64 << 30, Source: "a test's 64 GiB"}, nil }
	c := newFakeCPU(t, testKey, 12e9)
	v, err := qwenFit(32768, budget, "cpu", c.cpuSpeed)
	if err != nil {
		t.Fatal(err)
	}
	f := v.(setupFit)
	if f.CPUDecode == nil || f.CPUDecode.ReadBytesPerSecond != 12e9 || f.CPUDecodeError != "" {
		t.Fatalf("got %+v, %q", f.CPUDecode, f.CPUDecodeError)
	}
	if want := 12e9 / float64(f.DecodeBytesPerToken); f.CPUDecode.TokensPerSecond != want {
		t.Fatalf("tokens/s %v, want %v", f.CPUDecode.TokensPerSecond, want)
	}
	if f.CPUDecode.Machine != "Test CPU 9000, 2 cores" || !strings.Contains(f.CPUDecode.How, c.path) {
		t.Fatalf("machine %q, how %q", f.CPUDecode.Machine, f.CPUDecode.How)
	}

	c.path = filepath.Join(t.TempDir(), cpuSpeedFile)
	c.measure = func(context.Context, time.Duration) (float64, error) { return 0, errors.New("interrupted") }
	v, err = qwenFit(32768, budget, "cpu", c.cpuSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if f := v.(setupFit); f.CPUDecode != nil || !strings.Contains(f.CPUDecodeError, "interrupted") {
		t.Fatalf("got %+v, %q", f.CPUDecode, f.CPUDecodeError)
	}
	for _, backend := range []string{"metal", "cuda"} {
		c.runs = 0
		v, err := qwenFit(32768, budget, backend, c.cpuSpeed)
		if err != nil {
			t.Fatal(err)
		}
		if f := v.(setupFit); f.CPUDecode != nil || f.CPUDecodeError != "" || c.runs != 0 {
			t.Fatalf("%s: measured the CPU: %+v", backend, f)
		}
	}
}

func TestThisCPU(t *testing.T) {
	k, err := thisCPU()
	if err != nil {
		t.Fatal(err)
	}
	if k.CPU == "" || k.Cores < 1 || k.Version == "" {
		t.Fatalf("got %+v", k)
	}
}

// TestCPUSpeedLoad: the load average while measuring is kept with the
// figure, and the screen's words say when other programs were busy enough
// to slow it.
func TestCPUSpeedLoad(t *testing.T) {
	c := newFakeCPU(t, testKey, 2e9)
	c.load = func() (float64, bool) { return 16.2, true }
	m, err := c.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.Load == nil || *m.Load != 16.2 {
		t.Fatalf("load %v", m.Load)
	}
	if kept, ok := c.kept(testKey); !ok || kept.Load == nil || *kept.Load != 16.2 {
		t.Fatalf("the load was not kept: %+v", kept)
	}
	if w := loadWords(m); !strings.Contains(w, "load average 16.2: other programs were busy") {
		t.Fatalf("busy: %q", w)
	}
	quiet := 0.4
	m.Load = &quiet
	if w := loadWords(m); w != ", at load average 0.4" {
		t.Fatalf("quiet: %q", w)
	}
	m.Load = nil
	if w := loadWords(m); w != "" {
		t.Fatalf("unknown: %q", w)
	}
}

func TestLoadAverage(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if l, ok := loadAverage(); ok {
			t.Fatalf("no /proc/loadavg, yet a load of %v", l)
		}
		return
	}
	if l, ok := loadAverage(); !ok || l < 0 {
		t.Fatalf("load %v, %v", l, ok)
	}
}
