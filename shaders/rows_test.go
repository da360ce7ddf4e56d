package shaders_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"petal/gpu"
	"petal/shaders"
)

// The row-batched ops must equal their one-row forms run row by row,
// bit for bit: the same kernel with the row as grid.y.
func TestRowsMatchSingle(t *testing.T) {
	race, _ := denseDevices(t)
	k := race
	d := k.Device()
	rng := rand.New(rand.NewPCG(61, 62))
	const rows = 5

	// Embedding: one id out of range (NaNs in its row only).
	q := newDenseQ(t, d, rng, 1, 50, 192, 4)
	ids := []uint32{3, 49, 0, 50, 17}
	tok := denseBuf(t, d, 0, denseU32s(ids))
	batched := denseBuf(t, d, 0, make([]byte, 4*rows*192))
	single := denseBuf(t, d, 0, make([]byte, 4*rows*192))
	denseRun(t, k, func(cb gpu.CommandBuffer) error {
		if err := k.EmbedRows(cb, batched, q.m, tok, rows); err != nil {
			return err
		}
		for r := range rows {
			if err := k.Embed(cb, single.At(4*r*192), q.m, tok.At(4*r)); err != nil {
				return err
			}
		}
		return nil
	})
	b, s := denseReadF32(batched, rows*192), denseReadF32(single, rows*192)
	for i := range b {
		if b[i] != s[i] && !(math.IsNaN(float64(b[i])) && math.IsNaN(float64(s[i]))) {
			t.Fatalf("embed rows [%d][%d] = %v, one row at a time %v", i/192, i%192, b[i], s[i])
		}
	}

	// Router top-k over rows of logits, a NaN among them.
	const experts, topK = 40, 6
	lg := denseRand(rng, rows*experts, 2)
	lg[7] = float32(math.NaN())
	lv := denseBuf(t, d, 0, denseF32s(lg))
	bi, bw := denseBuf(t, d, 0, make([]byte, 4*rows*topK)), denseBuf(t, d, 0, make([]byte, 4*rows*topK))
	si, sw := denseBuf(t, d, 0, make([]byte, 4*rows*topK)), denseBuf(t, d, 0, make([]byte, 4*rows*topK))
	denseRun(t, k, func(cb gpu.CommandBuffer) error {
		if err := k.RouterTopKRows(cb, bi, bw, lv, experts, topK, true, rows); err != nil {
			return err
		}
		for r := range rows {
			if err := k.RouterTopK(cb, si.At(4*r*topK), sw.At(4*r*topK), lv.At(4*r*experts), experts, topK, true); err != nil {
				return err
			}
		}
		return nil
	})
	if a, b := denseReadU32(bi, rows*topK), denseReadU32(si, rows*topK); !slices.Equal(a, b) {
		t.Errorf("router ids %v, one row at a time %v", a, b)
	}
	if a, b := denseReadF32(bw, rows*topK), denseReadF32(sw, rows*topK); !slices.Equal(a, b) {
		t.Errorf("router weights %v, one row at a time %v", a, b)
	}

	// Attention prep of rows at positions 7.. into caches.
	a := shaders.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64, RotaryDim: 16, Theta: 1e7, Eps: 1e-6}
	hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	const pos, capacity = 7, 16
	qg, key, v := randFloats(rng, rows*2*hd, 1), randFloats(rng, rows*kd, 1), randFloats(rng, rows*kd, 1)
	qn, kn := randFloats(rng, a.HeadDim, 1), randFloats(rng, a.HeadDim, 1)
	qgb, kb, vb, qnb, knb := floats(t, d, qg), floats(t, d, key), floats(t, d, v), floats(t, d, qn), floats(t, d, kn)
	type out struct{ q, gate, kc, vc gpu.Buffer }
	mk := func() out {
		return out{floats(t, d, make([]float32, rows*hd)), floats(t, d, make([]float32, rows*hd)),
			halves(t, d, make([]float32, capacity*kd)), halves(t, d, make([]float32, capacity*kd))}
	}
	bo, so := mk(), mk()
	denseRun(t, k, func(cb gpu.CommandBuffer) error {
		if err := k.AttnPrepRows(cb, shaders.AttnPrepIO{Q: view(bo.q), Gate: view(bo.gate), QG: view(qgb), K: view(kb), V: view(vb), KCache: view(bo.kc), VCache: view(bo.vc), QNorm: view(qnb), KNorm: view(knb), Shape: a, Pos: pos}, rows); err != nil {
			return err
		}
		for r := range rows {
			if err := k.AttnPrep(cb, shaders.AttnPrepIO{Q: view(so.q).At(4 * r * hd), Gate: view(so.gate).At(4 * r * hd), QG: view(qgb).At(4 * r * 2 * hd), K: view(kb).At(4 * r * kd), V: view(vb).At(4 * r * kd), KCache: view(so.kc), VCache: view(so.vc), QNorm: view(qnb), KNorm: view(knb), Shape: a, Pos: pos + r}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, p := range [][2]gpu.Buffer{{bo.q, so.q}, {bo.gate, so.gate}, {bo.kc, so.kc}, {bo.vc, so.vc}} {
		if !slices.Equal(p[0].Contents(), p[1].Contents()) {
			t.Fatalf("attention prep rows differ from one row at a time")
		}
	}
	cb, _ := d.NewCommandBuffer()
	if err := k.EmbedRows(cb, batched, q.m, tok, 0); err == nil {
		t.Error("EmbedRows took 0 rows")
	}
	if err := k.RouterTopKRows(cb, bi, bw, lv, experts, topK, true, rows+1); err == nil {
		t.Error("RouterTopKRows read past its logits")
	}
	if err := k.AttnPrepRows(cb, shaders.AttnPrepIO{Q: view(bo.q), Gate: view(bo.gate), QG: view(qgb), K: view(kb), V: view(vb), KCache: view(bo.kc), VCache: view(bo.vc), QNorm: view(qnb), KNorm: view(knb), Shape: a, Pos: capacity - 2}, rows); err == nil {
		t.Error("AttnPrepRows wrote past the caches")
	}
}
