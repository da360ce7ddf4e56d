package doctor

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu/sim"
	"petal/shaders"
)

// kernelsOf is the file/function list of a kernel check's name,
// "case (file/fn, file/fn)".
func kernelsOf(name string) []string {
	_, list, _ := strings.Cut(strings.TrimSuffix(name, ")"), " (")
	return strings.Split(list, ", ")
}

// run runs doctor on the sim over src (nil: the embedded kernels).
func run(t *testing.T, src fs.FS) *Report {
	t.Helper()
	r, err := Run(Options{Backend: "sim", Shaders: src})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// On the embedded kernels every check passes, every kernel function of
// every file is compiled, and every one runs in a self-test case.
func TestSimPassesAndCoversEveryKernel(t *testing.T) {
	r := run(t, nil)
	for _, c := range r.Checks {
		if !c.Pass {
			t.Errorf("%s", c.Line())
		}
	}
	if !r.Pass || r.Failed != 0 {
		t.Errorf("Pass %v with %d failed", r.Pass, r.Failed)
	}
	compiled, tested := map[string]bool{}, map[string]bool{}
	for _, c := range r.Checks {
		switch c.Section {
		case SectionCompile:
			compiled[strings.Fields(c.Name)[0]] = true
		case SectionKernel:
			for _, k := range kernelsOf(c.Name) {
				tested[k] = true
			}
		}
	}
	n, declared := 0, 0
	for _, file := range shaders.Names() {
		text, err := shaders.Source(file)
		if err != nil {
			t.Fatal(err)
		}
		declared += strings.Count(text, "\nkernel void ")
		for _, fn := range kernelFunctions(text) {
			n++
			if !compiled[file+"/"+fn] {
				t.Errorf("%s/%s not compiled", file, fn)
			}
			if !tested[file+"/"+fn] {
				t.Errorf("%s/%s in no self-test case", file, fn)
			}
		}
	}
	if n != declared || n == 0 {
		t.Errorf("parsed %d kernel functions, the files declare %d", n, declared)
	}
	var kernelSection, demo bool
	for _, c := range r.Checks {
		if c.Section == SectionModel && strings.HasPrefix(c.Name, "demo model") {
			demo = true
			if !strings.Contains(c.Message, "max |logit - CPU|") {
				t.Errorf("model check says %q", c.Message)
			}
		}
		kernelSection = kernelSection || c.Section == SectionKernel && c.GBPerSecond > 0
	}
	if !kernelSection || !demo {
		t.Errorf("a kernel timed: %v; the demo model run: %v", kernelSection, demo)
	}
}

// copyShaders writes the embedded kernel sources to a folder with the
// given files' texts replaced, old -> new.
func copyShaders(t *testing.T, edits map[string][2]string) fs.FS {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(shaders.Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(shaders.Files(), p)
		if err != nil {
			return err
		}
		text := string(b)
		if e, ok := edits[p]; ok {
			if !strings.Contains(text, e[0]) {
				t.Fatalf("%s lacks %q", p, e[0])
			}
			text = strings.Replace(text, e[0], e[1], 1)
		}
		return os.WriteFile(filepath.Join(dir, p), []byte(text), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return os.DirFS(dir)
}

// breaks are kernels broken in a copy of shaders/, each in its own file:
// the edit, and the compile check that must fail naming the file (empty
// where the kernel compiles and computes the wrong thing).
var breaks = []struct {
	file, old, new string
	compile        string
}{
	{"argmax.metal", "float v = -INFINITY;", "float v = -INFINITY; undeclared_function();", "argmax.metal/argmax_f32"},
	{"moe_grouped.metal", "out[i] = g / (1.0f + exp(-g)) * up[i];", "out[i] = g / (1.0f + exp(-g)) + up[i];", ""},
	// Apple's rules, which C++ alone does not enforce (gpu/sim does): a
	// vector position input beside a scalar size, a pointer without an
	// address space, a double.
	{"rmsnorm.metal", "    uint threads [[threads_per_threadgroup]],\n", "    uint threads [[threads_per_threadgroup]],\n    uint2 tpos [[thread_position_in_threadgroup]],\n", "rmsnorm.metal/rmsnorm_f32"},
	{"deltanet.metal", "device float* hist = state + ulong(c) * (taps - 1);", "float* hist = state + ulong(c) * (taps - 1);", "deltanet.metal/delta_conv_shift_f32"},
	{"qmm.metal", "const float s = float(scales[si]);", "const double s = float(scales[si]);", "qmm.metal/qmm_bf16_gs64_b4"},
}

// Kernels broken in a copy of shaders/ fail doctor, each failure naming the
// broken file and carrying the compiler's or the reference's message, while
// the files left alone still compile.
func TestBrokenKernelsFailNamingTheFile(t *testing.T) {
	edits := map[string][2]string{}
	for _, b := range breaks {
		edits[b.file] = [2]string{b.old, b.new}
	}
	r := run(t, copyShaders(t, edits))
	if r.Pass {
		t.Fatal("doctor passed broken kernels")
	}
	failed := map[string]string{}
	for _, c := range r.Checks {
		if !c.Pass {
			failed[c.Section+" "+c.Name] = c.Message
		}
	}
	for _, b := range breaks {
		if b.compile != "" {
			msg, ok := failed["compile "+b.compile]
			if !ok {
				t.Errorf("%s compiled after %q", b.compile, b.new)
			} else if !strings.Contains(msg, b.file+":") {
				t.Errorf("compiling %s fails without naming %s and a line: %s", b.compile, b.file, msg)
			}
		}
		// The self-test of every kernel of the file fails too, named by
		// file in the check's name.
		n, differs := 0, false
		for check, msg := range failed {
			if strings.HasPrefix(check, "kernel ") && (strings.Contains(check, "("+b.file+"/") || strings.Contains(check, ", "+b.file+"/")) {
				n++
				differs = differs || strings.Contains(msg, "differs from the Go reference")
			}
		}
		if n == 0 {
			t.Errorf("no self-test of %s failed", b.file)
		}
		if b.compile == "" && !differs {
			t.Errorf("no self-test of %s says its result differs from the reference", b.file)
		}
	}
	if msg := failed["compile argmax.metal/argmax_f32"]; !strings.Contains(msg, "undeclared_function") {
		t.Errorf("the compile failure lacks the compiler's message: %s", msg)
	}
	if _, ok := failed["model demo model, GPU path against the CPU backend"]; !ok {
		t.Error("the demo model passed with broken kernels")
	}
	for check := range failed {
		broken := false
		for _, b := range breaks {
			broken = broken || b.compile != "" && strings.HasPrefix(check, "compile "+b.file+"/")
		}
		if strings.HasPrefix(check, "compile ") && !broken {
			t.Errorf("%s failed; its file compiles", check)
		}
	}
}

// A run whose context is done stops between checks and fails, saying so.
func TestCancelledRunFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := Run(Options{Backend: "sim", Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	last := r.Checks[len(r.Checks)-1]
	if r.Pass || last.Pass || !strings.Contains(last.Message, "stopped before the end: context canceled") {
		t.Errorf("Pass %v, last check %s", r.Pass, last.Line())
	}
	for _, c := range r.Checks {
		if c.Section == SectionCompile {
			t.Errorf("ran %s after the context was done", c.Name)
		}
	}
}

// Where the backend asks for it (Metal), the kernels with a model-size
// setup are timed at that size after their check.
func TestKernelsTimedAtModelSize(t *testing.T) {
	d, err := sim.Open(sim.Options{Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	files, err := loadSources(shaders.Files())
	if err != nil {
		t.Fatal(err)
	}
	run := &runner{r: &Report{}, ctx: context.Background()}
	run.kernels(shaders.NewKernels(d), files, 1, true)
	sized := 0
	for _, c := range run.r.Checks {
		if !c.Pass {
			t.Errorf("%s", c.Line())
		}
		if strings.Contains(c.Message, "at the model's size") {
			sized++
			if c.GBPerSecond <= 0 {
				t.Errorf("%s: no rate", c.Line())
			}
		}
	}
	if sized < 4 {
		t.Errorf("%d kernels timed at the model's size", sized)
	}
}
