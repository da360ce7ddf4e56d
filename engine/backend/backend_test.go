package backend

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint/checkpointtest"
	"petal/gpu"
)

func TestNamesAndUnknown(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"cpu", "sim", "metal", "cuda"}) {
		t.Fatalf("Names() = %v", got)
	}
	remove := Register("b-scripted", func(string) (engine.Model, error) { return nil, errors.New("scripted") })
	defer Register("a-scripted", func(string) (engine.Model, error) { return nil, nil })()
	if got := Names(); !slices.Equal(got, []string{"cpu", "sim", "metal", "cuda", "a-scripted", "b-scripted"}) {
		t.Fatalf("with two registered, Names() = %v", got)
	}
	if _, err := Open("b-scripted", t.TempDir()); err == nil || err.Error() != "scripted" {
		t.Errorf("Open of a registered backend: %v, want its own error", err)
	}
	remove()
	for _, err := range []error{Check("b-scripted"), openErr("b-scripted"), Check("vulkan")} {
		if err == nil || !strings.Contains(err.Error(), "have cpu, sim, metal, cuda, a-scripted)") {
			t.Errorf("an unknown backend: %v, want the choices named", err)
		}
	}
	if err := Check("sim"); err != nil {
		t.Errorf("Check(sim): %v", err)
	}
}

func openErr(name string) error {
	_, err := Open(name, ".")
	return err
}

// closeCounter counts how often its device is closed.
type closeCounter struct {
	gpu.Device
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return c.Device.Close() }

// TestGPUBackendClosesDevice: the device a GPU backend opens is closed
// with the model, and at once when the model fails to load, so neither
// path leaks it.
func TestGPUBackendClosesDevice(t *testing.T) {
	var dev *closeCounter
	open := onDevice(func() (gpu.Device, error) {
		d, err := openSim()
		dev = &closeCounter{Device: d}
		return dev, err
	})
	if _, err := open(t.TempDir()); err == nil {
		t.Fatal("an empty folder loaded")
	}
	if dev.closed != 1 {
		t.Errorf("a failed load closed the device %d times, want 1", dev.closed)
	}
	dir := t.TempDir()
	if err := checkpointtest.Write(dir, checkpointtest.Tiny()); err != nil {
		t.Fatal(err)
	}
	m, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dev.closed != 0 {
		t.Fatalf("the device was closed under a loaded model")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if dev.closed != 1 {
		t.Errorf("closing the model closed the device %d times, want 1", dev.closed)
	}
}

// TestOpenDevice: the GPU backends open their device for the caller to
// size a load with; the CPU backend has none.
func TestOpenDevice(t *testing.T) {
	if dev, ok, err := OpenDevice("cpu"); ok || dev != nil || err != nil {
		t.Errorf("OpenDevice(cpu) = %v, %v, %v; want no device", dev, ok, err)
	}
	dev, ok, err := OpenDevice("sim")
	if !ok || err != nil {
		t.Fatalf("OpenDevice(sim): %v, %v", ok, err)
	}
	defer dev.Close()
	if dev.Info().Name == "" {
		t.Error("the sim's device has no name")
	}
}
