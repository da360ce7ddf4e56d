package metal

import (
	"context"
	"slices"
	"sync"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/gpumodel"
	"petal/gpu"
	"petal/gpu/record"
)

// The 35B decode step through the driver: gpumodel encodes one step of the
// Qwen3.6-35B-A3B shape (no weights: a shape-only checkpoint, as petal
// bench --dry-run does) into a recording device that keeps every dispatch
// whole; the step is then replayed into the driver over the fake Metal,
// which counts the calls it makes.

// capturing records like record.Device and keeps each dispatch whole
// (arguments, inline bytes, threadgroup memory) and each barrier.
type capturing struct {
	*record.Device
	mu  sync.Mutex
	cbs []*captured
}

type captured struct {
	gpu.CommandBuffer
	steps []planStep
}

// planStep is a dispatch, or a barrier when barrier is set.
type planStep struct {
	barrier bool
	d       gpu.Dispatch
}

func (c *capturing) NewCommandBuffer() (gpu.CommandBuffer, error) {
	inner, err := c.Device.NewCommandBuffer()
	if err != nil {
		return nil, err
	}
	cb := &captured{CommandBuffer: inner}
	c.mu.Lock()
	c.cbs = append(c.cbs, cb)
	c.mu.Unlock()
	return cb, nil
}

func (c *captured) Dispatch(d *gpu.Dispatch) error {
	cp := *d
	cp.Args = slices.Clone(d.Args)
	for i := range cp.Args {
		cp.Args[i].Bytes = slices.Clone(cp.Args[i].Bytes)
	}
	cp.ThreadgroupMemory = slices.Clone(d.ThreadgroupMemory)
	c.steps = append(c.steps, planStep{d: cp})
	return c.CommandBuffer.Dispatch(d)
}

func (c *captured) Barrier() {
	c.steps = append(c.steps, planStep{barrier: true})
	c.CommandBuffer.Barrier()
}

// decodeStep35B is the dispatches and barriers of one decode step of the
// 35B shape, as gpumodel encodes it.
func decodeStep35B(t testing.TB) []planStep {
	t.Helper()
	ckpt, err := checkpoint.ShapeOnly(checkpoint.Qwen36())
	if err != nil {
		t.Fatal(err)
	}
	dev := &capturing{Device: record.New()}
	m, err := gpumodel.New(ckpt, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	// Two tokens: the prompt's one is fed, then one decode step is
	// encoded on its own (the last command buffer).
	_, err = seq.(*gpumodel.Sequence).Decode(context.Background(), []int{1}, &engine.Decode{
		Prompt: []int{1}, MaxTokens: 2, Token: func(int) (bool, error) { return false, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dev.cbs) == 0 {
		t.Fatal("the decode encoded nothing")
	}
	return dev.cbs[len(dev.cbs)-1].steps
}

// replay is a decode step translated to the driver: each recorded buffer
// becomes a driver buffer of its length (views of one mapping, which no
// call reads), each pipeline a driver pipeline of its name.
type replay struct {
	d     *Device
	f     *fake
	steps []planStep
}

func newReplay(t testing.TB) *replay {
	steps := decodeStep35B(t)
	longest := 0
	for _, s := range steps {
		for _, a := range s.d.Args {
			if a.Buffer != nil {
				longest = max(longest, a.Buffer.Len())
			}
		}
	}
	d, f := newFake(t, roundUp(longest, applePage))
	mem := mapped(t, longest)
	bufs := map[gpu.Buffer]gpu.Buffer{}
	pipes := map[string]gpu.Pipeline{}
	for i := range steps {
		s := &steps[i]
		if s.barrier {
			continue
		}
		name := s.d.Pipeline.Name()
		if pipes[name] == nil {
			p, err := d.NewPipeline(gpu.Source{Name: "plan.metal"}, name)
			if err != nil {
				t.Fatal(err)
			}
			pipes[name] = p
		}
		s.d.Pipeline = pipes[name]
		for j := range s.d.Args {
			a := &s.d.Args[j]
			if a.Buffer == nil {
				continue
			}
			if bufs[a.Buffer] == nil {
				b, err := d.WrapNoCopy(mem[:a.Buffer.Len()])
				if err != nil {
					t.Fatal(err)
				}
				bufs[a.Buffer] = b
			}
			a.Buffer = bufs[a.Buffer]
		}
	}
	return &replay{d: d, f: f, steps: steps}
}

// step makes a command buffer, encodes, commits and waits for the decode
// step in it, and recycles it, as gpumodel's decode loop does.
func (r *replay) step(t testing.TB) {
	cb, err := r.d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	r.encode(t, cb)
	gpu.Recycle(cb)
}

func (r *replay) encode(t testing.TB, cb gpu.CommandBuffer) {
	for i := range r.steps {
		if r.steps[i].barrier {
			cb.Barrier()
		} else if err := cb.Dispatch(&r.steps[i].d); err != nil {
			t.Fatal(err)
		}
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeStepAllocatesNothing: a 35B decode step through the driver
// (make the command buffer, encode, commit, wait, recycle) allocates
// nothing once a recycled command buffer is at hand; AllocsPerRun's
// warm-up step recycles the first.
func TestDecodeStepAllocatesNothing(t *testing.T) {
	r := newReplay(t)
	if n := testing.AllocsPerRun(20, func() { r.step(t) }); n != 0 {
		t.Errorf("a decode step: %.1f allocations, want 0", n)
	}
}

// BenchmarkDecodeStep35B times the driver's host side of one 35B decode
// step (make, encode, commit, wait, recycle) over the fake Metal, and
// reports the Objective-C calls a step makes.
func BenchmarkDecodeStep35B(b *testing.B) {
	r := newReplay(b)
	r.step(b)
	r.f.counts()
	b.ReportAllocs()
	for b.Loop() {
		r.step(b)
	}
	n := r.f.counts()
	total := 0
	for c := range numCalls {
		total += n[c]
	}
	dispatches := 0
	for _, s := range r.steps {
		if !s.barrier {
			dispatches++
		}
	}
	steps := float64(b.N)
	b.ReportMetric(float64(dispatches), "dispatches/step")
	b.ReportMetric(float64(total)/steps, "calls/step")
	b.ReportMetric(float64(n[cSetBuffer]+n[cSetBufferOffset]+n[cSetBuffers])/steps, "buffer-binds/step")
	b.ReportMetric(float64(n[cSetBytes])/steps, "inline-bytes/step")
	b.ReportMetric(float64(n[cSetPipeline])/steps, "pipeline-binds/step")
	b.ReportMetric(float64(n[cBarrier])/steps, "barriers/step")
	b.ReportMetric(float64(n[cPoolPush])/steps, "pools/step")
}
