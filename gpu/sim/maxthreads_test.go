package sim_test

import (
	"errors"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

// TestMaxThreadsAttribute: a kernel's [[max_total_threads_per_threadgroup]]
// may be a constant expression over integer macros, as Apple's compiler
// takes it; the pipeline reports it and refuses a larger threadgroup, and a
// kernel without it gets Metal's limit.
func TestMaxThreadsAttribute(t *testing.T) {
	src := func(attr string) gpu.Source {
		return gpu.Source{Name: "mt.metal", Text: `#include <metal_stdlib>
using namespace metal;
#define SIMDGROUPS 4
#define THREADS (SIMDGROUPS * 32)
` + attr + `
kernel void mt(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1.0f; }
kernel void plain(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 2.0f; }
`}
	}
	d := openSim(t, sim.Options{})
	for attr, want := range map[string]int{
		"[[max_total_threads_per_threadgroup(THREADS)]]":              128,
		"[[max_total_threads_per_threadgroup(2 * SIMDGROUPS * 32)]]":  256,
		"[[max_total_threads_per_threadgroup((SIMDGROUPS + 4) * 8)]]": 64,
		"[[max_total_threads_per_threadgroup(96)]]":                   96,
	} {
		p, err := d.NewPipeline(src(attr), "mt")
		if err != nil {
			t.Fatalf("%s: %v", attr, err)
		}
		if p.MaxThreads() != want {
			t.Errorf("%s: MaxThreads %d, want %d", attr, p.MaxThreads(), want)
		}
		buf, err := d.NewBuffer(4 * 2 * want)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := d.NewCommandBuffer()
		if err != nil {
			t.Fatal(err)
		}
		err = cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: want + 1, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BufferArg(0, buf, 0)}})
		if !errors.Is(err, gpu.ErrInvalid) || !strings.Contains(err.Error(), "mt:") {
			t.Errorf("%s: a threadgroup of %d: got %v, want gpu.ErrInvalid naming the kernel", attr, want+1, err)
		}
		cb.Commit()
		cb.Wait()
		plain, err := d.NewPipeline(src(attr), "plain")
		if err != nil {
			t.Fatal(err)
		}
		if plain.MaxThreads() != gpu.MaxThreadsPerThreadgroup {
			t.Errorf("%s: kernel without the attribute: MaxThreads %d, want %d", attr, plain.MaxThreads(), gpu.MaxThreadsPerThreadgroup)
		}
	}
	for _, attr := range []string{
		"[[max_total_threads_per_threadgroup(THREADZ)]]",
		"[[max_total_threads_per_threadgroup((THREADS)]]",
		"[[max_total_threads_per_threadgroup(THREADS * 16)]]",
		"[[max_total_threads_per_threadgroup(0)]]",
		"[[max_total_threads_per_threadgroup(THREADS - 1)]]",
	} {
		if _, err := d.NewPipeline(src(attr), "mt"); err == nil || !strings.Contains(err.Error(), "max_total_threads_per_threadgroup") {
			t.Errorf("%s: got %v, want an error naming the attribute", attr, err)
		}
	}
}
