package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"petal/engine/jsonquote"
)

// EncodeMLX writes tensors as MLX's save_safetensors does (mlx/io/
// safetensors.cpp, ml-explore/mlx 846d176), byte for byte:
//
//   - the header is nlohmann::json's compact dump (strings as [jsonquote]
//     writes them) of an object whose keys are sorted bytewise (its
//     std::map order), "__metadata__" included,
//     each entry's keys "data_offsets", "dtype", "shape" in that order;
//   - "__metadata__" is the metadata object, or null when there is none
//     (MLX dumps a default json value);
//   - the header is not padded: the data section starts at 8+len(header);
//   - the data is contiguous, with no padding between tensors, in the
//     order MLX iterates its std::unordered_map of arrays. That order is
//     the standard library's hash order, so callers pass it: tensors are
//     written in slice order, and their header entries sorted by name.
func EncodeMLX(w io.Writer, tensors []NewTensor, metadata map[string]string) error {
	infos := make([]Info, len(tensors))
	for i, t := range tensors {
		if err := checkNewTensor(t); err != nil {
			return err
		}
		infos[i] = Info{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	head, err := MLXHead(infos, metadata)
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// MLXHead lays tensors out back to back in slice order, setting each
// one's Begin and End from its dtype and shape, and returns what
// [EncodeMLX] writes before their data: the length prefix and the header.
// A writer that streams tensors too large to hold writes this, then each
// tensor's bytes in the same order.
func MLXHead(tensors []Info, metadata map[string]string) ([]byte, error) {
	type entry struct {
		name string
		json string
	}
	entries := make([]entry, 0, len(tensors)+1)
	meta := "null"
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonquote.String(k) + ":" + jsonquote.String(metadata[k]))
		}
		b.WriteByte('}')
		meta = b.String()
	}
	entries = append(entries, entry{"__metadata__", meta})
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		dims := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = strconv.Itoa(d)
		}
		t.Begin, t.End = off, off+t.Elements()*int64(t.DType.Size())
		entries = append(entries, entry{t.Name, fmt.Sprintf(`{"data_offsets":[%d,%d],"dtype":%s,"shape":[%s]}`,
			t.Begin, t.End, jsonquote.String(string(t.DType)), strings.Join(dims, ","))})
		off = t.End
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].name < entries[b].name })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return nil, fmt.Errorf("safetensors: tensor %q given twice", entries[i].name)
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonquote.String(e.name) + ":" + e.json)
	}
	b.WriteByte('}')
	head := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+b.Len()), uint64(b.Len()))
	return append(head, b.String()...), nil
}
