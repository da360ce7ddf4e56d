package gpu_test

import (
	"slices"
	"testing"

	"petal/gpu"
	"petal/gpu/record"
)

// tensorWrapper is a device that records the tensors it is told of.
type tensorWrapper struct {
	*record.Device
	got []gpu.Extent
}

func (d *tensorWrapper) WrapNoCopyTensors(mem []byte, tensors []gpu.Extent) (gpu.Buffer, error) {
	d.got = tensors
	return d.Device.WrapNoCopy(mem)
}

func TestWrapTensorsTellsTensorWrappers(t *testing.T) {
	mem := make([]byte, 64)
	tensors := []gpu.Extent{{Name: "a", Offset: 0, Len: 16}, {Name: "b", Offset: 16, Len: 48}}
	d := &tensorWrapper{Device: record.New()}
	b, err := gpu.WrapTensors(d, mem, tensors)
	if err != nil || b.Len() != len(mem) || !slices.Equal(d.got, tensors) {
		t.Errorf("a TensorWrapper: buffer %v, %v, told %v", b, err, d.got)
	}
	// Any other device wraps the region as WrapNoCopy does.
	b, err = gpu.WrapTensors(record.New(), mem, tensors)
	if err != nil || b.Len() != len(mem) {
		t.Errorf("a plain device: %v, %v", b, err)
	}
}
