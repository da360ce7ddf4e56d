package shaders_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"petal/gpu"
	"petal/shaders"
	"petal/shaders/selftest"
)

// qmmTol bounds QMM's fp32 error on a row of k columns: k fused
// multiply-adds in sequence (simdgroup matrix products add their 8 terms in
// an order of the GPU's choosing; each addition costs at most u times the
// running magnitude), plus the dequantized weight's own rounding.
func qmmTol(k int, mag float64) float64 { return float64(k+64) * denseU * mag }

// The prefill GEMM against the float64 reference, on token counts and row
// counts on both sides of every tile edge (QMMBM tokens, QMMBN rows) and
// several K steps.
func TestQMM(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(31, 32))
	cases := []struct{ tokens, rows, cols, bits int }{
		{33, 65, 128, 4},  // one past a tile in both directions; two K steps
		{5, 13, 64, 8},    // 8-bit, partial tiles
		{1, 1, 64, 4},     // one token, one row
		{32, 64, 192, 4},  // exactly one tile
		{70, 130, 256, 4}, // three token tiles, three column tiles
		{64, 256, 128, 8}, // the router's shape at a chunk
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("tokens=%d/rows=%d/cols=%d/bits=%d", c.tokens, c.rows, c.cols, c.bits), func(t *testing.T) {
			k, d := densePick(race, fast, i < 2)
			q := newDenseQ(t, d, rng, 1, c.rows, c.cols, c.bits)
			x := denseRand(rng, c.tokens*c.cols, 1)
			xv := denseBuf(t, d, 16, denseF32s(x))
			out := denseBuf(t, d, 4, make([]byte, 4*c.tokens*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMM(cb, out, q.m, xv, c.tokens) })
			got := denseReadF32(out, c.tokens*c.rows)
			for tok := range c.tokens {
				for r := range c.rows {
					want, mag := q.Mul(0, r, x[tok*c.cols:(tok+1)*c.cols])
					if g := got[tok*c.rows+r]; math.Abs(float64(g)-want) > qmmTol(c.cols, mag) {
						t.Fatalf("token %d row %d: %v, want %v", tok, r, g, want)
					}
				}
			}
		})
	}
}

// routeRef is the stable counting sort MoERoute must produce.
func routeRef(ids []uint32, experts int) (mapping, slotOf []uint32, blocks [][4]uint32) {
	slotOf = make([]uint32, len(ids))
	for e := range experts {
		var mine []uint32
		for p, id := range ids {
			if int(id) == e {
				mine = append(mine, uint32(p))
			}
		}
		base := uint32(len(mapping))
		for j, p := range mine {
			slotOf[p] = base + uint32(j)
		}
		mapping = append(mapping, mine...)
		for m0 := 0; m0 < len(mine); m0 += shaders.QMMBM {
			blocks = append(blocks, [4]uint32{uint32(e), base + uint32(m0), base + uint32(min(len(mine), m0+shaders.QMMBM)), 0})
		}
	}
	for p, id := range ids {
		if int(id) >= experts {
			slotOf[p] = shaders.RouteNone
		}
	}
	return mapping, slotOf, blocks
}

// The grouped expert path of prefill MoE on the GPU: routing (checked
// exactly against a stable counting sort), the gate-like GEMM reading token
// rows through the map, the down-like GEMM reading slot rows, and the
// per-token combine. Experts receive more than QMMBM pairs, so blocks
// split, and one id is out of range.
func TestMoEGrouped(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(33, 34))
	cases := []struct{ tokens, topK, experts, rows, cols int }{
		{19, 2, 3, 70, 128}, // 38 pairs over 3 experts: some expert passes one tile
		{70, 4, 5, 65, 64},  // 280 pairs: several full tiles per expert
		{1, 1, 4, 8, 64},    // one pair: three sentinel entries
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("tokens=%d/k=%d/experts=%d", c.tokens, c.topK, c.experts), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			pairs := c.tokens * c.topK
			ids := make([]uint32, pairs)
			for p := range ids {
				// Skewed: expert 0 takes about half of the pairs.
				ids[p] = uint32(rng.IntN(2*c.experts) % c.experts)
				if rng.IntN(2) == 0 {
					ids[p] = 0
				}
			}
			if pairs > 3 {
				ids[3] = uint32(c.experts) // dropped
			}
			q := newDenseQ(t, d, rng, c.experts, c.rows, c.cols, 4)
			x := denseRand(rng, c.tokens*c.cols, 1)
			xs := denseRand(rng, pairs*c.cols, 1)
			capacity := shaders.RouteCapacity(pairs, c.experts)
			idv := denseBuf(t, d, 4, denseU32s(ids))
			mapv := denseBuf(t, d, 0, make([]byte, 4*pairs))
			slotv := denseBuf(t, d, 0, make([]byte, 4*pairs))
			// Poison the block map: every entry must be written.
			poison := make([]uint32, 4*capacity)
			for j := range poison {
				poison[j] = 0xdeadbeef
			}
			blockv := denseBuf(t, d, 16, denseU32s(poison))
			xv, xsv := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 0, denseF32s(xs))
			gate := denseBuf(t, d, 0, make([]byte, 4*pairs*c.rows))
			down := denseBuf(t, d, 0, make([]byte, 4*pairs*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				if err := k.MoERoute(cb, mapv, slotv, blockv, idv, pairs, c.experts); err != nil {
					return err
				}
				cb.Barrier()
				if err := k.QMMExperts(cb, gate, q.m, xv, c.tokens, c.topK, blockv, mapv, pairs, c.experts); err != nil {
					return err
				}
				return k.QMMExperts(cb, down, q.m, xsv, pairs, 0, blockv, mapv, pairs, c.experts)
			})
			wantMap, wantSlot, wantBlocks := routeRef(ids, c.experts)
			gotMap, gotSlot := denseReadU32(mapv, pairs), denseReadU32(slotv, pairs)
			for s := range wantMap {
				if gotMap[s] != wantMap[s] {
					t.Fatalf("map[%d] = %d, want %d", s, gotMap[s], wantMap[s])
				}
			}
			for p := range wantSlot {
				if gotSlot[p] != wantSlot[p] {
					t.Fatalf("slotOf[%d] = %d, want %d", p, gotSlot[p], wantSlot[p])
				}
			}
			gotBlocks := denseReadU32(blockv, 4*capacity)
			for b := range capacity {
				var want [4]uint32
				if b < len(wantBlocks) {
					want = wantBlocks[b]
				}
				if got := [4]uint32(gotBlocks[4*b : 4*b+4]); got != want {
					t.Fatalf("block %d = %v, want %v", b, got, want)
				}
			}
			g, dn := denseReadF32(gate, pairs*c.rows), denseReadF32(down, pairs*c.rows)
			for s, p := range wantMap {
				e, tok := int(ids[p]), int(p)/c.topK
				for r := range c.rows {
					want, mag := q.Mul(e, r, x[tok*c.cols:(tok+1)*c.cols])
					if v := g[s*c.rows+r]; math.Abs(float64(v)-want) > qmmTol(c.cols, mag) {
						t.Fatalf("gate slot %d (pair %d, expert %d) row %d: %v, want %v", s, p, e, r, v, want)
					}
					want, mag = q.Mul(e, r, xs[s*c.cols:(s+1)*c.cols])
					if v := dn[s*c.rows+r]; math.Abs(float64(v)-want) > qmmTol(c.cols, mag) {
						t.Fatalf("down slot %d row %d: %v, want %v", s, r, v, want)
					}
				}
			}

			// The combine reads the down outputs through slotOf.
			ws, sh, sg := denseRand(rng, pairs, 0.3), denseRand(rng, c.tokens*c.rows, 1), denseRand(rng, c.tokens, 1)
			out := denseBuf(t, d, 0, make([]byte, 4*c.tokens*c.rows))
			wv, shv, sgv := denseBuf(t, d, 0, denseF32s(ws)), denseBuf(t, d, 0, denseF32s(sh)), denseBuf(t, d, 0, denseF32s(sg))
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.MoECombineRows(cb, out, down, wv, slotv, shv, sgv, c.rows, c.topK, c.tokens)
			})
			o := denseReadF32(out, c.tokens*c.rows)
			for tok := range c.tokens {
				dropped := false
				for j := range c.topK {
					dropped = dropped || wantSlot[tok*c.topK+j] == shaders.RouteNone
				}
				for r := range c.rows {
					v := o[tok*c.rows+r]
					if dropped {
						if !math.IsNaN(float64(v)) {
							t.Fatalf("token %d routed to a missing expert: out[%d] = %v, want NaN", tok, r, v)
						}
						continue
					}
					var want, mag float64
					for j := range c.topK {
						p := tok*c.topK + j
						y := float64(dn[int(wantSlot[p])*c.rows+r])
						want += float64(ws[p]) * y
						mag += math.Abs(float64(ws[p]) * y)
					}
					gs := denseSigmoid(sg[tok]) * float64(sh[tok*c.rows+r])
					want += gs
					mag += math.Abs(gs)
					if tol := float64(2*c.topK+16) * denseU * mag; math.Abs(float64(v)-want) > tol {
						t.Fatalf("token %d out[%d] = %v, want %v", tok, r, v, want)
					}
				}
			}
		})
	}
}

func TestPrefillRejectsBadInput(t *testing.T) {
	_, k := denseDevices(t)
	d := k.Device()
	rng := rand.New(rand.NewPCG(35, 36))
	q := newDenseQ(t, d, rng, 2, 8, 64, 4)
	x := denseBuf(t, d, 0, make([]byte, 4*64*4))
	small := denseBuf(t, d, 0, make([]byte, 16))
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"no tokens":          k.QMM(cb, x, q.m, x, 0),
		"short out":          k.QMM(cb, small, q.m, x, 4),
		"misaligned x":       k.QMM(cb, x, q.m, x.At(4), 1),
		"too many experts":   k.MoERoute(cb, x, x, x, x, 4, shaders.MoEMaxExperts+1),
		"short block map":    k.MoERoute(cb, x, x, small, x, 4, 2),
		"8-bit experts":      k.QMMExperts(cb, x, newDenseQ(t, d, rng, 1, 8, 64, 8).m, x, 4, 1, x, x, 4, 1),
		"too few input rows": k.QMMExperts(cb, x, q.m, x, 1, 0, x, x, 4, 2),
		"combine top-k 0":    k.MoECombineRows(cb, x, x, x, x, x, x, 8, 0, 1),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if n := cb.Trace().Dispatches(); n != 0 {
		t.Errorf("%d dispatches encoded from bad input", n)
	}
}

// TestPrefillArgsLayout holds the prefill family's structs and tiling
// constants in args.h equal to their Go mirrors, as TestArgsLayout does for
// the decode families.
func TestPrefillArgsLayout(t *testing.T) {
	dev := device(t)
	const values = `
        sizeof(QMMArgs), OFF(QMMArgs, rows), OFF(QMMArgs, k), OFF(QMMArgs, tokens), OFF(QMMArgs, x_div), OFF(QMMArgs, experts),
        sizeof(MoERouteArgs), OFF(MoERouteArgs, experts), OFF(MoERouteArgs, pairs), OFF(MoERouteArgs, capacity),
        QMM_BM, QMM_BM_SMALL, QMM_BN, QMM_BK, QMM_SIMDGROUPS, QMM_THREADS,
        sizeof(DeltaChunkArgs), OFF(DeltaChunkArgs, channels), OFF(DeltaChunkArgs, taps), OFF(DeltaChunkArgs, tokens), DELTA_MAX_TAPS,
        sizeof(DeltaScanArgs), OFF(DeltaScanArgs, key_heads), OFF(DeltaScanArgs, value_heads), OFF(DeltaScanArgs, value_dim), OFF(DeltaScanArgs, q_scale), OFF(DeltaScanArgs, eps), OFF(DeltaScanArgs, tokens), OFF(DeltaScanArgs, blocks),
        DELTA_CHUNK, DELTA_CHUNK_MAX_KEY_DIM, DELTA_CHUNK_PREP_THREADS, DELTA_CHUNK_SCAN_SIMDGROUPS,
        sizeof(AttnPrefillArgs), OFF(AttnPrefillArgs, tokens), OFF(AttnPrefillArgs, pos0), OFF(AttnPrefillArgs, heads), OFF(AttnPrefillArgs, kv_heads), OFF(AttnPrefillArgs, scale), ATTN_PREFILL_TOKENS, ATTN_PREFILL_BLOCKS, ATTN_PREFILL_SCRATCH,
`
	var (
		q shaders.QMMArgs
		r shaders.MoERouteArgs
		c shaders.DeltaChunkArgs
		d shaders.DeltaScanArgs
		a shaders.AttnPrefillArgs
	)
	want := []uintptr{
		unsafe.Sizeof(q), unsafe.Offsetof(q.Rows), unsafe.Offsetof(q.K), unsafe.Offsetof(q.Tokens), unsafe.Offsetof(q.XDiv), unsafe.Offsetof(q.Experts),
		unsafe.Sizeof(r), unsafe.Offsetof(r.Experts), unsafe.Offsetof(r.Pairs), unsafe.Offsetof(r.Capacity),
		shaders.QMMBM, shaders.QMMBMSmall, shaders.QMMBN, shaders.QMMBK, shaders.QMMSimdgroups, shaders.QMMThreads,
		unsafe.Sizeof(c), unsafe.Offsetof(c.Channels), unsafe.Offsetof(c.Taps), unsafe.Offsetof(c.Tokens), shaders.DeltaMaxTaps,
		unsafe.Sizeof(d), unsafe.Offsetof(d.KeyHeads), unsafe.Offsetof(d.ValueHeads), unsafe.Offsetof(d.ValueDim), unsafe.Offsetof(d.QScale), unsafe.Offsetof(d.Eps), unsafe.Offsetof(d.Tokens), unsafe.Offsetof(d.Blocks),
		shaders.DeltaChunk, shaders.DeltaChunkMaxKeyDim, shaders.DeltaChunkPrepThreads, shaders.DeltaChunkScanSimdgroups,
		unsafe.Sizeof(a), unsafe.Offsetof(a.Tokens), unsafe.Offsetof(a.Pos0), unsafe.Offsetof(a.Heads), unsafe.Offsetof(a.KVHeads), unsafe.Offsetof(a.Scale), shaders.AttnPrefillTokens, shaders.AttnPrefillBlocks, shaders.AttnPrefillScratch,
	}
	checkLayout(t, dev, values, want)
}

func TestSwiGLU(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(37, 38))
	for i, n := range []int{300, 1, 64 * 8 * 512} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			g, u := denseRand(rng, n, 3), denseRand(rng, n, 1)
			gv, uv, out := denseBuf(t, d, 0, denseF32s(g)), denseBuf(t, d, 4, denseF32s(u)), denseBuf(t, d, 0, make([]byte, 4*n))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.SwiGLU(cb, out, gv, uv, n) })
			for j, o := range denseReadF32(out, n) {
				want := float64(g[j]) * denseSigmoid(g[j]) * float64(u[j])
				// exp within a few ulp, an add, two divides or multiplies.
				if math.Abs(float64(o)-want) > 16*denseU*math.Abs(want)+1e-30 {
					t.Fatalf("out[%d] = %v, want %v", j, o, want)
				}
			}
		})
	}
}

// AddRMSNormRows against the per-row reference: the residual exactly (one
// fp32 add), the norm within AddRMSNorm's tolerance.
func TestAddRMSNormRows(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(39, 40))
	for i, c := range []struct{ rows, n int }{{3, 100}, {33, 2048}, {1, 1}} {
		t.Run(fmt.Sprintf("rows=%d/n=%d", c.rows, c.n), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			x, delta, w := denseRand(rng, c.rows*c.n, 2), denseRand(rng, c.rows*c.n, 1), denseRand(rng, c.n, 1)
			xv, dv, wv := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 8, denseF32s(delta)), denseBuf(t, d, 0, denseF32s(w))
			out := denseBuf(t, d, 0, make([]byte, 4*c.rows*c.n))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.AddRMSNormRows(cb, xv, dv, out, wv, c.n, c.rows, 1e-6) })
			gotX, gotOut := denseReadF32(xv, c.rows*c.n), denseReadF32(out, c.rows*c.n)
			for r := range c.rows {
				sum := make([]float32, c.n)
				for j := range sum {
					sum[j] = x[r*c.n+j] + delta[r*c.n+j]
					if gotX[r*c.n+j] != sum[j] {
						t.Fatalf("residual x[%d][%d] = %v, want %v", r, j, gotX[r*c.n+j], sum[j])
					}
				}
				for j, want := range selftest.RMSNorm(sum, w, 1e-6) {
					if g := gotOut[r*c.n+j]; math.Abs(float64(g)-want) > denseNormTol(c.n)*math.Abs(want)+1e-30 {
						t.Fatalf("out[%d][%d] = %v, want %v", r, j, g, want)
					}
				}
			}
		})
	}
}
