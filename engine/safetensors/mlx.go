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
	for _, t := range tensors {
		if err := checkNewTensor(t); err != nil {
			return err
		}
		dims := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = strconv.Itoa(d)
		}
		end := off + int64(len(t.Data))
		entries = append(entries, entry{t.Name, fmt.Sprintf(`{"data_offsets":[%d,%d],"dtype":%s,"shape":[%s]}`,
			off, end, jsonquote.String(string(t.DType)), strings.Join(dims, ","))})
		off = end
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].name < entries[b].name })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return fmt.Errorf("safetensors: tensor %q given twice", entries[i].name)
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
	header := b.String()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}
