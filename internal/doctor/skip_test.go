package doctor

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
	"petal/shaders"
)

// withBackend registers be under name for the test.
func withBackend(t *testing.T, name string, be backend) {
	t.Helper()
	if _, ok := backends[name]; ok {
		t.Fatalf("backend %s exists", name)
	}
	backends[name] = be
	t.Cleanup(func() { delete(backends, name) })
}

// fakeApple is the sim dressed as an Apple GPU of a family, counting the
// command buffers asked of it.
type fakeApple struct {
	gpu.Device
	name     string
	family   int
	commands *atomic.Int32
}

func (d fakeApple) Info() gpu.Info {
	i := d.Device.Info()
	i.Name, i.AppleFamily = d.name, d.family
	return i
}

func (d fakeApple) NewCommandBuffer() (gpu.CommandBuffer, error) {
	d.commands.Add(1)
	return d.Device.NewCommandBuffer()
}

// fakeMetal is a backend whose GPU is name, of Apple family fam, opened the
// way the Metal driver opens one: refused below Apple7. opened counts the
// devices opened, commands the command buffers.
func fakeMetal(name string, fam int, opened, commands *atomic.Int32) backend {
	open := func() (gpu.Device, error) {
		if fam < gpu.MinAppleFamily {
			return nil, fmt.Errorf("%w: %s is an Apple%d GPU", gpu.ErrUnsupported, name, fam)
		}
		opened.Add(1)
		d, err := sim.Open(sim.Options{Fast: true})
		if err != nil {
			return nil, err
		}
		return fakeApple{Device: d, name: name, family: fam, commands: commands}, nil
	}
	return backend{
		kernels: open, model: open, reps: 1,
		family: func() (string, int, error) { return name, fam, nil },
	}
}

// A hosted CI Mac's paravirtual GPU (Apple5) cannot open in the Metal
// driver: every check that needs the GPU is skipped with the reason, none
// fails, and the report passes, in both modes.
func TestGPUBelowApple7IsSkippedNotFailed(t *testing.T) {
	var opened, commands atomic.Int32
	withBackend(t, "paravirtual", fakeMetal("Apple Paravirtual device", 5, &opened, &commands))
	for _, compileOnly := range []bool{false, true} {
		r, err := Run(Options{Backend: "paravirtual", CompileOnly: compileOnly})
		if err != nil {
			t.Fatal(err)
		}
		sections := map[string]bool{}
		for _, c := range r.Checks[1:] {
			sections[c.Section] = true
			if !c.Skipped || c.Pass || !strings.Contains(c.Message, "Apple5") {
				t.Errorf("compile-only %v: %s", compileOnly, c.Line())
			}
		}
		if os := r.Checks[0]; os.Name != "operating system" || !os.Pass {
			t.Errorf("compile-only %v: first check %s", compileOnly, os.Line())
		}
		if !r.Pass || r.Failed != 0 || r.Skipped != len(r.Checks)-1 || r.Device != "Apple Paravirtual device" {
			t.Errorf("compile-only %v: Pass %v, %d failed, %d of %d skipped, device %q", compileOnly, r.Pass, r.Failed, r.Skipped, len(r.Checks), r.Device)
		}
		if want := !compileOnly; sections[SectionKernel] != want || sections[SectionModel] != want || !sections[SectionCompile] {
			t.Errorf("compile-only %v: sections %v", compileOnly, sections)
		}
		var text strings.Builder
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("all 1 checks that ran passed, %d skipped", r.Skipped)
		if !strings.Contains(text.String(), "SKIP device  GPU family: Apple5 (Apple Paravirtual device)") || !strings.Contains(text.String(), want) {
			t.Errorf("compile-only %v: text report\n%s", compileOnly, text.String())
		}
	}
	if opened.Load() != 0 || commands.Load() != 0 {
		t.Errorf("opened %d devices, %d command buffers", opened.Load(), commands.Load())
	}
}

// An Apple7+ GPU is checked, not skipped: in compile-only mode every kernel
// function of every file compiles, and nothing runs on the GPU.
func TestCompileOnlyCompilesEveryKernelAndRunsNothing(t *testing.T) {
	var opened, commands atomic.Int32
	withBackend(t, "m2", fakeMetal("Apple M2", 8, &opened, &commands))
	r, err := Run(Options{Backend: "m2", CompileOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	compiled := map[string]bool{}
	for _, c := range r.Checks {
		if !c.Pass || c.Skipped {
			t.Errorf("%s", c.Line())
		}
		switch c.Section {
		case SectionCompile:
			compiled[strings.Fields(c.Name)[0]] = true
		case SectionKernel, SectionModel:
			t.Errorf("compile-only ran %s", c.Line())
		}
		if c.Name == "GPU family" && c.Message != "Apple8" {
			t.Errorf("%s", c.Line())
		}
	}
	for _, file := range shaders.Names() {
		text, err := shaders.Source(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range kernelFunctions(text) {
			if !compiled[file+"/"+fn] {
				t.Errorf("%s/%s not compiled", file, fn)
			}
		}
	}
	if !r.Pass || r.Skipped != 0 || opened.Load() != 1 || commands.Load() != 0 {
		t.Errorf("Pass %v, %d skipped, %d devices opened, %d command buffers", r.Pass, r.Skipped, opened.Load(), commands.Load())
	}
}

// A GPU whose family cannot be read is not skipped: opening it fails the
// run with the driver's message.
func TestUnreadableFamilyFails(t *testing.T) {
	errNoGPU := errors.New("no Metal device")
	withBackend(t, "nogpu", backend{
		kernels: func() (gpu.Device, error) { return nil, errNoGPU },
		model:   func() (gpu.Device, error) { return nil, errNoGPU },
		family:  func() (string, int, error) { return "", 0, errNoGPU },
	})
	r, err := Run(Options{Backend: "nogpu", CompileOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	last := r.Checks[len(r.Checks)-1]
	if r.Pass || r.Skipped != 0 || last.Pass || last.Message != errNoGPU.Error() {
		t.Errorf("Pass %v, %d skipped, last %s", r.Pass, r.Skipped, last.Line())
	}
}
