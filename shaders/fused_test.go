package shaders_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/shaders"
)

// Each fused op writes what a sequence of the ops the model still runs
// writes, bit for bit (for MoEDownCombine: QMV's products combined in the
// kernel's fp32 order on the host), and the reference's values within
// those ops' tolerances (taken over RMSNorm's output where a norm is
// folded in, which TestRMSNorm holds to the reference). The routed form is
// in routed_test.go.

// fusedSame fails unless got and want hold the same float32 bits.
func fusedSame(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, composed %v", what, i, got[i], want[i])
		}
	}
}

// fusedNormed runs RMSNorm of x and returns its output.
func fusedNormed(t *testing.T, k *shaders.Kernels, d gpu.Device, xv, wv shaders.View, n int) (shaders.View, []float32) {
	t.Helper()
	xn := denseBuf(t, d, 0, make([]byte, 4*n))
	denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.RMSNorm(cb, xn, xv, wv, n, 1, 1e-6) })
	return xn, denseReadF32(xn, n)
}

func TestNormQMVMulti(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(51, 52))
	cases := []struct {
		rows       []int
		cols, bits int
	}{
		{[]int{13, 5}, 192, 4},         // rows not a multiple of a block; raced
		{[]int{256, 1}, 2048, 8},       // the router and the shared expert's gate
		{[]int{64, 32, 8, 8}, 2048, 4}, // a DeltaNet layer's four inputs, scaled down
		{[]int{40}, 5120, 4},           // more columns than one pass of RMSNorm's threads
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%v/cols=%d/bits=%d", c.rows, c.cols, c.bits), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			x, w := denseRand(rng, c.cols, 3), denseRand(rng, c.cols, 1)
			xv, wv := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 4, denseF32s(w))
			var qs []*denseQ
			var ms []shaders.QMatrix
			var outs, seps []shaders.View
			for _, r := range c.rows {
				q := newDenseQ(t, d, rng, 1, r, c.cols, c.bits)
				qs, ms = append(qs, q), append(ms, q.m)
				outs, seps = append(outs, denseBuf(t, d, 0, make([]byte, 4*r))), append(seps, denseBuf(t, d, 0, make([]byte, 4*r)))
			}
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.NormQMVMulti(cb, shaders.NormQMVMultiIO{Outs: outs, Ms: ms, X: xv, Norm: shaders.Norm{W: wv, Eps: 1e-6}})
			})
			xnv, xn := fusedNormed(t, k, d, xv, wv, c.cols)
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMVMulti(cb, seps, ms, xnv) })
			for j, q := range qs {
				got := denseReadF32(outs[j], q.Rows)
				fusedSame(t, fmt.Sprintf("matrix %d: y", j), got, denseReadF32(seps[j], q.Rows))
				for r := range q.Rows {
					want, mag := q.Mul(0, r, xn)
					if tol := denseQMVTol(c.cols, mag); math.Abs(float64(got[r])-want) > tol {
						t.Fatalf("matrix %d: y[%d] = %v, want %v (tol %.3g)", j, r, got[r], want, tol)
					}
				}
			}
		})
	}
}

func TestNormQMVSwiGLU(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(53, 54))
	for i, c := range []struct{ rows, cols int }{{13, 192}, {512, 2048}} {
		t.Run(fmt.Sprintf("rows=%d/cols=%d", c.rows, c.cols), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			gate, up := newDenseQ(t, d, rng, 1, c.rows, c.cols, 4), newDenseQ(t, d, rng, 1, c.rows, c.cols, 4)
			x, w := denseRand(rng, c.cols, 2), denseRand(rng, c.cols, 1)
			xv, wv := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 0, denseF32s(w))
			out, sep := denseBuf(t, d, 0, make([]byte, 4*c.rows)), denseBuf(t, d, 0, make([]byte, 4*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.NormQMVSwiGLU(cb, shaders.NormQMVSwiGLUIO{Out: out, Gate: gate.m, Up: up.m, X: xv, Norm: shaders.Norm{W: wv, Eps: 1e-6}})
			})
			xnv, xn := fusedNormed(t, k, d, xv, wv, c.cols)
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMVSwiGLU(cb, sep, gate.m, up.m, xnv) })
			got := denseReadF32(out, c.rows)
			fusedSame(t, "y", got, denseReadF32(sep, c.rows))
			for r, o := range got {
				if want, tol := denseSwiGLU(gate, up, 0, r, xn); math.Abs(float64(o)-want) > tol {
					t.Fatalf("y[%d] = %v, want %v (tol %.3g)", r, o, want, tol)
				}
			}
		})
	}
}

func TestQMVAdd(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(57, 58))
	for i, c := range []struct{ rows, cols, bits int }{{13, 192, 4}, {2048, 4096, 4}, {100, 512, 8}} {
		t.Run(fmt.Sprintf("rows=%d/cols=%d/bits=%d", c.rows, c.cols, c.bits), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			q := newDenseQ(t, d, rng, 1, c.rows, c.cols, c.bits)
			x, y := denseRand(rng, c.cols, 1), denseRand(rng, c.rows, 2)
			xv, yv := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 4, denseF32s(y))
			delta := denseBuf(t, d, 0, make([]byte, 4*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMVAdd(cb, yv, q.m, xv) })
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMV(cb, delta, q.m, xv) })
			got, dl := denseReadF32(yv, c.rows), denseReadF32(delta, c.rows)
			for r := range c.rows {
				// AddRMSNorm's residual add, in fp32.
				if sum := y[r] + dl[r]; math.Float32bits(got[r]) != math.Float32bits(sum) {
					t.Fatalf("y[%d] = %v, unfused %v", r, got[r], sum)
				}
				want, mag := q.Mul(0, r, x)
				want += float64(y[r])
				if tol := denseQMVTol(c.cols, mag) + denseU*(math.Abs(want)+mag); math.Abs(float64(got[r])-want) > tol {
					t.Fatalf("y[%d] = %v, want %v (tol %.3g)", r, got[r], want, tol)
				}
			}
		})
	}
}

// fusedCombineSame runs MoEDownCombine under io, its shared gate's logit 0
// (so the sigmoid is 0.5 exactly on any exp), on a copy x0 of the residual
// and requires the result bit for bit of QMV's products of each chosen
// expert and of the shared expert, combined in the kernel's fp32 order:
// x + (sum_j w_j y_j + 0.5 s), each product and sum rounded.
func fusedCombineSame(t *testing.T, k *shaders.Kernels, d gpu.Device, down, shDown *denseQ, io shaders.MoEDownIO, x0 []float32, ids []int, ws []float32) {
	t.Helper()
	rows, cols := down.m.Rows, down.m.Cols
	ys := make([]shaders.View, len(ids))
	shOut := denseBuf(t, d, 0, make([]byte, 4*rows))
	denseRun(t, k, func(cb gpu.CommandBuffer) error {
		for j, e := range ids {
			m := down.m
			m.Codes, m.Scales, m.Biases = m.Codes.At(e*m.ExpertCodeBytes()), m.Scales.At(e*m.ExpertScaleBytes()), m.Biases.At(e*m.ExpertScaleBytes())
			ys[j] = denseBuf(t, d, 0, make([]byte, 4*rows))
			if err := k.QMV(cb, ys[j], m, io.H.At(4*j*cols)); err != nil {
				return err
			}
		}
		if err := k.QMV(cb, shOut, shDown.m, io.SharedH); err != nil {
			return err
		}
		return k.MoEDownCombine(cb, io)
	})
	y := make([][]float32, len(ids))
	for j := range ids {
		y[j] = denseReadF32(ys[j], rows)
	}
	s := denseReadF32(shOut, rows)
	want := make([]float32, rows)
	for r := range rows {
		var acc float32
		for j := range ids {
			acc += float32(ws[j] * y[j][r]) // rounded before the add: no fused multiply-add
		}
		want[r] = x0[r] + (acc + float32(0.5*s[r]))
	}
	fusedSame(t, "x", denseReadF32(io.X, rows), want)
}

func TestMoEDownCombine(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(59, 60))
	cases := []struct {
		experts, topK, rows, k, sharedK int
		badID                           bool
	}{
		{5, 3, 13, 128, 64, false},     // rows not a multiple of a block; raced
		{16, 8, 2048, 512, 512, false}, // the model's shapes, fewer experts
		{4, 2, 40, 64, 192, true},      // an id past the stack: NaN
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("experts=%d/k=%d/rows=%d/cols=%d/shared=%d", c.experts, c.topK, c.rows, c.k, c.sharedK), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			down := newDenseQ(t, d, rng, c.experts, c.rows, c.k, 4)
			shDown := newDenseQ(t, d, rng, 1, c.rows, c.sharedK, 4)
			h, sh := denseRand(rng, c.topK*c.k, 1), denseRand(rng, c.sharedK, 1)
			ws, x := denseRand(rng, c.topK, 0.3), denseRand(rng, c.rows, 2)
			gate := []float32{float32(rng.NormFloat64())}
			ids := rng.Perm(c.experts)[:c.topK]
			idv := make([]uint32, c.topK)
			for j, e := range ids {
				idv[j] = uint32(e)
			}
			if c.badID {
				idv[1] = uint32(c.experts)
			}
			hv, shv := denseBuf(t, d, 0, denseF32s(h)), denseBuf(t, d, 0, denseF32s(sh))
			wsv, gv, iv := denseBuf(t, d, 0, denseF32s(ws)), denseBuf(t, d, 4, denseF32s(gate)), denseBuf(t, d, 0, denseU32s(idv))
			xv, x2 := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 0, denseF32s(x))
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.MoEDownCombine(cb, shaders.MoEDownIO{
					X: xv, Down: down.m, H: hv, IDs: iv, Weights: wsv, TopK: c.topK,
					SharedDown: shDown.m, SharedH: shv, SharedGate: gv,
				})
			})
			if !c.badID {
				fusedCombineSame(t, k, d, down, shDown, shaders.MoEDownIO{
					X: x2, Down: down.m, H: hv, IDs: iv, Weights: wsv, TopK: c.topK,
					SharedDown: shDown.m, SharedH: shv, SharedGate: denseBuf(t, d, 0, denseF32s([]float32{0})),
				}, x, ids, ws)
			}
			got := denseReadF32(xv, c.rows)
			sg := denseSigmoid(gate[0])
			for r, g := range got {
				if c.badID {
					if !math.IsNaN(float64(g)) {
						t.Fatalf("x[%d] = %v with an expert id past the stack, want NaN", r, g)
					}
					continue
				}
				want, mag := float64(x[r]), math.Abs(float64(x[r]))
				var tol float64
				for j, e := range ids {
					y, ymag := down.Mul(e, r, h[j*c.k:(j+1)*c.k])
					want += float64(ws[j]) * y
					mag += math.Abs(float64(ws[j]) * y)
					tol += math.Abs(float64(ws[j])) * denseQMVTol(c.k, ymag)
				}
				s, smag := shDown.Mul(0, r, sh)
				want += sg * s
				mag += math.Abs(sg * s)
				// The combine's fp32 bound (k multiply-adds in sequence,
				// the gate: exp within 4 ulp, an add, a divide, times
				// shared, two last adds) over the products' own.
				tol += float64(2*c.topK+18)*denseU*mag + sg*denseQMVTol(c.sharedK, smag)
				if math.Abs(float64(g)-want) > tol {
					t.Fatalf("x[%d] = %v, want %v (tol %.3g)", r, g, want, tol)
				}
			}
		})
	}
}

func TestFusedRejectsBadInput(t *testing.T) {
	_, k := denseDevices(t)
	d := k.Device()
	rng := rand.New(rand.NewPCG(61, 62))
	q := newDenseQ(t, d, rng, 2, 16, 128, 4)
	q8 := newDenseQ(t, d, rng, 1, 16, 128, 8)
	buf := func(n int) shaders.View { return denseBuf(t, d, 0, make([]byte, 4*n)) }
	x, w, out := buf(128), buf(128), buf(64)
	norm := shaders.Norm{W: w, Eps: 1e-6}
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	down := shaders.MoEDownIO{X: buf(16), Down: q.m, H: buf(256), IDs: buf(2), Weights: buf(2), TopK: 2, SharedDown: q.m, SharedH: x, SharedGate: buf(1)}
	downWith := func(f func(*shaders.MoEDownIO)) shaders.MoEDownIO { io := down; f(&io); return io }
	cases := []struct {
		name string
		err  error
	}{
		{"NormQMVMulti no gains", k.NormQMVMulti(cb, shaders.NormQMVMultiIO{Outs: []shaders.View{out}, Ms: []shaders.QMatrix{q.m}, X: x})},
		{"NormQMVMulti short gains", k.NormQMVMulti(cb, shaders.NormQMVMultiIO{Outs: []shaders.View{out}, Ms: []shaders.QMatrix{q.m}, X: x, Norm: shaders.Norm{W: buf(64)}})},
		{"NormQMVMulti eps", k.NormQMVMulti(cb, shaders.NormQMVMultiIO{Outs: []shaders.View{out}, Ms: []shaders.QMatrix{q.m}, X: x, Norm: shaders.Norm{W: w, Eps: float32(math.NaN())}})},
		{"NormQMVMulti outputs", k.NormQMVMulti(cb, shaders.NormQMVMultiIO{Ms: []shaders.QMatrix{q.m}, X: x, Norm: norm})},
		{"NormQMVSwiGLU 8-bit", k.NormQMVSwiGLU(cb, shaders.NormQMVSwiGLUIO{Out: out, Gate: q8.m, Up: q8.m, X: x, Norm: norm})},
		{"NormQMVSwiGLU x misaligned", k.NormQMVSwiGLU(cb, shaders.NormQMVSwiGLUIO{Out: out, Gate: q.m, Up: q.m, X: buf(132).At(4), Norm: norm})},
		{"routed top-k", k.NormQMVExpertsSwiGLURouted(cb, shaders.RoutedSwiGLUIO{Out: buf(64), Gate: q.m, Up: q.m, X: x, Norm: norm, IDs: buf(4), Weights: buf(4), Logits: buf(2), Experts: 2, TopK: 3})},
		{"routed no gains", k.NormQMVExpertsSwiGLURouted(cb, shaders.RoutedSwiGLUIO{Out: buf(32), Gate: q.m, Up: q.m, X: x, IDs: buf(2), Weights: buf(2), Logits: buf(2), Experts: 2, TopK: 2})},
		{"QMVAdd y short", k.QMVAdd(cb, buf(8), q.m, x)},
		{"MoEDownCombine top-k", k.MoEDownCombine(cb, downWith(func(io *shaders.MoEDownIO) { io.TopK = 0 }))},
		{"MoEDownCombine 8-bit shared", k.MoEDownCombine(cb, downWith(func(io *shaders.MoEDownIO) { io.SharedDown = q8.m }))},
		{"MoEDownCombine h short", k.MoEDownCombine(cb, downWith(func(io *shaders.MoEDownIO) { io.H = buf(128) }))},
		{"MoEDownCombine no gate", k.MoEDownCombine(cb, downWith(func(io *shaders.MoEDownIO) { io.SharedGate = shaders.View{} }))},
		{"MoEDownCombine x short", k.MoEDownCombine(cb, downWith(func(io *shaders.MoEDownIO) { io.X = buf(8) }))},
	}
	for _, c := range cases {
		if !errors.Is(c.err, gpu.ErrInvalid) {
			t.Errorf("%s: %v, want gpu.ErrInvalid", c.name, c.err)
		}
	}
	if n := cb.Trace().Dispatches(); n != 0 {
		t.Errorf("%d dispatches encoded from bad input", n)
	}
	// The valid form encodes.
	if err := k.MoEDownCombine(cb, down); err != nil {
		t.Fatal(err)
	}
}
