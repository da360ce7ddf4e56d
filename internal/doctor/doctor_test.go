package doctor

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	var kernelSection bool
	for _, c := range r.Checks {
		if c.Section == SectionModel && !strings.Contains(c.Message, "max |logit - CPU|") {
			t.Errorf("model check says %q", c.Message)
		}
		kernelSection = kernelSection || c.Section == SectionKernel && c.GBPerSecond > 0
	}
	if !kernelSection {
		t.Error("no kernel was timed")
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

// Kernels broken in a copy of shaders/ fail doctor, each check naming the
// broken file, while the files left alone still pass: one that does not
// compile, and one that compiles but computes the wrong thing.
func TestBrokenKernelsFailNamingTheFile(t *testing.T) {
	edits := map[string][2]string{
		"argmax.metal":      {"float v = -INFINITY;", "float v = -INFINITY; undeclared_function();"},
		"moe_grouped.metal": {"out[i] = g / (1.0f + exp(-g)) * up[i];", "out[i] = g / (1.0f + exp(-g)) + up[i];"},
	}
	r := run(t, copyShaders(t, edits))
	if r.Pass {
		t.Fatal("doctor passed broken kernels")
	}
	failed := map[string]string{}
	for _, c := range r.Checks {
		if c.Pass {
			continue
		}
		failed[c.Section+" "+c.Name] = c.Message
	}
	mustFail := func(check, file string) {
		t.Helper()
		msg, ok := failed[check]
		if !ok {
			t.Errorf("%q passed", check)
			return
		}
		if !strings.Contains(check+" "+msg, file) {
			t.Errorf("%q fails without naming %s: %s", check, file, msg)
		}
	}
	mustFail("compile argmax.metal/argmax_f32", "argmax.metal")
	mustFail("kernel argmax (argmax.metal/argmax_f32)", "argmax.metal")
	mustFail("kernel swiglu (moe_grouped.metal/swiglu_f32)", "moe_grouped.metal")
	if msg := failed["compile argmax.metal/argmax_f32"]; !strings.Contains(msg, "undeclared_function") {
		t.Errorf("the compile failure lacks the compiler's message: %s", msg)
	}
	if msg := failed["kernel swiglu (moe_grouped.metal/swiglu_f32)"]; !strings.Contains(msg, "differs from the Go reference") {
		t.Errorf("swiglu's wrong result: %q", msg)
	}
	if _, ok := failed["model demo model, GPU path against the CPU backend"]; !ok {
		t.Error("the demo model passed with a broken argmax and SwiGLU")
	}
	for check := range failed {
		if strings.HasPrefix(check, "compile ") && !strings.HasPrefix(check, "compile argmax.metal/") {
			t.Errorf("%s failed; only argmax.metal was broken at compile time", check)
		}
	}
}
