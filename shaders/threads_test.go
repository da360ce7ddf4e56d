package shaders

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"petal/gpu"
	"petal/gpu/record"
	"petal/gpu/sim"
)

// TestKernelThreads holds kernelThreads equal to the kernels'
// [[max_total_threads_per_threadgroup]], as the sim reads it: every kernel
// listed declares its size, and no other kernel declares one.
func TestKernelThreads(t *testing.T) {
	d, err := sim.Open(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	entry := regexp.MustCompile(`(?m)^kernel void (\w+)\(`)
	seen := map[string]bool{}
	for _, file := range Names() {
		src, err := Source(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range entry.FindAllStringSubmatch(src, -1) {
			fn := m[1]
			seen[fn] = true
			p, err := d.NewPipeline(gpu.Source{Name: file, Text: src}, fn)
			if err != nil {
				t.Fatalf("%s: %v", fn, err)
			}
			want, fixed := kernelThreads[fn]
			if !fixed {
				want = gpu.MaxThreadsPerThreadgroup
			}
			if p.MaxThreads() != want {
				t.Errorf("%s %s: the pipeline takes %d threads, kernelThreads says %d (fixed: %t)", file, fn, p.MaxThreads(), want, fixed)
			}
		}
	}
	for fn := range kernelThreads {
		if !seen[fn] {
			t.Errorf("kernelThreads lists %s, which no file defines", fn)
		}
	}
}

// TestPipelineRefusesSmallThreadgroups: a pipeline that takes fewer threads
// than its kernel is dispatched with fails when it is built, naming the
// kernel and both sizes, before anything is encoded; kernels whose
// threadgroup fits build as before.
func TestPipelineRefusesSmallThreadgroups(t *testing.T) {
	const limit = 256
	rec := record.New()
	if err := rec.SetMaxThreads(limit); err != nil {
		t.Fatal(err)
	}
	k := NewKernels(rec)
	buf := func(floats int) View {
		b, err := rec.NewBuffer(4 * floats)
		if err != nil {
			t.Fatal(err)
		}
		return View{Buf: b}
	}
	cb, err := rec.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	// The model's DeltaNet heads: 128 value columns by 4 row slices.
	d := DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, ConvKernel: 4, Eps: 1e-6}
	hv, c := d.ValueHeads*d.ValueDim, d.Channels()
	err = k.DeltaStepConv(cb, DeltaStepConvIO{
		DeltaStepIO: DeltaStepIO{O: buf(hv), QKV: buf(c), Z: buf(hv), B: buf(d.ValueHeads), A: buf(d.ValueHeads),
			State: buf(d.ValueHeads * d.KeyDim * d.ValueDim), NegA: buf(d.ValueHeads), DtBias: buf(d.ValueHeads),
			Norm: buf(d.ValueDim), Shape: d},
		ConvState: buf(c * (d.ConvKernel - 1)), ConvW: buf(c * d.ConvKernel),
	})
	if !errors.Is(err, gpu.ErrUnsupported) {
		t.Fatalf("DeltaStepConv on a %d-thread pipeline: %v, want gpu.ErrUnsupported", limit, err)
	}
	for _, want := range []string{"deltanet.metal delta_step_conv_f32", "at most 256 threads", "up to 512"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := k.DeltaConvShift(cb, buf(c), buf(c*(d.ConvKernel-1)), c, d.ConvKernel); err != nil {
		t.Errorf("DeltaConvShift, %d threads on a %d-thread pipeline: %v", DeltaConvThreads, limit, err)
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := cb.(interface{ Trace() *gpu.Trace }).Trace().Dispatches(); n != 1 {
		t.Errorf("%d dispatches recorded, want DeltaConvShift's 1", n)
	}
}
