package doctor

import (
	"errors"
	"strings"
	"testing"

	"petal/gpu"
)

// noted is a device that says where its kernel libraries came from, as the
// Metal driver does.
type noted struct {
	gpu.Device
	notes []string
}

func (n noted) Libraries() []string { return n.notes }

func TestLibrariesSaysBundledOrSource(t *testing.T) {
	r := &Report{}
	run := &runner{r: r}
	run.libraries(noted{notes: []string{"qmv.metal: bundled", "moe.metal: compiled from source (hash differs)"}})
	if len(r.Checks) != 1 {
		t.Fatalf("%d checks, want 1", len(r.Checks))
	}
	c := r.Checks[0]
	if !c.Pass || c.Section != SectionCompile || !strings.Contains(c.Message, "qmv.metal: bundled") || !strings.Contains(c.Message, "moe.metal: compiled from source") {
		t.Errorf("check %+v does not carry both notes", c)
	}

	r2 := &Report{}
	(&runner{r: r2}).libraries(plainDevice{})
	if len(r2.Checks) != 0 {
		t.Errorf("a device that cannot tell got a check: %+v", r2.Checks)
	}
}

type plainDevice struct{ gpu.Device }

// wrapper records the tensors it is told of.
type wrapper struct {
	gpu.Device
	got []gpu.Extent
}

var errWrapped = errors.New("wrapped by the device")

func (w *wrapper) WrapNoCopyTensors(mem []byte, tensors []gpu.Extent) (gpu.Buffer, error) {
	w.got = tensors
	return nil, errWrapped
}

func TestSourcedKeepsTensorWrapping(t *testing.T) {
	w := &wrapper{}
	s := &sourced{Device: w}
	ext := []gpu.Extent{{Name: "a", Offset: 0, Len: 8}}
	if _, err := gpu.WrapTensors(s, make([]byte, 8), ext); !errors.Is(err, errWrapped) {
		t.Fatalf("WrapTensors through sourced: %v, want the device's own wrapping", err)
	}
	if len(w.got) != 1 || w.got[0].Name != "a" {
		t.Errorf("device was told %v", w.got)
	}
}
