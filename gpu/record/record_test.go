package record

import (
	"errors"
	"testing"

	"petal/gpu"
)

func TestRecords(t *testing.T) {
	d := New()
	p, err := d.NewPipeline(gpu.Source{Name: "x.metal"}, "k")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.NewBuffer(64)
	w := Placeholder(1 << 40)
	cb, _ := d.NewCommandBuffer()
	one := gpu.Size{X: 1, Y: 1, Z: 1}
	for i := 0; i < 3; i++ {
		if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one, Threads: one, Args: []gpu.Arg{gpu.BufferArg(0, b, 0), gpu.BufferArg(1, w, 1<<39)}}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			cb.Barrier()
		}
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	tr := d.Traces()[0]
	if tr.Dispatches() != 3 || tr.Levels() != 2 {
		t.Errorf("recorded %d dispatches in %d levels, want 3 in 2", tr.Dispatches(), tr.Levels())
	}
	if w.Contents() != nil || len(b.Contents()) != 64 {
		t.Error("placeholder has memory or buffer lacks it")
	}
	bad := &gpu.Dispatch{Pipeline: p, Groups: one, Threads: gpu.Size{X: 2048, Y: 1, Z: 1}}
	cb2, _ := d.NewCommandBuffer()
	if err := cb2.Dispatch(bad); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("oversized threadgroup: %v", err)
	}
	if err := cb2.Commit(); err == nil {
		t.Error("commit after a bad dispatch succeeded")
	}
}

// TestSetMaxThreads: pipelines built after SetMaxThreads report its limit
// and the recorder refuses a larger threadgroup; earlier ones keep theirs.
func TestSetMaxThreads(t *testing.T) {
	d := New()
	before, _ := d.NewPipeline(gpu.Source{Name: "x.metal"}, "before")
	if err := d.SetMaxThreads(128); err != nil {
		t.Fatal(err)
	}
	after, _ := d.NewPipeline(gpu.Source{Name: "x.metal"}, "after")
	if before.MaxThreads() != gpu.MaxThreadsPerThreadgroup || after.MaxThreads() != 128 {
		t.Fatalf("MaxThreads %d and %d, want %d and 128", before.MaxThreads(), after.MaxThreads(), gpu.MaxThreadsPerThreadgroup)
	}
	one := gpu.Size{X: 1, Y: 1, Z: 1}
	for _, c := range []struct {
		p       gpu.Pipeline
		threads int
		ok      bool
	}{{after, 128, true}, {after, 129, false}, {before, 129, true}} {
		cb, _ := d.NewCommandBuffer()
		err := cb.Dispatch(&gpu.Dispatch{Pipeline: c.p, Groups: one, Threads: gpu.Size{X: c.threads, Y: 1, Z: 1}})
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, gpu.ErrInvalid)) {
			t.Errorf("%s with %d threads: %v, want ok=%t", c.p.Name(), c.threads, err, c.ok)
		}
	}
	for _, n := range []int{-1, gpu.MaxThreadsPerThreadgroup + 1} {
		if err := d.SetMaxThreads(n); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("SetMaxThreads(%d): %v, want gpu.ErrInvalid", n, err)
		}
	}
	if err := d.SetMaxThreads(0); err != nil {
		t.Fatal(err)
	}
	if p, _ := d.NewPipeline(gpu.Source{Name: "x.metal"}, "reset"); p.MaxThreads() != gpu.MaxThreadsPerThreadgroup {
		t.Errorf("after SetMaxThreads(0): MaxThreads %d", p.MaxThreads())
	}
}
