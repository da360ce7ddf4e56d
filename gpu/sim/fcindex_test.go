package sim_test

import (
	"testing"

	"petal/gpu"
	"petal/gpu/sim"
)

// TestFunctionConstantIndexMacro holds what Metal accepts and args.h
// relies on: a function constant index written as an integer macro plus an
// offset (FC_<OP> + n).
func TestFunctionConstantIndexMacro(t *testing.T) {
	d := openSim(t, sim.Options{Fast: true})
	src := gpu.Source{Name: "fcindex.metal", Text: `#include <metal_stdlib>
using namespace metal;
#define FC_TEST 300
constant int A [[function_constant(FC_TEST + 0)]];
constant int B [[function_constant(FC_TEST + 1)]];
constant int C [[function_constant(7)]];
kernel void fc(device int* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    out[0] = A;
    out[1] = B;
    out[2] = C;
}
`}
	p := mustPipeline(t, d, src, "fc", gpu.IntConstant(300, 11), gpu.IntConstant(301, 22), gpu.IntConstant(7, 33))
	out := buffer(t, d, make([]uint32, 3))
	if err := runOne(t, d, &gpu.Dispatch{Pipeline: p, Groups: size(1, 1), Threads: size(1, 1), Args: []gpu.Arg{gpu.BufferArg(0, out, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint32{11, 22, 33} {
		if got := u32(out, i); got != want {
			t.Errorf("constant %d = %d, want %d", i, got, want)
		}
	}
	bad := gpu.Source{Name: "fcbad.metal", Text: "#include <metal_stdlib>\nconstant int A [[function_constant(FC_NONE + 1)]];\nkernel void k(device int* o [[buffer(0)]]) { o[0] = A; }\n"}
	if _, err := d.NewPipeline(bad, "k", gpu.IntConstant(1, 1)); err == nil {
		t.Error("an index naming an undefined macro compiled")
	}
}
