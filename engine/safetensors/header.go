package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"petal/engine/damaged"
)

// ErrCorrupt marks every error caused by the contents of a file, so callers
// can tell "this file is bad, fetch it again" from other failures; it is
// also [damaged.Err].
var ErrCorrupt = damaged.New("corrupt safetensors file")

const (
	// MaxHeaderSize bounds the JSON header; real headers of a 20 GB
	// checkpoint shard are a few hundred KB.
	MaxHeaderSize = 100 << 20
	// MaxRank bounds the number of dimensions of one tensor.
	MaxRank = 8
	// MaxElements bounds the element count of one tensor (2^40).
	MaxElements = 1 << 40
)

// DType is a safetensors element type name as written in the header.
type DType string

// The element types Petal reads.
const (
	BF16 DType = "BF16"
	F16  DType = "F16"
	F32  DType = "F32"
	U32  DType = "U32"
)

// dtypeSizes lists every whole-byte dtype the format defines (MLX writes
// C64 for complex64 and F8_E8M0 for its scale exponents), so a header
// naming one that Petal never uses still parses.
var dtypeSizes = map[DType]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
	"I16": 2, "U16": 2, F16: 2, BF16: 2,
	"I32": 4, U32: 4, F32: 4,
	"I64": 8, "U64": 8, "F64": 8, "C64": 8,
}

// Size is the size of one element in bytes, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// Info describes one tensor of a header.
type Info struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are byte offsets relative to the data section.
	Begin, End int64
}

// Elements is the product of the shape.
func (i *Info) Elements() int64 {
	n := int64(1)
	for _, d := range i.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a parsed header: the tensors in data order and where the data
// section starts in the file.
type Header struct {
	Tensors    []Info
	DataOffset int64
	Metadata   map[string]string
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

type rawEntry struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseHeader parses the header at the start of a file of fileSize bytes;
// prefix holds at least the first 8 bytes and the whole JSON header when
// those fit in it. Every tensor is checked against the file's size.
func ParseHeader(prefix []byte, fileSize int64) (*Header, error) {
	if len(prefix) < 8 || fileSize < 8 {
		return nil, corrupt("file of %d bytes is too short for the 8-byte header length", fileSize)
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > MaxHeaderSize {
		return nil, corrupt("header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	dataOffset := 8 + int64(n)
	if dataOffset > fileSize {
		return nil, corrupt("header length %d runs past the end of the %d-byte file (truncated?)", n, fileSize)
	}
	if int64(len(prefix)) < dataOffset {
		return nil, corrupt("header of %d bytes not fully available", n)
	}
	js := bytes.TrimRight(prefix[8:dataOffset], " \x00")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, corrupt("header is not a JSON object: %v", err)
	}
	h := &Header{DataOffset: dataOffset}
	dataSize := fileSize - dataOffset
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, corrupt("__metadata__ is not an object of strings: %v", err)
			}
			continue
		}
		info, err := parseEntry(name, msg, dataSize)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, info)
	}
	sort.Slice(h.Tensors, func(a, b int) bool {
		ta, tb := &h.Tensors[a], &h.Tensors[b]
		if ta.Begin != tb.Begin {
			return ta.Begin < tb.Begin
		}
		if ta.End != tb.End {
			return ta.End < tb.End
		}
		return ta.Name < tb.Name
	})
	// An empty tensor covers no bytes, so it overlaps nothing wherever its
	// offsets point (the Rust reader and MLX's writer put it at the next
	// tensor's start); only tensors holding bytes are checked.
	var last *Info
	for i := range h.Tensors {
		cur := &h.Tensors[i]
		if cur.End == cur.Begin {
			continue
		}
		if last != nil && cur.Begin < last.End {
			return nil, corrupt("tensors %q [%d,%d) and %q [%d,%d) overlap", last.Name, last.Begin, last.End, cur.Name, cur.Begin, cur.End)
		}
		last = cur
	}
	return h, nil
}

func parseEntry(name string, msg json.RawMessage, dataSize int64) (Info, error) {
	var e rawEntry
	if err := json.Unmarshal(msg, &e); err != nil {
		return Info{}, corrupt("tensor %q: bad entry: %v", name, err)
	}
	size := e.DType.Size()
	if size == 0 {
		return Info{}, corrupt("tensor %q: unknown dtype %q", name, e.DType)
	}
	if len(e.Shape) > MaxRank {
		return Info{}, corrupt("tensor %q: rank %d exceeds %d", name, len(e.Shape), MaxRank)
	}
	info := Info{Name: name, DType: e.DType, Shape: make([]int, len(e.Shape))}
	elems := int64(1)
	for i, d := range e.Shape {
		if d < 0 || d > MaxElements {
			return Info{}, corrupt("tensor %q: dimension %d is %d", name, i, d)
		}
		if d != 0 && elems > MaxElements/d {
			return Info{}, corrupt("tensor %q: shape %v has more than %d elements", name, e.Shape, int64(MaxElements))
		}
		elems *= d
		info.Shape[i] = int(d)
	}
	if len(e.DataOffsets) != 2 {
		return Info{}, corrupt("tensor %q: data_offsets has %d values, want 2", name, len(e.DataOffsets))
	}
	info.Begin, info.End = e.DataOffsets[0], e.DataOffsets[1]
	if info.Begin < 0 || info.End < info.Begin {
		return Info{}, corrupt("tensor %q: bad data_offsets [%d, %d]", name, info.Begin, info.End)
	}
	if info.End > dataSize {
		return Info{}, corrupt("tensor %q: data [%d, %d) lies outside the %d-byte data section (truncated file?)", name, info.Begin, info.End, dataSize)
	}
	if want := elems * int64(size); info.End-info.Begin != want || want > math.MaxInt64/2 {
		return Info{}, corrupt("tensor %q: %s%v needs %d bytes, data_offsets give %d", name, e.DType, e.Shape, want, info.End-info.Begin)
	}
	return info, nil
}
