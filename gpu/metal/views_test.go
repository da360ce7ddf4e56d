package metal

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"petal/gpu"
)

// mapped returns n bytes of an anonymous mapping starting on an Apple page,
// as an mmapped shard on a Mac does.
func mapped(t testing.TB, n int) []byte {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, n+applePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	skip := (applePage - int(uintptr(unsafe.Pointer(&m[0]))%applePage)) % applePage
	return m[skip : skip+n]
}

// shardTensors lays out tensors of the given lengths one after another from
// a header of 8+97 bytes (as MLX's writer leaves them: unaligned).
func shardTensors(lengths ...int) ([]gpu.Extent, int) {
	off := 8 + 97
	var ts []gpu.Extent
	for i, n := range lengths {
		ts = append(ts, gpu.Extent{Name: fmt.Sprintf("model.layers.%d.weight", i), Offset: off, Len: n})
		off += n
	}
	return ts, off
}

// TestWrapSplitsLongShard: a shard longer than the device's largest buffer
// is wrapped as overlapping page-aligned views no longer than the limit, and
// every tensor bound at its offset lands in a view that holds it whole.
func TestWrapSplitsLongShard(t *testing.T) {
	const limit = 10*applePage + 1000 // not a whole number of pages
	d, f := newFake(t, limit)
	f.log = true
	ts, n := shardTensors(3*applePage+5, 2*applePage, 4*applePage-7, 3*applePage+11, 777, 5*applePage, 2*applePage+3, 3*applePage)
	mem := mapped(t, n)
	b, err := d.WrapNoCopyTensors(mem, ts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if b.Len() != n || &b.Contents()[0] != &mem[0] {
		t.Fatalf("the buffer is %d bytes at %p, want the region itself (%d bytes at %p)", b.Len(), &b.Contents()[0], n, &mem[0])
	}
	if len(f.views) < 2 {
		t.Fatalf("%d-byte shard, %d-byte limit: %d view(s)", n, limit, len(f.views))
	}
	type span struct{ start, end int }
	views := map[uintptr]span{}
	base := uintptr(unsafe.Pointer(&mem[0]))
	end := 0
	for _, v := range f.views {
		start := int(uintptr(v.p) - base)
		if start%applePage != 0 || v.length%applePage != 0 || v.length > limit {
			t.Errorf("view at %d, %d bytes: want a page-aligned start and whole pages, at most %d", start, v.length, limit)
		}
		if start > end {
			t.Errorf("view at %d leaves a gap after %d", start, end)
		}
		views[v.id] = span{start, start + int(v.length)}
		end = max(end, start+int(v.length))
	}
	if end < n {
		t.Errorf("the views end at %d, the shard at %d", end, n)
	}
	p, err := d.NewPipeline(gpu.Source{Name: "k.metal"}, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range ts {
		off := tn.Offset / 4 * 4 // what a kernel binds: a 4-byte aligned start
		f.binds = f.binds[:0]
		cb, err := d.NewCommandBuffer() // a fresh encoder binds every time
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: 1, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BufferArg(0, b, off)}}); err != nil {
			t.Fatal(err)
		}
		if err := cb.Commit(); err != nil {
			t.Fatal(err)
		}
		if len(f.binds) != 1 {
			t.Fatalf("%s: bindings %+v, want one setBuffer", tn.Name, f.binds)
		}
		v, ok := views[f.binds[0].buf]
		if !ok || v.start+int(f.binds[0].offset) != off || v.start > off || tn.Offset+tn.Len > v.end {
			t.Errorf("%s (%d bytes at %d) bound to view %+v at %d", tn.Name, tn.Len, tn.Offset, v, f.binds[0].offset)
		}
	}
}

// TestWrapRefusesOversizedTensor: only a tensor longer than a buffer can
// be fails the wrap, with its name and both sizes.
func TestWrapRefusesOversizedTensor(t *testing.T) {
	const limit = 8 * applePage
	d, _ := newFake(t, limit)
	ts, n := shardTensors(applePage, limit+1, applePage)
	_, err := d.WrapNoCopyTensors(mapped(t, n), ts)
	if err == nil {
		t.Fatal("a tensor longer than maxBufferLength was wrapped")
	}
	for _, want := range []string{ts[1].Name, fmt.Sprint(limit + 1), fmt.Sprint(limit)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// The same shard with every tensor within the limit wraps.
	ts, n = shardTensors(applePage, limit-2*applePage, applePage, limit/2)
	b, err := d.WrapNoCopyTensors(mapped(t, n), ts)
	if err != nil {
		t.Fatalf("tensors up to %d bytes, limit %d: %v", limit-2*applePage, limit, err)
	}
	b.Release()
}

// TestWrapNoCopyFitsOrNeedsTensors: a region within the limit is one
// buffer, its length rounded up to whole pages; a longer one, without its
// tensors, cannot be split and says so, as a new buffer over the limit
// does.
func TestWrapNoCopyFitsOrNeedsTensors(t *testing.T) {
	d, f := newFake(t, 4*applePage)
	f.log = true
	b, err := d.WrapNoCopy(mapped(t, 3*applePage+1))
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	if len(f.views) != 1 || f.views[0].length != 4*applePage {
		t.Errorf("views %+v, want one of 4 pages", f.views)
	}
	_, err = d.WrapNoCopy(mapped(t, 4*applePage+1))
	if !errors.Is(err, gpu.ErrInvalid) || !strings.Contains(err.Error(), "WrapTensors") {
		t.Errorf("a region over the limit without tensors: %v", err)
	}
	if _, err := d.WrapNoCopy(mapped(t, 2*applePage)[1024:]); err == nil {
		t.Error("a region not on an Apple page was wrapped")
	}
	if _, err := d.NewBuffer(4*applePage + 1); !errors.Is(err, gpu.ErrInvalid) || !strings.Contains(err.Error(), "maxBufferLength") {
		t.Errorf("a new buffer over the limit: %v", err)
	}
}

// TestPlanViewsHoldsEveryTensor checks the plan's promise over many
// layouts: each tensor lies in the view its offset resolves to.
func TestPlanViewsHoldsEveryTensor(t *testing.T) {
	for _, limit := range []int{5 * applePage, 9*applePage + 3, 64 * applePage} {
		for largest := 1; largest < limit-applePage; largest += limit / 7 {
			lengths := []int{largest, 3, largest / 2, applePage, largest - 1, 1, largest, 2 * applePage}
			ts, n := shardTensors(append(lengths, lengths...)...)
			p, err := planViews(n, limit, applePage, ts)
			if err != nil {
				t.Fatalf("limit %d, largest %d: %v", limit, largest, err)
			}
			padded := roundUp(n, applePage)
			if last, l := p.bounds(p.count-1, padded); last+l != padded {
				t.Errorf("limit %d, largest %d: the last view ends at %d, the region at %d", limit, largest, last+l, padded)
			}
			for _, tn := range ts {
				k, local := p.resolve(tn.Offset)
				start, l := p.bounds(k, padded)
				if start+local != tn.Offset || local+tn.Len > l || l > limit || start%applePage != 0 {
					t.Errorf("limit %d: %s (%d at %d) in view %d (%d bytes at %d), local %d", limit, tn.Name, tn.Len, tn.Offset, k, l, start, local)
				}
			}
		}
	}
}

// TestViewsRebindInOneEncoder: within one encoder, tensors of a split
// shard bound one after another at the same slot move the binding to the
// view holding each (setBuffer), or only its offset when the view stays
// (setBufferOffset), and a tensor bound again as it is bound sends
// nothing: what the encoder holds is always the tensor's view and offset.
func TestViewsRebindInOneEncoder(t *testing.T) {
	const limit = 6 * applePage
	d, f := newFake(t, limit)
	f.log = true
	ts, n := shardTensors(2*applePage, applePage+8, 3*applePage, 16, 2*applePage+4, applePage, 3*applePage+12, 40)
	mem := mapped(t, n)
	b, err := d.WrapNoCopyTensors(mem, ts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if len(f.views) < 3 {
		t.Fatalf("%d views, want at least 3", len(f.views))
	}
	start := map[uintptr]int{}
	base := uintptr(unsafe.Pointer(&mem[0]))
	for _, v := range f.views {
		start[v.id] = int(uintptr(v.p) - base)
	}
	p, _ := d.NewPipeline(gpu.Source{Name: "k.metal"}, "k")
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	var held bound // what the encoder has at slot 0
	order := []int{0, 1, 2, 2, 3, 4, 1, 5, 6, 6, 7, 0, 7}
	for _, i := range order {
		tn := ts[i]
		off := (tn.Offset + 3) / 4 * 4
		f.binds = f.binds[:0]
		if err := cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: one(), Threads: one(), Args: []gpu.Arg{gpu.BufferArg(0, b, off)}}); err != nil {
			t.Fatal(err)
		}
		for _, bd := range f.binds {
			if bd.buf == 0 {
				bd.buf = held.buf // setBufferOffset keeps the buffer
			}
			held = bd
		}
		v, ok := start[held.buf]
		if !ok || v+int(held.offset) != off {
			t.Fatalf("%s at %d: the encoder holds view %d at %d", tn.Name, off, held.buf, held.offset)
		}
		view := f.views[slices.IndexFunc(f.views, func(c noCopy) bool { return c.id == held.buf })]
		if v > off || tn.Offset+tn.Len > v+int(view.length) {
			t.Errorf("%s (%d bytes at %d) bound in the view of %d bytes at %d", tn.Name, tn.Len, tn.Offset, view.length, v)
		}
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if c := f.counts(); c[cSetBufferOffset] == 0 || c[cSetBuffer] < 2 {
		t.Errorf("%d setBuffer and %d setBufferOffset calls: the order should need both", c[cSetBuffer], c[cSetBufferOffset])
	}
}
