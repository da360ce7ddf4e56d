package cuda

import (
	"errors"
	"testing"

	"petal/shaders"
)

// TestCompileEveryKernel rewrites every kernel of every shaders/*.metal
// file and compiles it with NVRTC for sm_90 (the H200); it needs only
// libnvrtc, no GPU, so it runs wherever NVRTC is installed ($PETAL_NVRTC
// names the library).
func TestCompileEveryKernel(t *testing.T) {
	c, err := newCompiler("sm_90", t.TempDir())
	if errors.Is(err, ErrNoCompiler) {
		t.Skipf("no NVRTC here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %s (%s)", c.version, c.path)
	for _, file := range shaders.Names() {
		src, err := shaders.Source(file)
		if err != nil {
			t.Fatal(err)
		}
		all, err := rewrite(file, src, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for fn := range all.Kernels {
			t.Run(fn, func(t *testing.T) {
				rw, err := rewrite(file, src, fn, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.compile(file, source(rw.Text)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
