package gpumodel

import (
	"fmt"
	"sync"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/sample"
	"petal/gpu"
	"petal/gpu/record"
)

// recycling records like record.Device, and its command buffers are
// gpu.Recyclers that report every misuse: a Recycle before a Wait has
// returned, a second Recycle, any call after Recycle.
type recycling struct {
	*record.Device
	mu      sync.Mutex
	cbs     []*recyclable
	misused []string
}

type recyclable struct {
	gpu.CommandBuffer
	dev      *recycling
	id       int
	waited   bool // a Wait has returned
	recycled bool
}

func (d *recycling) NewCommandBuffer() (gpu.CommandBuffer, error) {
	inner, err := d.Device.NewCommandBuffer()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cb := &recyclable{CommandBuffer: inner, dev: d, id: len(d.cbs)}
	d.cbs = append(d.cbs, cb)
	return cb, nil
}

// use notes a call of cb's method, a misuse once cb is recycled.
func (c *recyclable) use(method string) {
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	if c.recycled {
		c.dev.misused = append(c.dev.misused, fmt.Sprintf("command buffer %d: %s after Recycle", c.id, method))
	}
}

func (c *recyclable) Dispatch(d *gpu.Dispatch) error {
	c.use("Dispatch")
	return c.CommandBuffer.Dispatch(d)
}

func (c *recyclable) Barrier() {
	c.use("Barrier")
	c.CommandBuffer.Barrier()
}

func (c *recyclable) Commit() error {
	c.use("Commit")
	return c.CommandBuffer.Commit()
}

func (c *recyclable) Wait() error {
	c.use("Wait")
	err := c.CommandBuffer.Wait()
	c.dev.mu.Lock()
	c.waited = true
	c.dev.mu.Unlock()
	return err
}

func (c *recyclable) Status() gpu.Status {
	c.use("Status")
	return c.CommandBuffer.Status()
}

func (c *recyclable) Trace() *gpu.Trace {
	c.use("Trace")
	return c.CommandBuffer.Trace()
}

func (c *recyclable) Recycle() {
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	switch {
	case c.recycled:
		c.dev.misused = append(c.dev.misused, fmt.Sprintf("command buffer %d recycled twice", c.id))
	case !c.waited:
		c.dev.misused = append(c.dev.misused, fmt.Sprintf("command buffer %d recycled before Wait returned", c.id))
	}
	c.recycled = true
}

// allowAll is a constraint that leaves every pick free, so a reply takes
// the constrained loop (forward pass and draw in command buffers of their
// own) whatever the recorder's zero tokens are.
type allowAll struct{}

func (allowAll) Allowed([]uint64) bool { return false }
func (allowAll) Advance(int) error     { return nil }

// TestCommandBuffersRecycled: every command buffer the sequence commits,
// on each path (a short prompt's decode steps, the chunked prefill, the
// two steps in flight, a constrained reply's forward passes and draws,
// the host loop's Forward and its chunks, a stop with a step in flight),
// goes back to the driver exactly once, after its Wait, and is not
// touched afterwards.
func TestCommandBuffersRecycled(t *testing.T) {
	ckpt, err := checkpoint.ShapeOnly(checkpoint.Qwen36())
	if err != nil {
		t.Fatal(err)
	}
	dev := &recycling{Device: record.NewCounting()}
	m, err := New(ckpt, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	short := []int{1, 2}
	long := make([]int, m.prefillChunk+prefillMinTokens+1) // two chunks
	seed := uint64(7)
	params := sample.Params{TopP: 1, RepetitionPenalty: 1, Seed: &seed}
	sampling := &engine.Sampling{Params: params, Prompt: short}
	sp, err := sample.New(params, sample.Vocab{Size: m.cfg.Vocab}, short)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		d    engine.Decode
		stop int // the index of the token Token stops at, -1: none
	}{
		{"short prompt", engine.Decode{Prompt: short, MaxTokens: 5}, -1},
		{"long prompt", engine.Decode{Prompt: long, MaxTokens: 3}, -1},
		{"stopped with a step in flight", engine.Decode{Prompt: short, MaxTokens: 5}, 1},
		{"constrained", engine.Decode{Prompt: short, MaxTokens: 4, Sampling: sampling, Picker: sp, Constraint: allowAll{}}, -1},
		{"host loop", engine.Decode{Prompt: short, MaxTokens: 3, Picker: &picker{}}, -1},
		{"host loop, long prompt", engine.Decode{Prompt: long, MaxTokens: 2, Picker: &picker{}}, -1},
	} {
		dev.mu.Lock()
		before := len(dev.cbs)
		dev.mu.Unlock()
		seq, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		taken := 0
		tc.d.Token = func(int) (bool, error) {
			taken++
			return taken-1 == tc.stop, nil
		}
		if _, err := engine.Run(t.Context(), seq, m.cfg.Vocab, &tc.d); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		seq.Close()
		dev.mu.Lock()
		made := dev.cbs[before:]
		for _, cb := range made {
			if !cb.recycled {
				t.Errorf("%s: command buffer %d (status %v) never recycled", tc.name, cb.id, cb.CommandBuffer.Status())
			}
		}
		for _, msg := range dev.misused {
			t.Errorf("%s: %s", tc.name, msg)
		}
		dev.misused = nil
		if len(made) == 0 {
			t.Errorf("%s: no command buffer made", tc.name)
		}
		dev.mu.Unlock()
	}
}
