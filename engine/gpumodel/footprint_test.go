package gpumodel

import (
	"path/filepath"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/gpu/record"
	"petal/shaders"
)

// TestFootprintMatchesARun grows a real sequence by generating on the
// recording driver and compares what it holds with the measurement.
func TestFootprintMatchesARun(t *testing.T) {
	m, err := Open(filepath.Join(fixturesDir, "tiny-a"), record.New())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	const promptLen, generated = 12, 8
	prompt := make([]int, promptLen)
	for i := range prompt {
		prompt[i] = i % m.cfg.Vocab
	}
	if _, err := engine.Greedy(t.Context(), seq, m.cfg.Vocab, prompt, generated, nil); err != nil {
		t.Fatal(err)
	}
	f, err := MeasureFootprint(m.cfg, promptLen+generated)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seq.(*Sequence).Bytes(), f.SequenceBytes(); got != want {
		t.Errorf("sequence after %d positions holds %d bytes, footprint says %d", promptLen+generated, got, want)
	}
	var owned int64
	for _, b := range m.owned {
		owned += int64(b.Len())
	}
	if f.ModelBytes != owned {
		t.Errorf("model owns %d bytes, footprint says %d", owned, f.ModelBytes)
	}
}

// TestFootprintQwen36 checks the 35B shape against MODEL.md's arithmetic:
// fp16 KV caches (MODEL.md's 20,480 bytes per token), float32 DeltaNet
// state, as the backend stores them.
func TestFootprintQwen36(t *testing.T) {
	cfg := checkpoint.Qwen36()
	const f16, f32 = 2, 4
	attnLayers, deltaLayers := 10, 30
	kvPerPosition := int64(attnLayers * 2 * 2 * 256 * f16) // layers, K and V, KV heads, head dim
	convChannels := 2*16*128 + 32*128
	state := int64(deltaLayers * (32*128*128*f32 + convChannels*3*f32))
	cases := []struct{ context, capacity int }{
		{1, 256}, {256, 256}, {257, 512}, {32768, 32768}, {40000, 65536}, {262144, 262144},
	}
	var contexts []int
	for _, tc := range cases {
		contexts = append(contexts, tc.context)
	}
	fs, err := MeasureFootprints(cfg, contexts)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		f := fs[i]
		if f.Capacity != tc.capacity {
			t.Errorf("context %d: capacity %d, want %d", tc.context, f.Capacity, tc.capacity)
		}
		if got := f.KVBytesPerPosition(); got != kvPerPosition {
			t.Errorf("context %d: %d KV bytes per position, want %d", tc.context, got, kvPerPosition)
		}
		if f.StateBytes != state {
			t.Errorf("context %d: DeltaNet state %d bytes, want %d", tc.context, f.StateBytes, state)
		}
		// At the last doubling's peak the new caches live next to the
		// last old buffer (one layer's K or V at half the length) and
		// the old scratch; the new scratch comes after both are freed.
		if tc.capacity > initialCapacity {
			old := tc.capacity / 2
			want := max(0, int64(old)*kvPerPosition/int64(2*attnLayers)+scratch(old)-scratch(tc.capacity))
			if f.GrowthBytes != want {
				t.Errorf("context %d: growth %d bytes, want %d", tc.context, f.GrowthBytes, want)
			}
		}
	}
	if _, err := MeasureFootprint(cfg, cfg.MaxPositions+1); err == nil {
		t.Error("a context past the model's maximum was measured")
	}
}

// scratch is AttnDecode's scratch for the 35B shape at n positions: 16
// heads, one (head dim + 2) float32 row per part, where each 256-position
// block is split into up to AttnMaxSplit parts while there are fewer than
// AttnSplitParts in all (flash-decoding's partials before the merge).
func scratch(n int) int64 {
	blocks := (n + 255) / 256
	parts := min(blocks*shaders.AttnMaxSplit, max(blocks, shaders.AttnSplitParts))
	return int64(16 * parts * (256 + 2) * 4)
}
