package safetensors

import (
	"fmt"
	"os"
	"unsafe"
)

// File is an open, memory-mapped safetensors file.
type File struct {
	Path   string
	Header *Header
	// Data is the whole file, mapped read-only; tensors are views into it.
	Data    []byte
	tensors map[string]*Tensor
}

// Tensor is one tensor of a file: its description and a view of its bytes.
type Tensor struct {
	Info
	File *File
	// Offset is the absolute byte offset of the data in the file; it is a
	// multiple of the element size so the bytes can be read as words in
	// place (and bound to a GPU buffer at that offset).
	Offset int64
	Data   []byte
}

// Open maps the file at path and parses its header. The mapping lives until
// Close.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: %w", path, corrupt("file of %d bytes is too short for the 8-byte header length", size))
	}
	data, err := mapFile(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: mapping %d bytes: %w", path, size, err)
	}
	sf := &File{Path: path, Data: data}
	if err := sf.index(); err != nil {
		sf.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sf, nil
}

func (f *File) index() error {
	h, err := ParseHeader(f.Data, int64(len(f.Data)))
	if err != nil {
		return err
	}
	f.Header = h
	f.tensors = make(map[string]*Tensor, len(h.Tensors))
	for _, info := range h.Tensors {
		off := h.DataOffset + info.Begin
		if off%int64(info.DType.Size()) != 0 {
			return corrupt("tensor %q: data at file offset %d is not aligned to its %d-byte elements", info.Name, off, info.DType.Size())
		}
		f.tensors[info.Name] = &Tensor{Info: info, File: f, Offset: off, Data: f.Data[off : h.DataOffset+info.End : h.DataOffset+info.End]}
	}
	return nil
}

// Tensor returns the named tensor, or nil.
func (f *File) Tensor(name string) *Tensor { return f.tensors[name] }

// Tensors returns every tensor in data order.
func (f *File) Tensors() []*Tensor {
	out := make([]*Tensor, 0, len(f.Header.Tensors))
	for _, info := range f.Header.Tensors {
		out = append(out, f.tensors[info.Name])
	}
	return out
}

// Close unmaps the file; no tensor of it may be used afterwards.
func (f *File) Close() error {
	if f.Data == nil {
		return nil
	}
	err := unmap(f.Data)
	f.Data = nil
	return err
}

// Uint32s views a U32 tensor's data as words (the host is little-endian, as
// the format is).
func (t *Tensor) Uint32s() []uint32 {
	if len(t.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4)
}

// Uint16s views a 2-byte tensor's data (BF16, F16) as raw halfwords.
func (t *Tensor) Uint16s() []uint16 {
	if len(t.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), len(t.Data)/2)
}

// Float32s views an F32 tensor's data as floats.
func (t *Tensor) Float32s() []float32 {
	if len(t.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4)
}
