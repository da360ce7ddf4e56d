package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// TestEncodeMLXLayout pins the bytes MLX's save_safetensors writes for
// these arrays (traced through mlx/io/safetensors.cpp and nlohmann::json's
// dump): keys sorted, entry keys in their sorted order, no spaces, no
// padding, data in the arrays' iteration order.
func TestEncodeMLXLayout(t *testing.T) {
	// Data order c, a, b; the header lists them by name.
	ts := sample()
	ts = []NewTensor{ts[2], ts[0], ts[1]}
	cases := []struct {
		meta map[string]string
		want string
	}{
		{map[string]string{"format": "mlx"}, `{"__metadata__":{"format":"mlx"},` +
			`"a":{"data_offsets":[4,10],"dtype":"BF16","shape":[3]},` +
			`"b":{"data_offsets":[10,26],"dtype":"U32","shape":[2,2]},` +
			`"c":{"data_offsets":[0,4],"dtype":"F32","shape":[]}}`},
		{nil, `{"__metadata__":null,"a":{"data_offsets":[4,10],"dtype":"BF16","shape":[3]},` +
			`"b":{"data_offsets":[10,26],"dtype":"U32","shape":[2,2]},"c":{"data_offsets":[0,4],"dtype":"F32","shape":[]}}`},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		if err := EncodeMLX(&buf, ts, c.meta); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		n := binary.LittleEndian.Uint64(b)
		if got := string(b[8 : 8+n]); got != c.want {
			t.Errorf("header\n got %s\nwant %s", got, c.want)
		}
		var data []byte
		for _, x := range ts {
			data = append(data, x.Data...)
		}
		if !bytes.Equal(b[8+n:], data) {
			t.Errorf("data section %v, want the tensors back to back %v", b[8+n:], data)
		}
		f, err := Open(writeTemp(t, b))
		if err != nil {
			t.Fatalf("reading what MLX writes: %v", err)
		}
		if got := f.Tensor("b").Uint32s(); len(got) != 4 || got[2] != 3 {
			t.Errorf("b = %v", got)
		}
		f.Close()
	}
}

// mlxSample is a file as MLX writes it whose data section starts at r mod
// 16 (a tensor name of the right length moves it), with an odd-sized U8
// tensor first in the data so every tensor after it is misaligned too,
// and the typed tensors it holds.
func mlxSample(t *testing.T, r int) ([]byte, []NewTensor) {
	t.Helper()
	var words, halves, floats []byte
	for i := range 7 {
		words = binary.LittleEndian.AppendUint32(words, uint32(0x01020304*(i+1)))
		floats = binary.LittleEndian.AppendUint32(floats, math.Float32bits(float32(i)-2.5))
	}
	for i := range 5 {
		halves = binary.LittleEndian.AppendUint16(halves, uint16(0x3f80+i))
	}
	for pad := range 16 {
		ts := []NewTensor{
			{Name: "odd" + strings.Repeat("x", pad), DType: "U8", Shape: []int{3}, Data: []byte{9, 8, 7}},
			{Name: "w", DType: U32, Shape: []int{7}, Data: words},
			{Name: "h", DType: BF16, Shape: []int{5}, Data: halves},
			{Name: "f", DType: F32, Shape: []int{7}, Data: floats},
		}
		var buf bytes.Buffer
		if err := EncodeMLX(&buf, ts, map[string]string{"format": "mlx"}); err != nil {
			t.Fatal(err)
		}
		if int(binary.LittleEndian.Uint64(buf.Bytes())+8)%16 == r {
			return buf.Bytes(), ts
		}
	}
	t.Fatalf("no name length puts the data at %d mod 16", r)
	return nil, nil
}

// TestAnyDataOffset: a file whose data starts at any byte, with tensors at
// any alignment, opens, and every typed accessor returns the stored
// values: a view of the mapping where the tensor is aligned for its
// elements, a copy where not. Run under -race, checkptr would flag any
// misaligned typed pointer.
func TestAnyDataOffset(t *testing.T) {
	for r := range 16 {
		t.Run(fmt.Sprintf("offset=%d", r), func(t *testing.T) {
			b, ts := mlxSample(t, r)
			f, err := Open(writeTemp(t, b))
			if err != nil {
				t.Fatalf("refused a valid file: %v", err)
			}
			defer f.Close()
			if got := f.Header.DataOffset % 16; got != int64(r) {
				t.Fatalf("data at %d mod 16, want %d", got, r)
			}
			for _, want := range ts[1:] {
				tt := f.Tensor(want.Name)
				var got []byte
				var first unsafe.Pointer
				switch want.DType {
				case U32:
					v := tt.Uint32s()
					first = unsafe.Pointer(&v[0])
					for _, x := range v {
						got = binary.LittleEndian.AppendUint32(got, x)
					}
				case BF16:
					v := tt.Uint16s()
					first = unsafe.Pointer(&v[0])
					for _, x := range v {
						got = binary.LittleEndian.AppendUint16(got, x)
					}
				case F32:
					v := tt.Float32s()
					first = unsafe.Pointer(&v[0])
					for _, x := range v {
						got = binary.LittleEndian.AppendUint32(got, math.Float32bits(x))
					}
				}
				if !bytes.Equal(got, want.Data) {
					t.Errorf("%s at file offset %d: read %v, want %v", want.Name, tt.Offset, got, want.Data)
				}
				aligned := tt.Offset%int64(want.DType.Size()) == 0
				if aligned != tt.Aligned(want.DType.Size()) {
					t.Errorf("%s at file offset %d: Aligned = %v", want.Name, tt.Offset, !aligned)
				}
				if inPlace := first == unsafe.Pointer(&tt.Data[0]); inPlace != aligned {
					t.Errorf("%s at file offset %d: view in place = %v, want %v (a view exactly when aligned)", want.Name, tt.Offset, inPlace, aligned)
				}
			}
		})
	}
}

// TestHeaderOrderAndNoMetadata: a header without __metadata__ whose
// entries list the tensors in another order than the data holds them
// opens, each tensor at its own offsets.
func TestHeaderOrderAndNoMetadata(t *testing.T) {
	b := rawFile(`{"z":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]}}`, 0)
	b = append(b, 7, 8, 0x80, 0x3f)
	f, err := Open(writeTemp(t, b))
	if err != nil {
		t.Fatalf("refused a valid file: %v", err)
	}
	defer f.Close()
	if f.Header.Metadata != nil {
		t.Errorf("metadata %v from a header without it", f.Header.Metadata)
	}
	if got := f.Tensor("a").Uint16s(); len(got) != 1 || got[0] != 0x3f80 {
		t.Errorf("a = %#x, want [0x3f80]", got)
	}
	if got := f.Tensor("z").Data; !bytes.Equal(got, []byte{7, 8}) {
		t.Errorf("z = %v", got)
	}
	if ts := f.Tensors(); ts[0].Name != "z" || ts[1].Name != "a" {
		t.Errorf("data order %s, %s; want z, a", ts[0].Name, ts[1].Name)
	}
}

// TestMLXDTypes: the dtypes MLX writes that Petal never reads still parse.
func TestMLXDTypes(t *testing.T) {
	b := rawFile(`{"c":{"dtype":"C64","shape":[1],"data_offsets":[0,8]},"e":{"dtype":"F8_E8M0","shape":[3],"data_offsets":[8,11]}}`, 11)
	f, err := Open(writeTemp(t, b))
	if err != nil {
		t.Fatalf("refused MLX's dtypes: %v", err)
	}
	defer f.Close()
	if len(f.Tensor("c").Data) != 8 || len(f.Tensor("e").Data) != 3 {
		t.Errorf("sizes %d, %d", len(f.Tensor("c").Data), len(f.Tensor("e").Data))
	}
}
