package gpu

// Extent is where one tensor lies in a region given to WrapNoCopy: Len
// bytes from Offset.
type Extent struct {
	Name        string
	Offset, Len int
}

// A TensorWrapper is a device whose buffers have a largest length (Metal's
// maxBufferLength): told where a region's tensors lie, it can wrap a region
// longer than that as several overlapping views, each tensor wholly inside
// one, and resolve a tensor's offset to its view when it is bound.
type TensorWrapper interface {
	WrapNoCopyTensors(mem []byte, tensors []Extent) (Buffer, error)
}

// WrapTensors is dev.WrapNoCopy(mem) for a region holding tensors (a
// checkpoint shard): a TensorWrapper is told where they lie.
func WrapTensors(dev Device, mem []byte, tensors []Extent) (Buffer, error) {
	if w, ok := dev.(TensorWrapper); ok {
		return w.WrapNoCopyTensors(mem, tensors)
	}
	return dev.WrapNoCopy(mem)
}
