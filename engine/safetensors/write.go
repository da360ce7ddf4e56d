package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// NewTensor is a tensor to be written by Encode.
type NewTensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// headerAlign keeps every tensor aligned for in-place word reads: the
// header is padded with spaces so the data section starts on this boundary,
// and each tensor is padded to it.
const headerAlign = 8

// Encode writes tensors, in the given order, as a safetensors file.
func Encode(w io.Writer, tensors []NewTensor, metadata map[string]string) error {
	header := map[string]any{}
	if metadata != nil {
		header["__metadata__"] = metadata
	}
	var off int64
	pads := make([]int64, len(tensors))
	for i, t := range tensors {
		if err := checkNewTensor(t); err != nil {
			return err
		}
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
		pads[i] = (headerAlign - off%headerAlign) % headerAlign
		off += pads[i]
	}
	js, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for (8+len(js))%headerAlign != 0 {
		js = append(js, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	var zeros [headerAlign]byte
	for i, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
		if _, err := w.Write(zeros[:pads[i]]); err != nil {
			return err
		}
	}
	return nil
}

// checkNewTensor refuses a tensor whose data does not match its dtype and
// shape, which no reader would accept.
func checkNewTensor(t NewTensor) error {
	var elems int64 = 1
	for _, d := range t.Shape {
		elems *= int64(d)
	}
	if want := elems * int64(t.DType.Size()); want != int64(len(t.Data)) || t.DType.Size() == 0 {
		return fmt.Errorf("safetensors: tensor %q: %s%v needs %d bytes, have %d", t.Name, t.DType, t.Shape, want, len(t.Data))
	}
	return nil
}
