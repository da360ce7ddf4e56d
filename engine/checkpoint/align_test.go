package checkpoint_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/reftest"
	"petal/engine/safetensors"
)

// misalignedByOffset counts, straight from the file offsets, the bytes of
// quantized tensors that are not at a multiple of what the GPU reads them
// as: codes 8, scales and biases 4.
func misalignedByOffset(m *checkpoint.Model) int64 {
	var n int64
	for _, x := range m.Matrices() {
		if x.Bits == 0 {
			continue
		}
		if x.Weight.Offset%8 != 0 {
			n += x.Weight.End - x.Weight.Begin
		}
		for _, t := range []*safetensors.Tensor{x.Scales, x.Biases} {
			if t.Offset%4 != 0 {
				n += t.End - t.Begin
			}
		}
	}
	return n
}

// TestFixturesInMLXLayout: every committed fixture, rewritten as MLX
// writes it with its first shard's data at each offset mod 16, opens with
// the same bytes in every tensor; the padded originals need no copies,
// the rewrites do, as many bytes as their offsets say.
func TestFixturesInMLXLayout(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(reftest.Dir(), "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			orig, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer orig.Close()
			if n, err := checkpoint.MisalignedBytes(dir); n != 0 || err != nil {
				t.Errorf("padded original: %d misaligned bytes, %v", n, err)
			}
			mixed := false
			for r := range 16 {
				dst := t.TempDir()
				if err := checkpointtest.RewriteMLX(dir, dst, r); err != nil {
					t.Fatal(err)
				}
				m, err := checkpoint.Open(dst)
				if err != nil {
					t.Fatalf("offset %d: refused a valid checkpoint: %v", r, err)
				}
				if got := m.Shards[0].Header.DataOffset % 16; got != int64(r) {
					t.Errorf("offset %d: first shard's data at %d mod 16", r, got)
				}
				if m.Shards[0].Header.Metadata["format"] != "mlx" {
					t.Errorf("offset %d: metadata %v", r, m.Shards[0].Header.Metadata)
				}
				for _, s := range m.Shards[1:] {
					mixed = mixed || s.Header.DataOffset%8 != m.Shards[0].Header.DataOffset%8
				}
				for _, s := range orig.Shards {
					for _, want := range s.Tensors() {
						var got []byte
						for _, ms := range m.Shards {
							if tt := ms.Tensor(want.Name); tt != nil {
								got = tt.Data
							}
						}
						if !bytes.Equal(got, want.Data) {
							t.Fatalf("offset %d: %s holds other bytes", r, want.Name)
						}
					}
				}
				want := misalignedByOffset(m)
				n, err := checkpoint.MisalignedBytes(dst)
				if err != nil || n != want || n == 0 {
					t.Errorf("offset %d: MisalignedBytes = %d, %v; the offsets give %d (> 0)", r, n, err, want)
				}
				m.Close()
			}
			if len(orig.Shards) > 1 && !mixed {
				t.Error("no rewrite has shards of different alignment")
			}
		})
	}
}

// TestSmallScaleMisalignsLaterTensors: in MLX's unpadded layout the [1,1]
// bf16 scale and bias of a one-row matrix shift every tensor after them
// by 4 bytes within the data section (which itself starts wherever the
// header ends); the checkpoint still opens, and those tensors are counted.
func TestSmallScaleMisalignsLaterTensors(t *testing.T) {
	o := checkpointtest.Tiny()
	o.MLX, o.Shards = true, 1
	dir := write(t, o)
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatalf("refused a valid checkpoint: %v", err)
	}
	defer m.Close()
	g := m.Layers[0].MoE.SharedExpertGate
	if fmt.Sprint(g.Scales.Shape) != "[1 1]" {
		t.Fatalf("shared expert gate scales %v, want [1 1]", g.Scales.Shape)
	}
	shifted := 0
	for _, x := range m.Matrices() {
		for _, tt := range x.GPUMisaligned() {
			if tt.Begin%2 != 0 {
				t.Errorf("%s at odd data offset %d: nothing here has an odd size", tt.Name, tt.Begin)
			}
			if strings.HasSuffix(tt.Name, ".weight") && tt.Begin%8 == 4 {
				shifted++
			}
		}
	}
	if shifted == 0 {
		t.Error("no codes 4 bytes off an 8-byte word: the [1,1] tensors did not shift anything")
	}
	if n := m.GPUCopyBytes(); n != misalignedByOffset(m) {
		t.Errorf("GPUCopyBytes %d, offsets give %d", n, misalignedByOffset(m))
	}
}
