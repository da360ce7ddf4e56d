package gpu

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

type fakePipeline struct{ max int }

func (p fakePipeline) Name() string    { return "fake" }
func (p fakePipeline) MaxThreads() int { return p.max }

type fakeBuffer struct{ n int }

func (b fakeBuffer) Len() int         { return b.n }
func (b fakeBuffer) Contents() []byte { return make([]byte, b.n) }
func (b fakeBuffer) Release()         {}

func TestDispatchCheck(t *testing.T) {
	ok := func() *Dispatch {
		return &Dispatch{Pipeline: fakePipeline{1024}, Groups: Size{2, 1, 1}, Threads: Size{64, 1, 1},
			Args: []Arg{BufferArg(1, fakeBuffer{256}, 16), BytesArg(0, []byte{1, 2, 3, 4})}, ThreadgroupMemory: []int{256}}
	}
	if err := ok().Check(); err != nil {
		t.Fatalf("valid dispatch: %v", err)
	}
	bad := map[string]func(d *Dispatch){
		"no pipeline":        func(d *Dispatch) { d.Pipeline = nil },
		"empty grid":         func(d *Dispatch) { d.Groups.Y = 0 },
		"too many threads":   func(d *Dispatch) { d.Threads = Size{1025, 1, 1} },
		"over pipeline max":  func(d *Dispatch) { d.Pipeline = fakePipeline{32} },
		"index out of range": func(d *Dispatch) { d.Args[0].Index = MaxBindings },
		"index twice":        func(d *Dispatch) { d.Args[1].Index = 1 },
		"offset past end":    func(d *Dispatch) { d.Args[0].Offset = 256 },
		"unaligned offset":   func(d *Dispatch) { d.Args[0].Offset = 2 },
		"no buffer":          func(d *Dispatch) { d.Args[0].Buffer = nil },
		"too many bytes":     func(d *Dispatch) { d.Args[1].Bytes = make([]byte, MaxInlineBytes+1) },
		"empty bytes":        func(d *Dispatch) { d.Args[1].Bytes = []byte{} },
		"tg not 16-multiple": func(d *Dispatch) { d.ThreadgroupMemory[0] = 20 },
		"tg too large":       func(d *Dispatch) { d.ThreadgroupMemory = []int{MaxThreadgroupMemory, 16} },
		"tg too many slots":  func(d *Dispatch) { d.ThreadgroupMemory = make([]int, MaxThreadgroupMemoryBindings+1) },
	}
	for name, mutate := range bad {
		d := ok()
		mutate(d)
		if err := d.Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Check() = %v, want ErrInvalid", name, err)
		}
	}
}

func TestPipelineKey(t *testing.T) {
	src := Source{Name: "a.metal", Text: "kernel void k() {}"}
	k1 := PipelineKey(src, "k", []Constant{IntConstant(0, 1), BoolConstant(3, true)})
	k2 := PipelineKey(src, "k", []Constant{BoolConstant(3, true), IntConstant(0, 1)})
	if k1 != k2 {
		t.Errorf("constant order changed the key: %q vs %q", k1, k2)
	}
	others := []string{
		PipelineKey(src, "k", []Constant{IntConstant(0, 2), BoolConstant(3, true)}),
		PipelineKey(src, "k", []Constant{UintConstant(0, 1), BoolConstant(3, true)}),
		PipelineKey(src, "k", []Constant{IntConstant(0, 1)}),
		PipelineKey(src, "k2", []Constant{IntConstant(0, 1), BoolConstant(3, true)}),
		PipelineKey(Source{Name: "a.metal", Text: "kernel void k() { }"}, "k", []Constant{IntConstant(0, 1), BoolConstant(3, true)}),
	}
	for i, o := range others {
		if o == k1 {
			t.Errorf("key %d collides with the base key %q", i, k1)
		}
	}
}

func TestCheckConstants(t *testing.T) {
	if err := CheckConstants([]Constant{IntConstant(0, 1), FloatConstant(100, 0.5)}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]Constant{
		{IntConstant(-1, 0)},
		{IntConstant(MaxConstantIndex+1, 0)},
		{{Index: 2}},
		{IntConstant(4, 0), UintConstant(4, 0)},
	} {
		if err := CheckConstants(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", bad, err)
		}
	}
	if got := FloatConstant(0, 1.5).Literal(); !strings.Contains(got, "0x3fc00000") {
		t.Errorf("float literal %q does not carry the bits", got)
	}
	if got := IntConstant(0, -7).Literal(); got != "-7" {
		t.Errorf("int literal %q", got)
	}
}

func TestTraceLevels(t *testing.T) {
	d := &Dispatch{Pipeline: fakePipeline{1024}, Groups: Size{1, 1, 1}, Threads: Size{1, 1, 1}, Args: []Arg{BytesArg(0, []byte{1})}}
	encode := func(tr *Trace) {
		tr.AddBarrier() // leading barrier orders nothing
		tr.AddDispatch(d)
		tr.AddDispatch(d)
		tr.AddBarrier()
		tr.AddBarrier() // repeated barrier collapses
		tr.AddDispatch(d)
		tr.AddBarrier()
	}
	for _, keep := range []bool{true, false} {
		tr := Trace{Keep: keep}
		encode(&tr)
		if tr.Dispatches() != 3 || tr.Levels() != 2 {
			t.Errorf("keep %v: dispatches %d levels %d, want 3 and 2", keep, tr.Dispatches(), tr.Levels())
		}
		if n, want := len(tr.Events), map[bool]int{true: 5, false: 0}[keep]; n != want {
			t.Errorf("keep %v: %d events recorded, want %d", keep, n, want)
		}
	}
	if n := testing.AllocsPerRun(10, func() { encode(&Trace{}) }); n != 0 {
		t.Errorf("a counting trace allocates %v times", n)
	}
}

func TestCheckNoCopy(t *testing.T) {
	page := os.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if err := CheckNoCopy(m[:100]); err != nil {
		t.Errorf("page-aligned region refused: %v", err)
	}
	if err := CheckNoCopy(m[8:]); !errors.Is(err, ErrInvalid) {
		t.Errorf("unaligned region: %v", err)
	}
	if err := CheckNoCopy(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty region: %v", err)
	}
}
