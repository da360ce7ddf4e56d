package backend

import (
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"petal/engine"
	"petal/engine/cpu"
	"petal/engine/gpumodel"
	"petal/gpu"
	"petal/gpu/cuda"
	"petal/gpu/metal"
	"petal/gpu/sim"
)

// Opener opens the checkpoint in dir on one backend.
type Opener func(dir string) (engine.Model, error)

// builtin is the order Names lists the shipped backends in (the default
// first); backends registered later follow, sorted.
var builtin = []string{"cpu", "sim", "metal", "cuda"}

// devices are the GPU backends, by the driver that opens their device; a
// driver added here is a backend.
var devices = map[string]func() (gpu.Device, error){
	"sim":   openSim,
	"metal": metal.Open,
	"cuda":  openCUDA,
}

var (
	mu sync.RWMutex
	// registry holds the backends without a device of their own: the CPU
	// and those registered.
	registry = map[string]Opener{
		"cpu": func(dir string) (engine.Model, error) { return cpu.Open(dir) },
	}
)

// openSim opens the simulated-Metal driver with its race check off: the
// check runs every dispatch twice, which the kernel tests pay for, not
// whole-model runs.
func openSim() (gpu.Device, error) { return sim.Open(sim.Options{Fast: true}) }

// openCUDA opens the first NVIDIA GPU (CUDA_VISIBLE_DEVICES picks another).
func openCUDA() (gpu.Device, error) { return cuda.Open(cuda.Options{}) }

// CopyNotice is where a GPU load says, once, that it copied weights that
// lie misaligned in the shards (MB are 10^6 bytes here, as a download size
// is).
var CopyNotice io.Writer = os.Stderr

// Open opens the checkpoint in dir on the backend called name.
func Open(name, dir string) (engine.Model, error) {
	if dev, ok := devices[name]; ok {
		return onDevice(dev)(dir)
	}
	mu.RLock()
	open, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, unknown(name)
	}
	return open(dir)
}

// Check says whether name is a backend Open accepts, and if not which are.
func Check(name string) error {
	mu.RLock()
	_, ok := registry[name]
	mu.RUnlock()
	if _, isGPU := devices[name]; !ok && !isGPU {
		return unknown(name)
	}
	return nil
}

func unknown(name string) error {
	return fmt.Errorf("unknown backend %q (have %s)", name, strings.Join(Names(), ", "))
}

// Names lists the backends Open accepts: cpu, sim, metal and cuda, then any
// registered, in name order.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	var extra []string
	for _, names := range []iter.Seq[string]{maps.Keys(registry), maps.Keys(devices)} {
		for name := range names {
			if !slices.Contains(builtin, name) {
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	return append(slices.Clone(builtin), extra...)
}

// Register adds a backend called name (tests register scripted models this
// way) and returns the function that removes it again. It panics on a name
// already taken, which is a programming error.
func Register(name string, open Opener) (remove func()) {
	mu.Lock()
	defer mu.Unlock()
	if _, taken := registry[name]; taken || devices[name] != nil {
		panic("backend: " + name + " registered twice")
	}
	registry[name] = open
	return func() {
		mu.Lock()
		delete(registry, name)
		mu.Unlock()
	}
}

// OpenDevice opens the GPU the backend called name runs on, so that its
// gpu.Info can size the load before the model opens on it ([OnDevice]).
// ok is false for a backend without a device of its own (cpu).
func OpenDevice(name string) (dev gpu.Device, ok bool, err error) {
	open, ok := devices[name]
	if !ok {
		return nil, false, nil
	}
	dev, err = open()
	return dev, true, err
}

// HasDevice reports whether the backend called name runs on a GPU that
// [OpenDevice] opens.
func HasDevice(name string) bool {
	_, ok := devices[name]
	return ok
}

// OnDevice opens the checkpoint in dir on dev, which the model then owns:
// its Close closes dev, and so does a failed open.
func OnDevice(dev gpu.Device, dir string) (engine.Model, error) {
	m, err := gpumodel.Open(dir, dev)
	if err != nil {
		dev.Close()
		return nil, err
	}
	if n := m.CopiedBytes(); n > 0 {
		fmt.Fprintf(CopyNotice, "%s: copied %.1f MB of misaligned tensors; `petal pull --import %[1]s` stores an aligned copy\n", dir, float64(n)/1e6)
	}
	return gpuModel{m, dev}, nil
}

// onDevice is the Opener of a GPU backend whose device open opens.
func onDevice(open func() (gpu.Device, error)) Opener {
	return func(dir string) (engine.Model, error) {
		dev, err := open()
		if err != nil {
			return nil, err
		}
		return OnDevice(dev, dir)
	}
}

// gpuModel closes its device after the model: gpumodel's Close leaves the
// device open, as the caller that opened it owns it.
type gpuModel struct {
	*gpumodel.Model
	dev gpu.Device
}

func (g gpuModel) Close() error {
	err := g.Model.Close()
	if e := g.dev.Close(); err == nil {
		err = e
	}
	return err
}
