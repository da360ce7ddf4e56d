// Package doctor checks, on the machine it runs on, that Petal's GPU path
// works there: it compiles every kernel of petal/shaders through the chosen
// backend (Metal on a Mac, the sim elsewhere), runs every kernel's
// self-test against its Go reference, runs the embedded demo model end to
// end against the CPU backend, times each kernel and reads what the device
// and OS say about themselves. The report is what `petal doctor` prints and
// the Setup screen's "Check this Mac" shows: each check pass or fail with
// the exact compiler or runtime message, so a user can paste it into a bug
// report.
//
// A GPU below Apple7 is a virtual machine's (a hosted CI Mac's), which the
// Metal driver does not open: the checks that need the GPU are skipped there,
// with the reason, rather than failed. [Options.CompileOnly] stops after the
// compile checks, and [Specialize] writes the kernel sources for Apple's
// offline compiler, one copy per function-constant set the ops use.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"time"

	"petal/gpu"
	"petal/gpu/metal"
	"petal/gpu/sim"
	"petal/shaders"
)

// Sections of the report, in the order the checks run.
const (
	SectionDevice  = "device"
	SectionCompile = "compile"
	SectionKernel  = "kernel"
	SectionModel   = "model"
)

// Options configure [Run].
type Options struct {
	// Backend is "metal" or "sim"; empty picks metal on an Apple silicon
	// Mac and the sim elsewhere.
	Backend string
	// Shaders holds the kernel sources (*.metal and the headers they
	// include); nil: the ones embedded in this binary. A test hands it a
	// mutated copy.
	Shaders fs.FS
	// Progress, when set, is called with each check as it finishes.
	Progress func(Check)
	// Context, when set, stops the run between checks once it is done;
	// the report then ends with a failed check saying so.
	Context context.Context
	// CompileOnly stops after the device and compile checks: every kernel
	// function of every file is compiled with each function-constant set
	// the ops use, and nothing runs on the GPU (no self-test, no model).
	CompileOnly bool
}

// Check is one line of the report.
type Check struct {
	Section string `json:"section"`
	Name    string `json:"name"`
	Pass    bool   `json:"pass"`
	// Skipped is a check that could not run here, with the reason as its
	// Message: it neither passed nor failed (Pass is false, and it does not
	// count in Report.Failed).
	Skipped bool `json:"skipped,omitempty"`
	// Message is what was measured on a pass, and the exact error
	// (compiler output included) on a failure.
	Message string  `json:"message"`
	Seconds float64 `json:"seconds"`
	// GBPerSecond is a kernel's bytes moved per second of its fastest run;
	// BandwidthShare that as a fraction of the device's memory bandwidth,
	// where known. Both 0 when not timed.
	GBPerSecond    float64 `json:"gb_per_s,omitempty"`
	BandwidthShare float64 `json:"bandwidth_share,omitempty"`
}

// Report is a whole run.
type Report struct {
	Backend string `json:"backend"`
	Device  string `json:"device"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	// Shaders says where the kernel sources came from.
	Shaders string `json:"shaders"`
	// BandwidthGBps is the device's memory bandwidth from Petal's table of
	// Apple chips; 0 when the chip is not in it (and on the sim).
	BandwidthGBps float64   `json:"bandwidth_gb_per_s,omitempty"`
	Started       time.Time `json:"started"`
	Seconds       float64   `json:"seconds"`
	Pass          bool      `json:"pass"`
	Failed        int       `json:"failed"`
	Skipped       int       `json:"skipped,omitempty"`
	Checks        []Check   `json:"checks"`
}

// ErrBackend is returned for a backend doctor does not know.
var ErrBackend = errors.New("doctor: unknown backend (have metal, sim)")

// DefaultBackend is the backend doctor checks when none is named.
func DefaultBackend() string {
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		return "metal"
	}
	return "sim"
}

// backend opens devices: one for compiling and the kernel self-tests, one
// for the model (on the sim, the kernels' device runs the race check and
// the model's does not: the check runs every dispatch twice).
type backend struct {
	kernels, model func() (gpu.Device, error)
	// family, set for an Apple GPU, reads its name and highest Apple family
	// before the device opens; nil where it cannot be read (off a Mac).
	family    func() (name string, family int, err error)
	reps      int  // timed runs per kernel after the checked one
	modelSize bool // time kernels at the model's size where a case can
}

var backends = map[string]backend{
	"metal": {kernels: metal.Open, model: metal.Open, family: appleFamily, reps: 5, modelSize: true},
	"sim": {
		kernels: func() (gpu.Device, error) { return sim.Open(sim.Options{}) },
		model:   func() (gpu.Device, error) { return sim.Open(sim.Options{Fast: true}) },
		reps:    1,
	},
}

// Run runs every check and returns the report; its error is for options
// it cannot act on. A check that fails is in the report, and Report.Pass
// is false.
func Run(opts Options) (*Report, error) {
	name := opts.Backend
	if name == "" {
		name = DefaultBackend()
	}
	be, ok := backends[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrBackend, name)
	}
	r := &Report{Backend: name, OS: osVersion(), Arch: runtime.GOARCH, Shaders: "embedded", Started: time.Now().UTC()}
	src := opts.Shaders
	if src == nil {
		src = shaders.Files()
	} else {
		r.Shaders = "a directory given with --shaders"
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	run := &runner{r: r, progress: opts.Progress, ctx: ctx}
	defer func() {
		if err := ctx.Err(); err != nil {
			run.add(Check{Section: SectionDevice, Name: "run", Message: "stopped before the end: " + err.Error()})
		}
		r.Seconds = time.Since(r.Started).Seconds()
		r.Pass = r.Failed == 0 && len(r.Checks) > r.Skipped
	}()

	run.osCheck(name)
	if be.family != nil {
		if gpuName, fam, err := be.family(); err == nil && fam < gpu.MinAppleFamily {
			r.Device = gpuName
			run.skipGPU(name, gpuName, fam, opts.CompileOnly)
			return r, nil
		}
	}
	dev, err := run.open(SectionDevice, "open the "+name+" device", be.kernels)
	if err != nil {
		return r, nil
	}
	defer dev.Close()
	info := dev.Info()
	r.Device = info.Name
	r.BandwidthGBps = appleBandwidth(info.Name)
	run.deviceChecks(be.family != nil, info)

	files, err := loadSources(src)
	run.add(Check{Section: SectionCompile, Name: "read the kernel sources", Pass: err == nil, Message: sourcesMessage(files, err)})
	if err != nil {
		return r, nil
	}
	over := &sourced{Device: dev, text: files.text}
	run.compile(over, files)
	run.libraries(dev)
	if opts.CompileOnly {
		return r, nil
	}
	run.kernels(shaders.NewKernels(over), files, be.reps, be.modelSize)

	mdev, err := run.open(SectionModel, "open the "+name+" device for the model", be.model)
	if err != nil {
		return r, nil
	}
	defer mdev.Close()
	run.demo(&sourced{Device: mdev, text: files.text})
	return r, nil
}

// runner adds checks to a report as they finish.
type runner struct {
	r        *Report
	progress func(Check)
	ctx      context.Context
}

func (run *runner) add(c Check) {
	run.r.Checks = append(run.r.Checks, c)
	switch {
	case c.Skipped:
		run.r.Skipped++
	case !c.Pass:
		run.r.Failed++
	}
	if run.progress != nil {
		run.progress(c)
	}
}

// timed runs f for check c, which f may fill in further, and adds c with
// f's message, or its error as the message. Once the run's context is
// done it runs nothing and returns the context's error.
func (run *runner) timed(c *Check, f func() (string, error)) error {
	if err := run.ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	msg, err := f()
	c.Pass, c.Message, c.Seconds = err == nil, msg, time.Since(start).Seconds()
	if err != nil {
		c.Message = err.Error()
	}
	run.add(*c)
	return err
}

func (run *runner) open(section, what string, open func() (gpu.Device, error)) (gpu.Device, error) {
	var dev gpu.Device
	err := run.timed(&Check{Section: section, Name: what}, func() (string, error) {
		d, err := open()
		if err != nil {
			return "", err
		}
		dev = d
		return d.Info().Name, nil
	})
	return dev, err
}

// sourced is a device whose pipelines compile the kernel sources doctor was
// given in place of the embedded text the shaders package hands it.
type sourced struct {
	gpu.Device
	text map[string]string
}

func (s *sourced) NewPipeline(src gpu.Source, function string, constants ...gpu.Constant) (gpu.Pipeline, error) {
	if t, ok := s.text[src.Name]; ok {
		src.Text = t
	}
	return s.Device.NewPipeline(src, function, constants...)
}

// WrapNoCopyTensors keeps the device's own wrapping of long shards (Metal's
// overlapping views under maxBufferLength), which embedding gpu.Device hides.
func (s *sourced) WrapNoCopyTensors(mem []byte, tensors []gpu.Extent) (gpu.Buffer, error) {
	return gpu.WrapTensors(s.Device, mem, tensors)
}

// libraries reports, on a device that can tell, whether each kernel library
// came bundled with Petal.app or was compiled from source, and why: a stale
// bundle is otherwise invisible except as a slower start.
func (run *runner) libraries(dev gpu.Device) {
	l, ok := dev.(interface{ Libraries() []string })
	if !ok {
		return
	}
	notes := l.Libraries()
	msg := "none compiled"
	if len(notes) > 0 {
		msg = strings.Join(notes, "; ")
	}
	run.add(Check{Section: SectionCompile, Name: "kernel libraries (bundled or compiled from source)", Pass: true, Message: msg})
}
