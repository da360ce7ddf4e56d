// Package gputest opens the device that kernel and model tests run on, so
// the same tests run through every driver: the sim by default, the CUDA
// driver where $PETAL_GPU=cuda (on a machine with an NVIDIA GPU; see
// tools/cuda).
package gputest

import (
	"os"
	"sync"
	"testing"

	"petal/gpu"
	"petal/gpu/cuda"
	"petal/gpu/sim"
)

// Driver is the driver tests run on: "sim" or "cuda" ($PETAL_GPU).
func Driver() string {
	if os.Getenv("PETAL_GPU") == "cuda" {
		return "cuda"
	}
	return "sim"
}

var (
	cudaOnce sync.Once
	cudaDev  *cuda.Device
	cudaErr  error
)

// Open returns a device for t. On the sim it is a new device, checking for
// races unless fast, closed when t ends. On CUDA it is the process's one
// device (a context per test would cost more than most tests), whose Close
// does nothing; hazards there are compute-sanitizer's to find.
func Open(t testing.TB, fast bool) gpu.Device {
	t.Helper()
	if Driver() == "cuda" {
		cudaOnce.Do(func() { cudaDev, cudaErr = cuda.Open(cuda.Options{}) })
		if cudaErr != nil {
			t.Fatalf("PETAL_GPU=cuda: %v", cudaErr)
		}
		return shared{cudaDev}
	}
	d, err := sim.Open(sim.Options{Fast: fast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// shared is the process's CUDA device, which tests may close as they would
// their own.
type shared struct{ *cuda.Device }

func (shared) Close() error { return nil }

// OpenOwn is Open, but on CUDA a device of t's own, closed when t ends, so
// that its Close prints what $PETAL_CUDA_PROFILE=1 collected (a benchmark
// that loads a model once pays for the context once).
func OpenOwn(t testing.TB, fast bool) gpu.Device {
	t.Helper()
	if Driver() != "cuda" {
		return Open(t, fast)
	}
	d, err := cuda.Open(cuda.Options{})
	if err != nil {
		t.Fatalf("PETAL_GPU=cuda: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
