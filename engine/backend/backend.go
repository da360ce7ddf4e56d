package backend

import (
	"fmt"
	"io"
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

var (
	mu       sync.RWMutex
	registry = map[string]Opener{
		"cpu":   func(dir string) (engine.Model, error) { return cpu.Open(dir) },
		"sim":   onDevice(openSim),
		"metal": onDevice(metal.Open),
		"cuda":  onDevice(openCUDA),
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
	if !ok {
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
	for name := range registry {
		if !slices.Contains(builtin, name) {
			extra = append(extra, name)
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
	if _, taken := registry[name]; taken {
		panic("backend: " + name + " registered twice")
	}
	registry[name] = open
	return func() {
		mu.Lock()
		delete(registry, name)
		mu.Unlock()
	}
}

// onDevice is the Opener of a GPU backend whose device open opens.
func onDevice(open func() (gpu.Device, error)) Opener {
	return func(dir string) (engine.Model, error) {
		dev, err := open()
		if err != nil {
			return nil, err
		}
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
