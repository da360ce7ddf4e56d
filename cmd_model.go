package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"petal/engine"
	"petal/engine/cpu"
	"petal/engine/gpumodel"
	"petal/gpu"
	"petal/gpu/metal"
	"petal/gpu/sim"
)

// backends maps --backend values to loaders.
var backends = map[string]func(dir string) (engine.Model, error){
	"cpu":   func(dir string) (engine.Model, error) { return cpu.Open(dir) },
	"sim":   func(dir string) (engine.Model, error) { return openGPU(dir, openSim) },
	"metal": func(dir string) (engine.Model, error) { return openGPU(dir, metal.Open) },
}

// openSim opens the simulated-Metal driver with its race check off: the
// check runs every dispatch twice, which the kernel tests pay for, not
// whole-model runs.
func openSim() (gpu.Device, error) { return sim.Open(sim.Options{Fast: true}) }

// openGPU opens a device and the model on it; the model's Close does not
// close the device, so gpuModel does.
func openGPU(dir string, open func() (gpu.Device, error)) (engine.Model, error) {
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
		fmt.Fprintf(copyNotice, "%s: copied %.1f MB of misaligned tensors; `petal pull --import %[1]s` stores an aligned copy\n", dir, float64(n)/1e6)
	}
	return gpuModel{m, dev}, nil
}

// copyNotice is where a GPU load says, once, that it copied weights that
// lie misaligned in the shards (MB are 10^6 bytes here, as a download
// size is).
var copyNotice io.Writer = os.Stderr

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

func openModel(dir, backend string) (engine.Model, error) {
	if err := checkModelDir(dir); err != nil {
		return nil, err
	}
	open, ok := backends[backend]
	if !ok {
		return nil, fmt.Errorf("unknown backend %q (have cpu, sim, metal)", backend)
	}
	return open(dir)
}

// checkModelDir says plainly that --model is missing or names no folder,
// before anything reads the folder's files and words it as their fault.
func checkModelDir(dir string) error {
	if dir == "" {
		return errors.New("--model DIR is required")
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--model %s: no such folder", dir)
	case err != nil:
		return fmt.Errorf("--model %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("--model %s: not a folder (name the checkpoint's folder)", dir)
	}
	return nil
}

// onSequence opens dir's model on backend and hands f the model and a
// fresh sequence of it, closing both when f returns.
func onSequence(dir, backend string, f func(m engine.Model, seq engine.Sequence) error) error {
	m, err := openModel(dir, backend)
	if err != nil {
		return err
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		return fmt.Errorf("starting a sequence on %s: %w", dir, err)
	}
	defer seq.Close()
	return f(m, seq)
}

// parseTokens parses a comma-separated list of token ids.
func parseTokens(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--tokens needs at least one id, e.g. --tokens 1,2,3")
	}
	parts := strings.Split(s, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		id, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--tokens: %q is not an integer id", p)
		}
		ids[i] = id
	}
	return ids, nil
}

// newFlags makes a flag set that reports errors instead of exiting. It
// prints only the usage, on -h or a bad flag: the error itself is main's to
// print, once.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("petal "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage of petal %s:\n", name)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// noArgs rejects stray positional arguments after the flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
