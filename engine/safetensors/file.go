package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
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
	// Offset is the absolute byte offset of the data in the file. It can
	// be any value: MLX's writer does not pad its header, so a real
	// shard's data starts at 8+len(header) and a tensor of odd size moves
	// every one after it. The mapping starts on a page, so Offset's
	// alignment is the alignment of Data's first byte in memory.
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

// Aligned reports whether the tensor's bytes start at a multiple of n
// bytes in memory (and in the file).
func (t *Tensor) Aligned(n int) bool {
	return len(t.Data) == 0 || uintptr(unsafe.Pointer(&t.Data[0]))%uintptr(n) == 0
}

// The typed accessors below read the data as little-endian elements (the
// format's byte order; Petal's hosts, amd64 and arm64, are little-endian
// too). Where the data is aligned for the element they return a view of
// the mapping, so weights are used in place; where it is not they return
// a decoded copy, because a misaligned typed pointer is invalid in Go
// (checkptr, enabled by -race, rejects it) whatever the CPU tolerates.
// Call them once per tensor, at load, not per use.

// Uint32s returns a U32 tensor's data as words.
func (t *Tensor) Uint32s() []uint32 { return elements(t, 4, binary.LittleEndian.Uint32) }

// Uint16s returns a 2-byte tensor's data (BF16, F16) as raw halfwords.
func (t *Tensor) Uint16s() []uint16 { return elements(t, 2, binary.LittleEndian.Uint16) }

// Float32s returns an F32 tensor's data as floats.
func (t *Tensor) Float32s() []float32 {
	return elements(t, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
}

// elements is t's data as elements of size bytes: a view when aligned, else
// each decoded from its bytes.
func elements[E uint16 | uint32 | float32](t *Tensor, size int, decode func([]byte) E) []E {
	n := len(t.Data) / size
	if n == 0 {
		return nil
	}
	if t.Aligned(size) {
		return unsafe.Slice((*E)(unsafe.Pointer(&t.Data[0])), n)
	}
	out := make([]E, n)
	for i := range out {
		out[i] = decode(t.Data[size*i:])
	}
	return out
}
