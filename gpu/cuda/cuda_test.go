package cuda

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"petal/gpu"
)

// Where the driver library is missing, Open says so at once, naming what it
// tried, as an ErrUnsupported.
func TestOpenWithoutDriver(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	t.Setenv("PETAL_LIBCUDA", missing)
	_, err := Open(Options{})
	if !errors.Is(err, ErrNoDriver) || !errors.Is(err, gpu.ErrUnsupported) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("got %v, want ErrNoDriver naming %s", err, missing)
	}
}

// On this machine as it is: either no NVIDIA driver or GPU (a clear
// ErrUnsupported), or a working GPU that reports itself and its free memory.
func TestOpenHere(t *testing.T) {
	d, err := Open(Options{CacheDir: t.TempDir()})
	if err != nil {
		if !errors.Is(err, gpu.ErrUnsupported) {
			t.Fatalf("got %v, want an ErrUnsupported", err)
		}
		t.Logf("no GPU here: %v", err)
		return
	}
	defer d.Close()
	info := d.Info()
	if info.Name == "" || info.RecommendedMaxWorkingSetSize == 0 {
		t.Fatalf("info %+v", info)
	}
	t.Logf("%s, %d bytes free", info.Name, info.RecommendedMaxWorkingSetSize)
}

// The CUDA target turns an MSL kernel into a device function with one
// __global__ entry point for the wanted kernel, binding buffers, dynamic
// threadgroup memory and builtins from Params and CUDA's indices, and
// threadgroup storage into __shared__.
func TestRewriteForCUDA(t *testing.T) {
	src := `#include <metal_stdlib>
using namespace metal;
[[max_total_threads_per_threadgroup(256)]]
kernel void scale(device float* y [[buffer(1)]], constant float& s [[buffer(0)]],
                  threadgroup float* part [[threadgroup(0)]],
                  uint tid [[thread_index_in_threadgroup]], uint2 g [[threadgroup_position_in_grid]]) {
	threadgroup float tile[32];
	tile[tid % 32] = s;
	part[tid] = tile[0];
	y[g.x] = part[0];
}
kernel void other(device float* y [[buffer(0)]]) { y[0] = 1; }
`
	rw, err := rewrite("t.metal", src, "scale", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rw.Kernels["scale"].MaxThreads; got != 256 {
		t.Errorf("MaxThreads %d, want 256", got)
	}
	for _, want := range []string{
		"static __device__ void scale(",
		"__shared__ float tile[32];",
		// Bounded at Metal's limit, not the attribute's (see target.Entry).
		`extern "C" __global__ void __launch_bounds__(1024) petal_kernel_scale(const petal::Params P)`,
		"petal::arg_cast<device float *>::get((void*)P.buffers[1])",
		"petal::arg_cast<constant float &>::get((void*)P.buffers[0])",
		"(float *)(petal_dyn + P.tgoff[0])",
		"(uint)petal::b3(petal::tindex(), 0, 0)",
		"(uint2)petal::b3(blockIdx.x, blockIdx.y, blockIdx.z)",
	} {
		if !strings.Contains(rw.Text, want) {
			t.Errorf("rewrite lacks %q:\n%s", want, rw.Text)
		}
	}
	if strings.Contains(rw.Text, "petal_kernel_other") {
		t.Errorf("entry point for a kernel not asked for:\n%s", rw.Text)
	}
	if n := strings.Count(rw.Text, "\n"); n < strings.Count(src, "\n") {
		t.Errorf("rewrite has %d lines, source %d: lines moved", n, strings.Count(src, "\n"))
	}
}

// A compile error comes back as gpu.ErrCompile with NVRTC's log naming the
// kernel's file and line.
func TestCompileErrorNamesLine(t *testing.T) {
	c, err := newCompiler("sm_90", "")
	if errors.Is(err, ErrNoCompiler) {
		t.Skipf("no NVRTC here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	rw, err := rewrite("bad.metal", "kernel void k(device float* y [[buffer(0)]]) {\n\ty[0] = undefined_name;\n}\n", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.compile("bad.metal", source(rw.Text))
	if !errors.Is(err, gpu.ErrCompile) || !strings.Contains(err.Error(), "bad.metal(2)") {
		t.Fatalf("got %v, want ErrCompile at bad.metal(2)", err)
	}
}
