package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func encode(t testing.TB, tensors []NewTensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func sample() []NewTensor {
	return []NewTensor{
		{Name: "a", DType: BF16, Shape: []int{3}, Data: []byte{1, 2, 3, 4, 5, 6}},
		{Name: "b", DType: U32, Shape: []int{2, 2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}},
		{Name: "c", DType: F32, Shape: []int{}, Data: []byte{0, 0, 128, 63}},
	}
}

func TestRoundTrip(t *testing.T) {
	f, err := Open(writeTemp(t, encode(t, sample())))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Header.Metadata["format"]; got != "mlx" {
		t.Errorf("metadata format = %q", got)
	}
	b := f.Tensor("b")
	if b == nil || b.DType != U32 || len(b.Shape) != 2 {
		t.Fatalf("tensor b = %+v", b)
	}
	if w := b.Uint32s(); len(w) != 4 || w[0] != 1 || w[3] != 4 {
		t.Errorf("b words = %v", w)
	}
	if v := f.Tensor("c").Float32s(); len(v) != 1 || v[0] != 1 {
		t.Errorf("c = %v", v)
	}
	if h := f.Tensor("a").Uint16s(); len(h) != 3 || h[0] != 0x0201 {
		t.Errorf("a = %v", h)
	}
	for _, tt := range f.Tensors() {
		if tt.Offset%int64(tt.DType.Size()) != 0 {
			t.Errorf("%s misaligned at %d", tt.Name, tt.Offset)
		}
	}
	if f.Tensor("missing") != nil {
		t.Error("missing tensor found")
	}
}

// rawFile builds a file from a literal JSON header and a data section.
func rawFile(header string, data int) []byte {
	b := make([]byte, 8, 8+len(header)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

func TestCorruptFiles(t *testing.T) {
	good := encode(t, sample())
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short", []byte{1, 2, 3}, "too short"},
		{"truncated", good[:len(good)-12], "outside"},
		{"header past end", rawFile(`{}`, 0)[:9], "runs past the end"},
		{"huge header length", func() []byte { b := rawFile(`{}`, 0); binary.LittleEndian.PutUint64(b, 1<<62); return b }(), "exceeds the limit"},
		{"not json", rawFile(`{"a":`, 0), "not a JSON object"},
		{"json array", rawFile(`[1,2]`, 0), "not a JSON object"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}`, 1), "unknown dtype"},
		{"negative dim", rawFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1), "dimension 0"},
		{"absurd shape", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "more than"},
		{"rank", rawFile(`{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}`, 1), "rank"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8), "needs 8 bytes"},
		{"offsets outside", rawFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[100,104]}}`, 8), "outside"},
		{"offsets reversed", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}`, 8), "bad data_offsets"},
		{"one offset", rawFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}}`, 8), "has 1 values"},
		{"overlap", rawFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 8), "overlap"},
		{"bad metadata", rawFile(`{"__metadata__":{"x":1}}`, 0), "__metadata__"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Open(writeTemp(t, c.file))
			if err == nil {
				f.Close()
				t.Fatal("opened a corrupt file")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %v is not marked ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "model.safetensors") {
				t.Errorf("error %q should name the file and say %q", err, c.want)
			}
		})
	}
}

func TestOpenMissing(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "nope")); err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestEncodeRejectsWrongSize(t *testing.T) {
	err := Encode(&bytes.Buffer{}, []NewTensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil)
	if err == nil {
		t.Fatal("encoded a tensor whose data does not match its shape")
	}
}

// FuzzParseHeader: any bytes give a header or an ErrCorrupt error, never a
// panic; an accepted header's tensors lie inside the file and do not
// overlap. The corpus lives in testdata/fuzz/FuzzParseHeader.
func FuzzParseHeader(f *testing.F) {
	f.Add(encode(f, sample()))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 8))
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"x":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 8))
	var mlx bytes.Buffer
	if err := EncodeMLX(&mlx, sample(), map[string]string{"format": "mlx"}); err != nil {
		f.Fatal(err)
	}
	f.Add(mlx.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b, int64(len(b)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unmarked error %v", err)
			}
			return
		}
		var end int64
		for _, ti := range h.Tensors {
			if ti.Begin < end || ti.End > int64(len(b))-h.DataOffset || ti.End-ti.Begin != ti.Elements()*int64(ti.DType.Size()) {
				t.Fatalf("accepted bad tensor %+v (data section %d)", ti, int64(len(b))-h.DataOffset)
			}
			end = ti.End
		}
	})
}

// TestEmptyTensorsOverlapNothing checks that a zero-sized tensor is valid at
// any offset inside the data, also where it sorts after a tensor starting at
// the same offset (the format allows it; such files were refused).
func TestEmptyTensorsOverlapNothing(t *testing.T) {
	for name, header := range map[string]string{
		"same start, sorts after": `{"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}}`,
		"inside another":          `{"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}`,
		"at the end":              `{"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}`,
	} {
		file := rawFile(header, 4)
		h, err := ParseHeader(file, int64(len(file)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(h.Tensors) != 2 {
			t.Errorf("%s: %d tensors, want 2", name, len(h.Tensors))
		}
	}
	overlapping := rawFile(`{"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"c":{"dtype":"U8","shape":[1],"data_offsets":[3,4]},"e":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}`, 4)
	if _, err := ParseHeader(overlapping, int64(len(overlapping))); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlap past an empty tensor: got %v, want an overlap error", err)
	}
}
