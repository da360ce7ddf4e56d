package hubtest

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"petal/engine/safetensors"
)

// MLXLayout copies the checkpoint folder src to a new folder with every
// shard rewritten the way MLX's mx.save_safetensors lays a file out: the
// header is compact JSON with sorted keys and "__metadata__" holding
// "format":"mlx", it is not padded, so the data section starts at 8 plus
// its length, and the tensors' data follow one another with no gap in an
// order other than the keys' (MLX takes them from a hash map). One more
// metadata entry, as a caller of mx.save_safetensors may pass, makes the
// data section start at dataMod modulo 16, so a test can pick an odd
// offset. Other files are copied as they are.
func MLXLayout(t testing.TB, src string, dataMod int) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".safetensors") {
			data = mlxShard(t, data, dataMod)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func mlxShard(t testing.TB, file []byte, dataMod int) []byte {
	h, err := safetensors.ParseHeader(file, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	ts := slices.Clone(h.Tensors)
	// Data in reverse name order: not the keys' order.
	slices.SortFunc(ts, func(a, b safetensors.Info) int { return strings.Compare(b.Name, a.Name) })
	type entry struct {
		DType       safetensors.DType `json:"dtype"`
		Shape       []int             `json:"shape"`
		DataOffsets [2]int64          `json:"data_offsets"`
	}
	header := map[string]any{}
	var data []byte
	for _, ti := range ts {
		b := file[h.DataOffset+ti.Begin : h.DataOffset+ti.End]
		header[ti.Name] = entry{ti.DType, ti.Shape, [2]int64{int64(len(data)), int64(len(data) + len(b))}}
		data = append(data, b...)
	}
	meta := map[string]string{"format": "mlx"}
	for pad := ""; ; pad += "x" {
		meta["petal_pad"] = pad
		header["__metadata__"] = meta
		js, err := json.Marshal(header)
		if err != nil {
			t.Fatal(err)
		}
		if (8+len(js))%16 == dataMod%16 {
			out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
			return append(append(out, js...), data...)
		}
	}
}
