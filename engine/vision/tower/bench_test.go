package tower

import (
	"math/rand/v2"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/vision/preprocess"
)

// randomTower is a tower of Qwen3.6's widths (hidden 1152, 16 heads, MLP
// 4304, out 2048) and depth blocks, with random weights.
func randomTower(depth int) *Tower {
	r := rand.New(rand.NewPCG(1, 2))
	fill := func(n int, std float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64()) * std
		}
		return v
	}
	c := checkpoint.VisionConfig{Depth: depth, Hidden: 1152, Intermediate: 4304, Heads: 16, InChannels: 3, Patch: 16,
		TemporalPatch: 2, Merge: 2, OutHidden: 2048, Positions: 2304, HiddenAct: "gelu_pytorch_tanh"}
	lin := func(rows, cols int) dense {
		return dense{rows: rows, cols: cols, w: fill(rows*cols, 0.03), b: fill(rows, 0.1)}
	}
	ln := func(n int) norm { return norm{w: fill(n, 1), b: fill(n, 0.1)} }
	t := &Tower{cfg: c, patch: lin(c.Hidden, c.PatchDim()), pos: fill(c.Positions*c.Hidden, 0.5), k: goKernels{}}
	for range depth {
		t.blocks = append(t.blocks, block{norm1: ln(c.Hidden), norm2: ln(c.Hidden), qkv: lin(3*c.Hidden, c.Hidden),
			proj: lin(c.Hidden, c.Hidden), fc1: lin(c.Intermediate, c.Hidden), fc2: lin(c.Hidden, c.Intermediate)})
	}
	m := c.Hidden * 4
	t.mNorm, t.mFC1, t.mFC2 = ln(c.Hidden), lin(m, m), lin(c.OutHidden, m)
	t.inv = make([]float32, c.HeadDim()/4)
	for j := range t.inv {
		t.inv[j] = 1 / float32(j+1)
	}
	return t
}

// BenchmarkEncodeBlock encodes a 512x512 image (32x32 patches) through
// one block at Qwen3.6's widths: the real tower is 27 blocks, and a
// 1024x768 image 3072 patches (attention grows with their square).
func BenchmarkEncodeBlock(b *testing.B) {
	t := randomTower(1)
	px := preprocess.Pixels{Grid: preprocess.Grid{T: 1, H: 32, W: 32}, Merge: 2, PatchDim: t.cfg.PatchDim()}
	px.Values = make([]float32, px.Grid.Patches()*px.PatchDim)
	for b.Loop() {
		if _, err := t.Encode(px); err != nil {
			b.Fatal(err)
		}
	}
}
