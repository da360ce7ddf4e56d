package cuda

import (
	"testing"
	"unsafe"

	"petal/gpu"
)

// TestPipelineMaxThreads builds pipelines through stand-ins for NVRTC and
// libcuda: a pipeline takes the kernel's [[max_total_threads_per_threadgroup]],
// lowered to what cuFuncGetAttribute says the function can launch with, and
// the bound alone where the driver says nothing (the call fails or gives 0;
// the pipeline took 0 threads then, refusing every dispatch).
func TestPipelineMaxThreads(t *testing.T) {
	const src = `#include <metal_stdlib>
using namespace metal;
[[max_total_threads_per_threadgroup(256)]]
kernel void bounded(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 1.0f; }
kernel void unbounded(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 2.0f; }
`
	cubin := []byte{0x7f, 'E', 'L', 'F'}
	nv := &nvrtcAPI{
		nvrtcCreateProgram:  func(prog *uintptr, _, _ *byte, _ int32, _, _ unsafe.Pointer) result { *prog = 1; return cudaSuccess },
		nvrtcCompileProgram: func(uintptr, int32, unsafe.Pointer) result { return cudaSuccess },
		nvrtcGetCUBINSize:   func(_ uintptr, n *uint64) result { *n = uint64(len(cubin)); return cudaSuccess },
		nvrtcGetCUBIN:       func(_ uintptr, out *byte) result { copy(unsafe.Slice(out, len(cubin)), cubin); return cudaSuccess },
		nvrtcDestroyProgram: func(*uintptr) result { return cudaSuccess },
		nvrtcGetErrorString: func(result) *byte { return &[]byte("NVRTC_ERROR\x00")[0] },
	}
	for _, c := range []struct {
		name          string
		attr          int32
		ok            bool
		bounded, free int
	}{
		{"driver allows more", 1024, true, 256, gpu.MaxThreadsPerThreadgroup},
		{"registers allow fewer", 128, true, 128, 128},
		{"attribute fails", 1024, false, 256, gpu.MaxThreadsPerThreadgroup},
		{"attribute is 0", 0, true, 256, gpu.MaxThreadsPerThreadgroup},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := &driverAPI{
				cuCtxSetCurrent:     func(uintptr) result { return cudaSuccess },
				cuModuleLoadData:    func(m *uintptr, _ unsafe.Pointer) result { *m = 1; return cudaSuccess },
				cuModuleGetFunction: func(f *uintptr, _ uintptr, _ string) result { *f = 2; return cudaSuccess },
				cuFuncGetAttribute: func(v *int32, attr int32, _ uintptr) result {
					if attr != funcAttrMaxThreads || !c.ok {
						return 1
					}
					*v = c.attr
					return cudaSuccess
				},
			}
			d := &Device{api: api, nv: &compiler{api: nv, version: "12.8", arch: "sm_90"}, pipes: map[string]*pipeline{}}
			for fn, want := range map[string]int{"bounded": c.bounded, "unbounded": c.free} {
				p, err := d.NewPipeline(gpu.Source{Name: "t.metal", Text: src}, fn)
				if err != nil {
					t.Fatal(err)
				}
				if p.MaxThreads() != want {
					t.Errorf("%s: MaxThreads %d, want %d", fn, p.MaxThreads(), want)
				}
			}
		})
	}
}
