package shaders_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/shaders"
	"petal/shaders/selftest"
)

// The routed expert SwiGLU picks the router's experts itself and folds in
// the norm before it: its ids and weights are RouterTopK's (and the Go
// reference's), its outputs those of QMVExpertsSwiGLU over those ids and
// RMSNorm's output bit for bit, against the Go reference over that output
// within QMVExpertsSwiGLU's tolerance.
func TestNormQMVExpertsSwiGLURouted(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(41, 42))
	cases := []struct {
		experts, topK, rows, cols int
		normalize                 bool
	}{
		{6, 3, 13, 192, true},   // rows not a multiple of 8; raced
		{40, 8, 64, 512, false}, // a second column of router lanes
		{256, 8, 24, 2048, true},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("experts=%d/k=%d/rows=%d/cols=%d", c.experts, c.topK, c.rows, c.cols), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			gate, up := newDenseQ(t, d, rng, c.experts, c.rows, c.cols, 4), newDenseQ(t, d, rng, c.experts, c.rows, c.cols, 4)
			xv, wv := denseBuf(t, d, 0, denseF32s(denseRand(rng, c.cols, 2))), denseBuf(t, d, 0, denseF32s(denseRand(rng, c.cols, 1)))
			lg := denseRand(rng, c.experts, 2)
			lv := denseBuf(t, d, 0, denseF32s(lg))
			buf := func(n int) (a, b shaders.View) {
				return denseBuf(t, d, 0, make([]byte, n)), denseBuf(t, d, 0, make([]byte, n))
			}
			ids, ids2 := buf(4 * c.topK)
			ws, ws2 := buf(4 * c.topK)
			out, out2 := buf(4 * c.topK * c.rows)
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.NormQMVExpertsSwiGLURouted(cb, shaders.RoutedSwiGLUIO{
					Out: out, Gate: gate.m, Up: up.m, X: xv, Norm: shaders.Norm{W: wv, Eps: 1e-6},
					IDs: ids, Weights: ws, Logits: lv, Experts: c.experts, TopK: c.topK, NormalizeTopK: c.normalize,
				})
			})
			xnv, x := fusedNormed(t, k, d, xv, wv, c.cols)
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				if err := k.RouterTopK(cb, ids2, ws2, lv, c.experts, c.topK, c.normalize); err != nil {
					return err
				}
				cb.Barrier()
				return k.QMVExpertsSwiGLU(cb, out2, gate.m, up.m, xnv, ids2, c.topK)
			})
			wantIDs, wantWs := selftest.Router(lg, c.topK, c.normalize)
			gotIDs, gotWs := denseReadU32(ids, c.topK), denseReadF32(ws, c.topK)
			sepIDs, sepWs := denseReadU32(ids2, c.topK), denseReadF32(ws2, c.topK)
			for j := range c.topK {
				if gotIDs[j] != wantIDs[j] || gotIDs[j] != sepIDs[j] || gotWs[j] != sepWs[j] {
					t.Fatalf("ids %v weights %v; RouterTopK's %v %v; reference ids %v", gotIDs, gotWs, sepIDs, sepWs, wantIDs)
				}
				if math.Abs(float64(gotWs[j])-wantWs[j]) > 32*denseU*wantWs[j] {
					t.Fatalf("weights = %v, want %v", gotWs, wantWs)
				}
			}
			got, sep := denseReadF32(out, c.topK*c.rows), denseReadF32(out2, c.topK*c.rows)
			for j, e := range wantIDs {
				for r := range c.rows {
					o := got[j*c.rows+r]
					if math.Float32bits(o) != math.Float32bits(sep[j*c.rows+r]) {
						t.Fatalf("slot %d: y[%d] = %v, composed %v", j, r, o, sep[j*c.rows+r])
					}
					if want, tol := denseSwiGLU(gate, up, int(e), r, x); math.Abs(float64(o)-want) > tol {
						t.Fatalf("slot %d expert %d: y[%d] = %v, want %v (tol %.3g)", j, e, r, o, want, tol)
					}
				}
			}
		})
	}
}

// TestRouterNoExpertLeft runs the router's top-k past the experts there
// are, which the host refuses but the kernel must survive: once none is
// left, a round's winner is ROUTER_NONE, and marking it taken shifted by
// ROUTER_NONE/32, undefined (the sim traps on it). Lanes past the experts
// write nothing; the others pick as RouterTopK does.
func TestRouterNoExpertLeft(t *testing.T) {
	const experts, topK, untouched = 3, 5, 0xdeadbeef
	k := shaders.NewKernels(device(t))
	d := k.Device()
	p, err := k.Pipeline("moe.metal", "router_topk_f32")
	if err != nil {
		t.Fatal(err)
	}
	logits := []float32{0.5, 2, -1}
	lv := denseBuf(t, d, 0, denseF32s(logits))
	fill := make([]byte, 4*topK)
	for i := range topK {
		binary.LittleEndian.PutUint32(fill[4*i:], untouched)
	}
	ids, ws := denseBuf(t, d, 0, fill), denseBuf(t, d, 0, fill)
	args := shaders.MoEArgs{N: experts, K: topK, Normalize: 1}
	denseRun(t, k, func(cb gpu.CommandBuffer) error {
		return cb.Dispatch(&gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: 1, Y: 1, Z: 1}, Threads: gpu.Size{X: shaders.RouterThreads, Y: 1, Z: 1},
			Args: []gpu.Arg{gpu.BytesArg(0, shaders.Bytes(&args)), lv.Arg(1), ids.Arg(2), ws.Arg(3)}})
	})
	wantIDs, wantWs := selftest.Router(logits, experts, true)
	gotIDs, gotWs := denseReadU32(ids, topK), denseReadF32(ws, topK)
	for j := range topK {
		if j >= experts {
			if gotIDs[j] != untouched || math.Float32bits(gotWs[j]) != untouched {
				t.Errorf("choice %d of %d experts: wrote id %#x weight %v", j, experts, gotIDs[j], gotWs[j])
			}
			continue
		}
		if gotIDs[j] != wantIDs[j] || math.Abs(float64(gotWs[j])-wantWs[j]) > 32*denseU*wantWs[j] {
			t.Errorf("choice %d: id %d weight %v, want %d %v", j, gotIDs[j], gotWs[j], wantIDs[j], wantWs[j])
		}
	}
}
