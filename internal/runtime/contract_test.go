package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"petal/frontend/contracttest"
	"petal/internal/doctor"
	"petal/internal/fit"
	"petal/internal/hub"
)

// TestUIContractFixtures adds the replies composed here to the UI's
// contract fixtures (see frontend/contracttest): the Setup screen's fit
// verdict as a Mac, an NVIDIA machine and another machine would give it, and the doctor's.
func TestUIContractFixtures(t *testing.T) {
	// No installed checkpoint: the verdict is for the published model's sizes.
	t.Setenv(hub.EnvModels, t.TempDir())
	budget := func() (fit.Budget, error) { return fit.Budget{Bytes: 24 << 30, Source: "a test's 24 GiB"}, nil }
	// A measurement kept nowhere: a kept one's path is the test's temporary folder.
	cpu := &cpuSpeed{
		key: func() (cpuKey, error) {
			return cpuKey{CPU: "AMD EPYC", Cores: 2, Version: "build 0123456789abcdef"}, nil
		},
		measure: func(context.Context, time.Duration) (float64, error) { return 10.5e9, nil },
		now:     func() time.Time { return time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC) },
	}
	bodies := map[string][]byte{}
	for name, backend := range map[string]string{"runtime-fit-metal.json": "metal", "runtime-fit-cpu.json": "cpu", "runtime-fit-cuda.json": "cuda"} {
		v, err := qwenFit(32768, budget, backend, cpu)
		if err != nil {
			t.Fatal(err)
		}
		if bodies[name], err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}

	r := &doctor.Report{
		Backend: "sim", Device: "Simulated Apple M3 Max", OS: "darwin", Arch: "arm64", Shaders: "abc123",
		BandwidthGBps: 400, Started: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Seconds: 2, Pass: false, Failed: 1,
		Checks: []doctor.Check{
			{Section: "device", Name: "open", Pass: true, Message: "Apple M3 Max", Seconds: 0.1},
			{Section: "kernel", Name: "qmv", Pass: false, Message: "max error 0.3", Seconds: 0.2, GBPerSecond: 120, BandwidthShare: 0.3},
		},
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	var err error
	if bodies["runtime-doctor.json"], err = json.Marshal(doctorReply{Report: r, Text: text.String()}); err != nil {
		t.Fatal(err)
	}
	contracttest.Check(t, "runtime-", bodies)
}
