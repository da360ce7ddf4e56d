package shaders_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/gpu/gputest"
	"petal/shaders"
	"petal/shaders/selftest"
)

// The dense family's ops against plain Go references that follow
// engine/cpu's math in float64. Each op's first case runs on a race-checking
// device (every dispatch twice, in two thread orders); the rest run on a
// fast one.

// denseU is fp32's unit roundoff, the base of every tolerance below.
const denseU = 1.0 / (1 << 24)

// denseDevices returns kernels on a race-checking and on a fast sim device.
func denseDevices(t testing.TB) (race, fast *shaders.Kernels) {
	t.Helper()
	return shaders.NewKernels(device(t)), shaders.NewKernels(gputest.Open(t, true))
}

// densePick is the race-checking kernels for the cases that want them (a
// test's first, small ones), else the fast ones, and their device.
func densePick(race, fast *shaders.Kernels, raced bool) (*shaders.Kernels, gpu.Device) {
	if raced {
		return race, race.Device()
	}
	return fast, fast.Device()
}

// denseRun encodes one op into a fresh command buffer and runs it.
func denseRun(t testing.TB, k *shaders.Kernels, encode func(cb gpu.CommandBuffer) error) {
	t.Helper()
	cb, err := k.Device().NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	if err := encode(cb); err != nil {
		t.Fatal(err)
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
}

// denseBuf is a buffer of pre zero bytes followed by data, ending exactly
// at the data (against the sim's guard page), viewed at the data.
func denseBuf(t testing.TB, d gpu.Device, pre int, data []byte) shaders.View {
	t.Helper()
	b, err := d.NewBuffer(pre + len(data))
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Contents()[pre:], data)
	return shaders.View{Buf: b, Off: pre}
}

func denseF32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func denseU32s(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func denseU16s(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func denseReadF32(v shaders.View, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(v.Buf.Contents()[v.Off+4*i:]))
	}
	return out
}

func denseReadU32(v shaders.View, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(v.Buf.Contents()[v.Off+4*i:])
	}
	return out
}

func denseRand(rng *rand.Rand, n int, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * sd)
	}
	return v
}

// denseQ is a random quantized matrix (a stack of experts) with its host
// copy. Codes sit 8 bytes into their buffer and scales 4 bytes into theirs,
// the alignments the test fixtures' shards have.
type denseQ struct {
	m       shaders.QMatrix
	experts int
	selftest.Quantized
}

func newDenseQ(t testing.TB, d gpu.Device, rng *rand.Rand, experts, rows, cols, bits int) *denseQ {
	t.Helper()
	q := &denseQ{experts: experts}
	q.Rows, q.Cols, q.Bits = rows, cols, bits
	q.Codes = make([]uint32, experts*rows*cols*bits/32)
	for i := range q.Codes {
		q.Codes[i] = rng.Uint32()
	}
	groups := experts * rows * cols / shaders.QMVGroupSize
	q.Scales, q.Biases = make([]uint16, groups), make([]uint16, groups)
	for i := range q.Scales {
		q.Scales[i] = selftest.BF16(float32(rng.NormFloat64() * 0.02))
		q.Biases[i] = selftest.BF16(float32(rng.NormFloat64() * 0.1))
	}
	q.m = shaders.QMatrix{
		Codes:  denseBuf(t, d, 8, denseU32s(q.Codes)),
		Scales: denseBuf(t, d, 4, denseU16s(q.Scales)),
		Biases: denseBuf(t, d, 0, denseU16s(q.Biases)),
		Rows:   rows, Cols: cols, Bits: bits, GroupSize: shaders.QMVGroupSize,
	}
	return q
}

// denseQMVTol bounds the kernel's fp32 error on a row of k columns: a lane adds
// its chunks in sequence (k/256 at most) of up to 16 products, then a
// 5-level simd_sum tree; each addition costs at most u times the running
// magnitude. 64 covers the fixed depth.
func denseQMVTol(k int, mag float64) float64 { return float64(64+k/256) * denseU * mag }

func TestQMV(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct{ rows, cols, bits int }{
		{13, 576, 4},   // rows not a multiple of a threadgroup's 8; a partial last step
		{13, 320, 8},   // 8-bit, partial step
		{1, 64, 4},     // one row, one group: fewer values than lanes
		{1, 2048, 8},   // shared_expert_gate
		{37, 4096, 4},  // o_proj/out_proj width
		{300, 2048, 4}, // several threadgroups
		{256, 2048, 8}, // the router
		{2048, 512, 4}, // the experts' down width
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%d/cols=%d/bits=%d", c.rows, c.cols, c.bits), func(t *testing.T) {
			k, d := densePick(race, fast, i < 2)
			q := newDenseQ(t, d, rng, 1, c.rows, c.cols, c.bits)
			x := denseRand(rng, c.cols, 1)
			xv := denseBuf(t, d, 16, denseF32s(x))
			out := denseBuf(t, d, 4, make([]byte, 4*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMV(cb, out, q.m, xv) })
			got := denseReadF32(out, c.rows)
			for r := range c.rows {
				want, mag := q.Mul(0, r, x)
				if tol := denseQMVTol(c.cols, mag); math.Abs(float64(got[r])-want) > tol {
					t.Fatalf("y[%d] = %v, want %v (tol %.3g)", r, got[r], want, tol)
				}
			}
		})
	}
}

func TestQMVMulti(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(23, 24))
	cases := []struct {
		rows       []int
		cols, bits int
	}{
		{[]int{13, 5, 1, 9}, 192, 4},     // the most matrices, no row count a multiple of a block
		{[]int{256, 1}, 320, 8},          // the router and shared_expert_gate; a partial step
		{[]int{64, 16, 16}, 256, 4},      // attention's q/k/v, scaled down
		{[]int{7}, 64, 4},                // one matrix, one group
		{[]int{300, 128, 2, 2}, 2048, 4}, // DeltaNet's qkv/z/b/a at the model's width
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%v/cols=%d/bits=%d", c.rows, c.cols, c.bits), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			qs := make([]*denseQ, len(c.rows))
			ms := make([]shaders.QMatrix, len(c.rows))
			outs := make([]shaders.View, len(c.rows))
			for j, r := range c.rows {
				qs[j] = newDenseQ(t, d, rng, 1, r, c.cols, c.bits)
				ms[j] = qs[j].m
				outs[j] = denseBuf(t, d, 0, make([]byte, 4*r))
			}
			x := denseRand(rng, c.cols, 1)
			xv := denseBuf(t, d, 16, denseF32s(x))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMVMulti(cb, outs, ms, xv) })
			for j, q := range qs {
				got := denseReadF32(outs[j], c.rows[j])
				for r := range c.rows[j] {
					want, mag := q.Mul(0, r, x)
					if tol := denseQMVTol(c.cols, mag); math.Abs(float64(got[r])-want) > tol {
						t.Fatalf("matrix %d: y[%d] = %v, want %v (tol %.3g)", j, r, got[r], want, tol)
					}
				}
			}
		})
	}
}

// denseSwiGLU is silu(g)*u in float64 for the products g and u of row r of
// expert e of gate and up with x, and a bound on the kernel's error: g and
// u are each off by up to denseQMVTol; silu's slope stays within 1.1 in
// magnitude, so g's error moves the result by at most 1.1*eg*(|u|+eu) and
// u's by |silu(g)|*eu; silu itself (exp within 4 ulp, an add, a divide)
// and the last multiply add 16 ulp of the result.
func denseSwiGLU(gate, up *denseQ, e, r int, x []float32) (want, tol float64) {
	g, gmag := gate.Mul(e, r, x)
	u, umag := up.Mul(e, r, x)
	k := len(x)
	silu := g / (1 + math.Exp(-g))
	eg, eu := denseQMVTol(k, gmag), denseQMVTol(k, umag)
	want = silu * u
	tol = 1.1*eg*(math.Abs(u)+eu) + math.Abs(silu)*eu + 16*denseU*(math.Abs(want)+1.1*eg*(math.Abs(u)+eu)) + 1e-30
	return want, tol
}

func TestQMVSwiGLU(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(25, 26))
	cases := []struct{ rows, cols int }{
		{13, 576},   // rows not a multiple of a threadgroup's 8; a partial last step
		{1, 64},     // one row, one group
		{512, 2048}, // the shared expert's gate and up
		{37, 256},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%d/cols=%d", c.rows, c.cols), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			gate, up := newDenseQ(t, d, rng, 1, c.rows, c.cols, 4), newDenseQ(t, d, rng, 1, c.rows, c.cols, 4)
			x := denseRand(rng, c.cols, 1)
			xv := denseBuf(t, d, 16, denseF32s(x))
			out := denseBuf(t, d, 0, make([]byte, 4*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.QMVSwiGLU(cb, out, gate.m, up.m, xv) })
			for r, o := range denseReadF32(out, c.rows) {
				if want, tol := denseSwiGLU(gate, up, 0, r, x); math.Abs(float64(o)-want) > tol {
					t.Fatalf("y[%d] = %v, want %v (tol %.3g)", r, o, want, tol)
				}
			}
		})
	}
}

func TestQMVExpertsSwiGLU(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(27, 28))
	const experts = 6
	cases := []struct {
		rows, cols int
		ids        []uint32
	}{
		{13, 192, []uint32{4, 0, 5}},                    // rows not a multiple of 8
		{1, 64, []uint32{2}},                            // one slot, one row
		{40, 256, []uint32{0, experts, 2}},              // an id past the stack: NaNs for that slot only
		{64, 512, []uint32{1, 2, 3, 4, 0, 5, 5, 1}},     // top-8 with repeats
		{24, 2048, []uint32{3, 1, 4, 1, 5, 0, 2, 1, 0}}, // the model's width
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%d/cols=%d/slots=%d", c.rows, c.cols, len(c.ids)), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			gate, up := newDenseQ(t, d, rng, experts, c.rows, c.cols, 4), newDenseQ(t, d, rng, experts, c.rows, c.cols, 4)
			slots := len(c.ids)
			x := denseRand(rng, c.cols, 1)
			xv := denseBuf(t, d, 0, denseF32s(x))
			ids := denseBuf(t, d, 4, denseU32s(c.ids))
			out := denseBuf(t, d, 0, make([]byte, 4*slots*c.rows))
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.QMVExpertsSwiGLU(cb, out, gate.m, up.m, xv, ids, slots)
			})
			got := denseReadF32(out, slots*c.rows)
			for j, e := range c.ids {
				for r := range c.rows {
					o := got[j*c.rows+r]
					if int(e) >= experts {
						if !math.IsNaN(float64(o)) {
							t.Fatalf("slot %d (expert %d out of range): y[%d] = %v, want NaN", j, e, r, o)
						}
						continue
					}
					if want, tol := denseSwiGLU(gate, up, int(e), r, x); math.Abs(float64(o)-want) > tol {
						t.Fatalf("slot %d expert %d: y[%d] = %v, want %v (tol %.3g)", j, e, r, o, want, tol)
					}
				}
			}
		})
	}
}

func TestEmbed(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		rows, cols int
		token      uint32
	}{
		{7, 192, 6},    // the last row; not a multiple of the threadgroup
		{1, 64, 0},     // one row
		{50, 2048, 17}, // the model's hidden size
		{9, 128, 9},    // past the table: NaNs
		{9, 128, 1<<32 - 1},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%d/cols=%d/token=%d", c.rows, c.cols, c.token), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			q := newDenseQ(t, d, rng, 1, c.rows, c.cols, 4)
			// The token sits in slot 1 of a two-slot buffer, as decode's ping-pong slots do.
			tok := denseBuf(t, d, 0, denseU32s([]uint32{3, c.token}))
			out := denseBuf(t, d, 0, make([]byte, 4*c.cols))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.Embed(cb, out, q.m, tok.At(4)) })
			got := denseReadF32(out, c.cols)
			for col, g := range got {
				if int(c.token) >= c.rows {
					if !math.IsNaN(float64(g)) {
						t.Fatalf("out[%d] = %v, want NaN", col, g)
					}
					continue
				}
				want, mag := q.At(0, int(c.token), col)
				// One multiply and one add in fp32 (fused or not): 2 roundings.
				if tol := 2 * denseU * mag; math.Abs(float64(g)-want) > tol {
					t.Fatalf("out[%d] = %v, want %v", col, g, want)
				}
			}
		})
	}
}

// denseNormTol bounds the relative error of a norm over n elements: the sum of
// squares runs through n/32 sequential additions per thread at most plus
// two 5-level trees and the partials' loop (up to 32), each costing u
// relative; the square root halves it; rsqrt and two multiplies add a few
// ulp (Metal's fast rsqrt is within 2).
func denseNormTol(n int) float64 { return (float64(n/32+64)/2 + 8) * denseU }

func TestRMSNorm(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct{ rows, n int }{
		{3, 100}, // rows; n not a multiple of the threadgroup
		{1, 1},
		{2, 31},
		{16, 256},  // q_norm over 16 heads
		{2, 2048},  // the hidden size
		{1, 10000}, // more elements than 1024 threads hold at 8 each
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("rows=%d/n=%d", c.rows, c.n), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			x := denseRand(rng, c.rows*c.n, 3)
			w := denseRand(rng, c.n, 1)
			xv, wv := denseBuf(t, d, 4, denseF32s(x)), denseBuf(t, d, 0, denseF32s(w))
			out := denseBuf(t, d, 0, make([]byte, 4*c.rows*c.n))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.RMSNorm(cb, out, xv, wv, c.n, c.rows, 1e-6) })
			got := denseReadF32(out, c.rows*c.n)
			// In place too: out = x.
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.RMSNorm(cb, xv, xv, wv, c.n, c.rows, 1e-6) })
			inPlace := denseReadF32(xv, c.rows*c.n)
			for r := range c.rows {
				want := selftest.RMSNorm(x[r*c.n:(r+1)*c.n], w, 1e-6)
				for j, wj := range want {
					g := got[r*c.n+j]
					if math.Abs(float64(g)-wj) > denseNormTol(c.n)*math.Abs(wj)+1e-30 {
						t.Fatalf("y[%d][%d] = %v, want %v", r, j, g, wj)
					}
					if inPlace[r*c.n+j] != g {
						t.Fatalf("in place y[%d][%d] = %v, out of place %v", r, j, inPlace[r*c.n+j], g)
					}
				}
			}
		})
	}
}

// TestAddRMSNormOneRow is AddRMSNormRows over one row of widths that do
// and do not fill a threadgroup.
func TestAddRMSNormOneRow(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(9, 10))
	for i, n := range []int{2048, 1, 77, 1000, 5000} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			x, delta, w := denseRand(rng, n, 2), denseRand(rng, n, 1), denseRand(rng, n, 1)
			xv, dv, wv := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 8, denseF32s(delta)), denseBuf(t, d, 0, denseF32s(w))
			out := denseBuf(t, d, 0, make([]byte, 4*n))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.AddRMSNormRows(cb, xv, dv, out, wv, n, 1, 1e-6) })
			sum := make([]float32, n)
			for j := range sum {
				sum[j] = x[j] + delta[j] // engine/cpu's add, in fp32
			}
			if got := denseReadF32(xv, n); fmt.Sprint(got) != fmt.Sprint(sum) {
				t.Fatalf("residual x = %v, want %v", got[:min(n, 8)], sum[:min(n, 8)])
			}
			want := selftest.RMSNorm(sum, w, 1e-6)
			for j, g := range denseReadF32(out, n) {
				if math.Abs(float64(g)-want[j]) > denseNormTol(n)*math.Abs(want[j])+1e-30 {
					t.Fatalf("out[%d] = %v, want %v", j, g, want[j])
				}
			}
		})
	}
}

func denseSigmoid(x float32) float64 { return 1 / (1 + math.Exp(-float64(x))) }

func TestRouterTopK(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(13, 14))
	cases := []struct {
		experts, k int
		normalize  bool
		fill       func(lg []float32)
	}{
		{256, 8, true, nil}, // the model
		{256, 8, false, nil},
		{1, 1, true, nil},
		{8, 8, true, nil},    // every expert chosen
		{33, 2, false, nil},  // a partial second column of lanes
		{512, 16, true, nil}, // the limits
		{512, 16, false, nil},
		{100, 4, true, func(lg []float32) { // ties: lower index first, across lanes and within one
			lg[70], lg[6], lg[38], lg[5] = 9, 9, 9, 9
		}},
		{64, 3, true, func(lg []float32) { // equal everywhere: experts 0, 1, 2
			for i := range lg {
				lg[i] = 0.5
			}
		}},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("experts=%d/k=%d/norm=%v/%d", c.experts, c.k, c.normalize, i), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			lg := denseRand(rng, c.experts, 2)
			if c.fill != nil {
				c.fill(lg)
			}
			lv := denseBuf(t, d, 0, denseF32s(lg))
			ids, ws := denseBuf(t, d, 0, make([]byte, 4*c.k)), denseBuf(t, d, 0, make([]byte, 4*c.k))
			denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.RouterTopK(cb, ids, ws, lv, c.experts, c.k, c.normalize) })
			wantIDs, wantWs := selftest.Router(lg, c.k, c.normalize)
			gotIDs, gotWs := denseReadU32(ids, c.k), denseReadF32(ws, c.k)
			for j := range c.k {
				if gotIDs[j] != wantIDs[j] {
					t.Fatalf("ids = %v, want %v", gotIDs, wantIDs)
				}
				// The sums run through at most 16 sequential additions per
				// lane and a 5-level tree, each exp is within 4 ulp, then a
				// divide.
				if math.Abs(float64(gotWs[j])-wantWs[j]) > 32*denseU*wantWs[j] {
					t.Fatalf("weights = %v, want %v", gotWs, wantWs)
				}
			}
		})
	}
}

func TestRouterTopKSkipsNaN(t *testing.T) {
	_, k := denseDevices(t)
	d := k.Device()
	lg := []float32{1, float32(math.NaN()), 3, 2, float32(math.NaN())}
	lv := denseBuf(t, d, 0, denseF32s(lg))
	ids, ws := denseBuf(t, d, 0, make([]byte, 12)), denseBuf(t, d, 0, make([]byte, 12))
	denseRun(t, k, func(cb gpu.CommandBuffer) error { return k.RouterTopK(cb, ids, ws, lv, len(lg), 3, true) })
	if got := denseReadU32(ids, 3); fmt.Sprint(got) != "[2 3 0]" {
		t.Fatalf("ids = %v, want [2 3 0] (NaN below every number)", got)
	}
}

func TestArgmax(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(17, 18))
	cases := []struct {
		n    int
		fill func(x []float32)
	}{
		{5000, func(x []float32) { x[4097], x[1234] = 50, 50 }}, // tie across threads: lowest index
		{1, nil},
		{5, nil}, // fewer values than threads
		{248320, nil},
		{262144, func(x []float32) { x[262143] = 100 }},                  // the last element
		{4096 + 7, func(x []float32) { x[1] = 60; x[1025] = 60 }},        // tie within one thread
		{64, func(x []float32) { x[0] = float32(math.NaN()); x[3] = 9 }}, // a NaN: broken
		{4096, func(x []float32) { x[4095] = float32(math.NaN()) }},      // in the last thread's last round
		{300, func(x []float32) { x[7] = float32(math.Inf(1)) }},         // a largest +Inf: broken
		{40, func(x []float32) {
			for i := range x {
				x[i] = float32(math.Inf(-1))
			}
		}}, // all -Inf: index 0
		{3, func(x []float32) {
			for i := range x {
				x[i] = float32(math.NaN())
			}
		}}, // all NaN: broken
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("n=%d/%d", c.n, i), func(t *testing.T) {
			k, d := densePick(race, fast, i == 0)
			x := denseRand(rng, c.n, 1)
			if c.fill != nil {
				c.fill(x)
			}
			want := uint32(math.MaxUint32)
			for j, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 1) {
					want = shaders.SampleBadLogits
					break
				}
				if want == math.MaxUint32 || v > x[want] {
					want = uint32(j)
				}
			}
			slots := denseBuf(t, d, 0, denseU32s([]uint32{7, 7, 7}))
			denseRun(t, k, func(cb gpu.CommandBuffer) error {
				return k.Argmax(cb, slots.At(4), denseBuf(t, d, 0, denseF32s(x)), c.n)
			})
			got := denseReadU32(slots, 3)
			if got[1] != want {
				t.Fatalf("argmax %d, want %d", got[1], want)
			}
			if got[0] != 7 || got[2] != 7 {
				t.Fatalf("wrote other slots: %v", got)
			}
		})
	}
}

// TestDenseChain runs one MoE block's worth of dense ops in one command
// buffer with barriers only between dependent ops, as the decode step does,
// and checks the end against the references chained on the host.
func TestDenseChain(t *testing.T) {
	race, _ := denseDevices(t)
	k := race
	d := k.Device()
	rng := rand.New(rand.NewPCG(19, 20))
	const h, inter, shInter, experts, topK = 128, 64, 64, 8, 2
	router := newDenseQ(t, d, rng, 1, experts, h, 8)
	shExpGate := newDenseQ(t, d, rng, 1, 1, h, 8)
	gate := newDenseQ(t, d, rng, experts, inter, h, 4)
	up := newDenseQ(t, d, rng, experts, inter, h, 4)
	down := newDenseQ(t, d, rng, experts, h, inter, 4)
	shGate := newDenseQ(t, d, rng, 1, shInter, h, 4)
	shUp := newDenseQ(t, d, rng, 1, shInter, h, 4)
	shDown := newDenseQ(t, d, rng, 1, h, shInter, 4)
	x, w, wNext := denseRand(rng, h, 1), denseRand(rng, h, 1), denseRand(rng, h, 1)
	xv, wv, wNextV := denseBuf(t, d, 0, denseF32s(x)), denseBuf(t, d, 0, denseF32s(w)), denseBuf(t, d, 0, denseF32s(wNext))
	buf := func(n int) shaders.View { return denseBuf(t, d, 0, make([]byte, 4*n)) }
	xn, logits, sg, ids, ws := buf(h), buf(experts), buf(1), buf(topK), buf(topK)
	shH, eh, out := buf(shInter), buf(topK*inter), buf(h)
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	levels := [][]func() error{
		{func() error { return k.RMSNorm(cb, xn, xv, wv, h, 1, 1e-6) }},
		{
			func() error {
				return k.QMVMulti(cb, []shaders.View{logits, sg}, []shaders.QMatrix{router.m, shExpGate.m}, xn)
			},
			func() error { return k.QMVSwiGLU(cb, shH, shGate.m, shUp.m, xn) },
		},
		{func() error { return k.RouterTopK(cb, ids, ws, logits, experts, topK, true) }},
		{func() error { return k.QMVExpertsSwiGLU(cb, eh, gate.m, up.m, xn, ids, topK) }},
		{func() error {
			return k.MoEDownCombine(cb, shaders.MoEDownIO{
				X: xv, Down: down.m, H: eh, IDs: ids, Weights: ws, TopK: topK, SharedDown: shDown.m, SharedH: shH, SharedGate: sg,
			})
		}},
		{func() error { return k.RMSNorm(cb, out, xv, wNextV, h, 1, 1e-6) }},
	}
	for i, level := range levels {
		if i > 0 {
			cb.Barrier()
		}
		for _, op := range level {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cb.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}

	// The host chain, from the GPU's own intermediate results at each
	// discrete choice (the routed ids), so rounding cannot flip a choice.
	f32 := func(v []float64) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out
	}
	xn32 := f32(selftest.RMSNorm(x, w, 1e-6))
	lg := denseReadF32(logits, experts)
	wantIDs, wantWs := selftest.Router(lg, topK, true)
	if got := denseReadU32(ids, topK); fmt.Sprint(got) != fmt.Sprint(wantIDs) {
		t.Fatalf("ids = %v, want %v", got, wantIDs)
	}
	// swiglu is expert e's silu(gate x) * (up x), rounded to fp32 as the
	// GPU stores it.
	swiglu := func(g, u *denseQ, e, rows int) []float32 {
		a := make([]float32, rows)
		for r := range rows {
			gv, _ := g.Mul(e, r, xn32)
			uv, _ := u.Mul(e, r, xn32)
			a[r] = float32(gv / (1 + math.Exp(-gv)) * uv)
		}
		return a
	}
	sgLogit, _ := shExpGate.Mul(0, 0, xn32)
	shA := swiglu(shGate, shUp, 0, shInter)
	want := make([]float64, h)
	for r := range h {
		y, _ := shDown.Mul(0, r, shA)
		want[r] = float64(x[r]) + y/(1+math.Exp(-sgLogit))
	}
	for j, e := range wantIDs {
		a := swiglu(gate, up, int(e), inter)
		for r := range h {
			y, _ := down.Mul(int(e), r, a)
			want[r] += wantWs[j] * y
		}
	}
	wantOut := selftest.RMSNorm(f32(want), wNext, 1e-6)
	// Each stage's fp32 error (about 1e-6 relative) carries through three
	// products; 1e-4 of a result's scale bounds it loosely while a wrong
	// expert, slot, stride or matrix is off by the scale itself.
	for _, c := range []struct {
		name string
		got  []float32
		want []float64
	}{{"residual", denseReadF32(xv, h), want}, {"out", denseReadF32(out, h), wantOut}} {
		var scale float64
		for _, v := range c.want {
			scale = max(scale, math.Abs(v))
		}
		for i := range h {
			if math.Abs(float64(c.got[i])-c.want[i]) > 1e-4*scale {
				t.Fatalf("%s[%d] = %v, want %v", c.name, i, c.got[i], c.want[i])
			}
		}
	}
}

func TestDenseRejectsBadInput(t *testing.T) {
	_, k := denseDevices(t)
	d := k.Device()
	rng := rand.New(rand.NewPCG(21, 22))
	q := newDenseQ(t, d, rng, 2, 16, 128, 4)
	q8 := newDenseQ(t, d, rng, 1, 16, 128, 8)
	wide := newDenseQ(t, d, rng, 1, 16, 192, 4)
	buf := func(n int) shaders.View { return denseBuf(t, d, 0, make([]byte, 4*n)) }
	x, out, ids := buf(256), buf(64), buf(4)
	badCols := q.m
	badCols.Cols = 100
	badBits := q.m
	badBits.Bits = 3
	badGroup := q.m
	badGroup.GroupSize = 32
	noBuf := q.m
	noBuf.Scales = shaders.View{}
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
	}{
		{"QMV cols", k.QMV(cb, out, badCols, x)},
		{"QMV bits", k.QMV(cb, out, badBits, x)},
		{"QMV group", k.QMV(cb, out, badGroup, x)},
		{"QMV no scales", k.QMV(cb, out, noBuf, x)},
		{"QMV x misaligned", k.QMV(cb, out, q.m, x.At(4))},
		{"QMV x short", k.QMV(cb, out, q.m, buf(64))},
		{"QMV out short", k.QMV(cb, buf(8), q.m, x)},
		{"Embed 8-bit", k.Embed(cb, buf(128), q8.m, ids)},
		{"Embed out short", k.Embed(cb, buf(100), q.m, ids)},
		{"RMSNorm n", k.RMSNorm(cb, out, out, out, 0, 1, 1e-6)},
		{"RMSNorm rows", k.RMSNorm(cb, out, out, out, 64, 2, 1e-6)},
		{"RMSNorm eps", k.RMSNorm(cb, out, out, out, 64, 1, float32(math.NaN()))},
		{"AddRMSNormRows out is x", k.AddRMSNormRows(cb, out, x, out, x, 64, 1, 1e-6)},
		{"RouterTopK k > experts", k.RouterTopK(cb, ids, ids, out, 2, 3, true)},
		{"RouterTopK experts", k.RouterTopK(cb, ids, ids, buf(1024), 513, 8, true)},
		{"RouterTopK k", k.RouterTopK(cb, buf(32), buf(32), out, 64, 17, true)},
		{"QMVMulti none", k.QMVMulti(cb, nil, nil, x)},
		{"QMVMulti five", k.QMVMulti(cb, []shaders.View{out, out, out, out, out}, []shaders.QMatrix{q.m, q.m, q.m, q.m, q.m}, x)},
		{"QMVMulti outputs", k.QMVMulti(cb, []shaders.View{out}, []shaders.QMatrix{q.m, q.m}, x)},
		{"QMVMulti bits differ", k.QMVMulti(cb, []shaders.View{out, out}, []shaders.QMatrix{q.m, q8.m}, x)},
		{"QMVMulti cols differ", k.QMVMulti(cb, []shaders.View{out, out}, []shaders.QMatrix{q.m, wide.m}, x)},
		{"QMVMulti bad matrix", k.QMVMulti(cb, []shaders.View{out, out}, []shaders.QMatrix{q.m, badGroup}, x)},
		{"QMVMulti out short", k.QMVMulti(cb, []shaders.View{out, buf(8)}, []shaders.QMatrix{q.m, q.m}, x)},
		{"QMVMulti x misaligned", k.QMVMulti(cb, []shaders.View{out}, []shaders.QMatrix{q.m}, x.At(4))},
		{"QMVSwiGLU 8-bit", k.QMVSwiGLU(cb, out, q8.m, q8.m, x)},
		{"QMVSwiGLU shapes differ", k.QMVSwiGLU(cb, out, q.m, wide.m, x)},
		{"QMVSwiGLU out short", k.QMVSwiGLU(cb, buf(8), q.m, q.m, x)},
		{"QMVExpertsSwiGLU no slots", k.QMVExpertsSwiGLU(cb, out, q.m, q.m, x, ids, 0)},
		{"QMVExpertsSwiGLU ids short", k.QMVExpertsSwiGLU(cb, buf(4*16), q.m, q.m, x, ids, 5)},
		{"QMVExpertsSwiGLU bad up", k.QMVExpertsSwiGLU(cb, out, q.m, noBuf, x, ids, 2)},
		{"Argmax n", k.Argmax(cb, ids, out, 0)},
		{"Argmax short", k.Argmax(cb, ids, out, 65)},
	}
	for _, c := range cases {
		if !errors.Is(c.err, gpu.ErrInvalid) {
			t.Errorf("%s: got %v, want gpu.ErrInvalid", c.name, c.err)
		}
	}
	if n := len(cb.Trace().Events); n != 0 {
		t.Errorf("rejected ops encoded %d dispatches", n)
	}
}
