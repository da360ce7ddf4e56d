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

// mixerKernels opens a sim device (fast: without the race check's second
// run) and its kernels.
func mixerKernels(t testing.TB, fast bool) (gpu.Device, *shaders.Kernels) {
	t.Helper()
	d := gputest.Open(t, fast)
	return d, shaders.NewKernels(d)
}

// mixerRun encodes ops into one command buffer and runs it.
func mixerRun(t testing.TB, d gpu.Device, encode func(cb gpu.CommandBuffer) error) (*gpu.Trace, error) {
	t.Helper()
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	if err := encode(cb); err != nil {
		return nil, err
	}
	if err := cb.Commit(); err != nil {
		return nil, err
	}
	return cb.Trace(), cb.Wait()
}

func view(b gpu.Buffer) shaders.View { return shaders.View{Buf: b} }

// halves is a buffer of v rounded to fp16.
func halves(t testing.TB, d gpu.Device, v []float32) gpu.Buffer {
	t.Helper()
	b, err := d.NewBuffer(shaders.KVElementBytes * len(v))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range v {
		binary.LittleEndian.PutUint16(b.Contents()[2*i:], selftest.HalfBits(f))
	}
	return b
}

// readHalves widens n fp16 values of b.
func readHalves(b gpu.Buffer, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = selftest.HalfValue(binary.LittleEndian.Uint16(b.Contents()[2*i:]))
	}
	return out
}

func TestHalfConversion(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {1.0 / 3, 0x3555}, {65504, 0x7bff}, {65520, 0x7c00},
		{2049, 0x6800}, {2051, 0x6802}, // ties to even
		{6e-8, 0x0001}, {1e-8, 0}, {0.5 * 0x1p-14, 0x0200}, {0x1p-14, 0x0400},
		{float32(0x3ff) * 0x1p-24 * 1.0004, 0x03ff}, {float32(math.Inf(-1)), 0xfc00},
	} {
		if got := selftest.HalfBits(c.in); got != c.want {
			t.Errorf("selftest.HalfBits(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	// Every finite half widens and rounds back to itself.
	for h := range 1 << 16 {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := selftest.HalfBits(selftest.HalfValue(uint16(h))); got != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, selftest.HalfValue(uint16(h)), got)
		}
	}
}

func randFloats(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

// The reference below follows engine/cpu (model.go rmsNorm, attention.go
// rope and softmax) operation by operation in fp32.

func refRMSNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

func refRope(x []float32, dims int, theta float64, pos int) {
	half := dims / 2
	for j := 0; j < half; j++ {
		inv := float32(math.Pow(theta, -2*float64(j)/float64(dims)))
		ang := float64(float32(float64(pos) * float64(inv)))
		cos, sin := float32(math.Cos(ang)), float32(math.Sin(ang))
		a, b := x[j], x[j+half]
		x[j] = a*cos - b*sin
		x[j+half] = b*cos + a*sin
	}
}

func TestAttnPrep(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		a    shaders.AttnShape
		pos  int
		race bool
	}{
		{shaders.AttnShape{Heads: 2, KVHeads: 1, HeadDim: 32, RotaryDim: 32, Theta: 10000, Eps: 1e-6}, 0, true},
		{shaders.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64, RotaryDim: 16, Theta: 1e7, Eps: 1e-6}, 7, false},
		{shaders.AttnShape{Heads: 3, KVHeads: 3, HeadDim: 64, RotaryDim: 0, Theta: 1e7, Eps: 1e-5}, 2, false}, // no rotation
		{shaders.AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256, RotaryDim: 64, Theta: 1e7, Eps: 1e-6}, 5, false},
		// A long context: angles of 1e5 radians must stay accurate.
		{shaders.AttnShape{Heads: 1, KVHeads: 1, HeadDim: 32, RotaryDim: 32, Theta: 10000, Eps: 1e-6}, 100000, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("heads=%d/kv=%d/dim=%d/rot=%d/pos=%d", c.a.Heads, c.a.KVHeads, c.a.HeadDim, c.a.RotaryDim, c.pos), func(t *testing.T) {
			d, k := mixerKernels(t, !c.race)
			a, hd, kd := c.a, c.a.Heads*c.a.HeadDim, c.a.KVHeads*c.a.HeadDim
			qg := randFloats(rng, 2*hd, 2)
			kin := randFloats(rng, kd, 2)
			vin := randFloats(rng, kd, 1)
			qn := randFloats(rng, a.HeadDim, 0.3)
			kn := randFloats(rng, a.HeadDim, 0.3)
			for i := range qn {
				qn[i]++
				kn[i]++
			}
			rows := c.pos + 2 // a row past pos shows nothing else is written
			sentinel := make([]float32, rows*kd)
			for i := range sentinel {
				sentinel[i] = 42
			}
			qb, gb := floats(t, d, make([]float32, hd)), floats(t, d, make([]float32, hd))
			kc, vc := halves(t, d, sentinel), halves(t, d, sentinel)
			_, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
				return k.AttnPrep(cb, shaders.AttnPrepIO{Q: view(qb), Gate: view(gb), QG: view(floats(t, d, qg)), K: view(floats(t, d, kin)), V: view(floats(t, d, vin)), KCache: view(kc), VCache: view(vc), QNorm: view(floats(t, d, qn)), KNorm: view(floats(t, d, kn)), Shape: a, Pos: c.pos})
			})
			if err != nil {
				t.Fatal(err)
			}
			// Each output is a norm (sum of d squares: fp32 relative error
			// below d*2^-24 = 1.5e-5 at d = 256, in practice ~1e-7), a
			// product and a rotation by cos/sin accurate to a few ulp of
			// the same fp32 angle: 1e-5 relative to the pair's magnitude.
			check := func(what string, got, want []float32) {
				t.Helper()
				for i := range want {
					if !within(float64(got[i]), float64(want[i]), 1e-5*ropePair(want, i, a)+1e-7) {
						t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
					}
				}
			}
			wantQ := make([]float32, hd)
			wantG := make([]float32, hd)
			for h := range a.Heads {
				dq := wantQ[h*a.HeadDim : (h+1)*a.HeadDim]
				refRMSNorm(dq, qg[2*h*a.HeadDim:(2*h+1)*a.HeadDim], qn, a.Eps)
				refRope(dq, a.RotaryDim, a.Theta, c.pos)
				copy(wantG[h*a.HeadDim:], qg[(2*h+1)*a.HeadDim:(2*h+2)*a.HeadDim])
			}
			wantK := make([]float32, kd)
			for h := range a.KVHeads {
				dk := wantK[h*a.HeadDim : (h+1)*a.HeadDim]
				refRMSNorm(dk, kin[h*a.HeadDim:(h+1)*a.HeadDim], kn, a.Eps)
				refRope(dk, a.RotaryDim, a.Theta, c.pos)
			}
			check("q", readFloats(qb, hd), wantQ)
			check("gate", readFloats(gb, hd), wantG)
			kAll, vAll := readHalves(kc, rows*kd), readHalves(vc, rows*kd)
			checkHalves(t, "k cache", kAll[c.pos*kd:(c.pos+1)*kd], wantK, a)
			// V is only converted: it must be v rounded to fp16 exactly.
			for i, w := range selftest.RoundHalves(vin) {
				if g := vAll[c.pos*kd+i]; g != w {
					t.Fatalf("v cache[%d] = %v, want %v (v %v rounded to fp16)", i, g, w, vin[i])
				}
			}
			for i := range kAll {
				if (i < c.pos*kd || i >= (c.pos+1)*kd) && (kAll[i] != 42 || vAll[i] != 42) {
					t.Fatalf("cache float %d (row %d) written; only row %d should be", i, i/kd, c.pos)
				}
			}
		})
	}
}

// ropePair is the magnitude of want[i] plus, in the rotated part of a head,
// that of the element RoPE rotates it with: the scale of i's rounding error.
func ropePair(want []float32, i int, a shaders.AttnShape) float64 {
	pair := math.Abs(float64(want[i]))
	if j := i % a.HeadDim; j < a.RotaryDim {
		half := a.RotaryDim / 2
		pair += math.Abs(float64(want[i-j+(j+half)%a.RotaryDim]))
	}
	return pair
}

// checkHalves compares a cached K row, as fp16, with the fp32 reference
// of AttnPrep's k: the kernel's fp32 value is within e = 1e-5 of the
// pair's magnitude of the reference (TestAttnPrep's bound), and rounding it
// to the nearest fp16 adds at most half an ulp, 2^-11 of its magnitude for
// a normal half or 2^-25 below half's normal range. A cache left in fp32,
// or a row rounded the wrong way, is off by more.
func checkHalves(t *testing.T, what string, got, want []float32, a shaders.AttnShape) {
	t.Helper()
	for i := range want {
		e := 1e-5*ropePair(want, i, a) + 1e-7
		tol := math.Exp2(-11)*(math.Abs(float64(want[i]))+e) + e + math.Exp2(-25)
		if !within(float64(got[i]), float64(want[i]), tol) {
			t.Fatalf("%s[%d] = %v, want %v within fp16 rounding", what, i, got[i], want[i])
		}
	}
}

// attnTol bounds attention's error relative to 1 + |o| (see
// testAttnDecode). The references attend the same fp16-rounded K and V the
// kernels read, so the caches' rounding adds nothing to it.
const attnTol = 1e-5

func TestAttnDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	shapes := []shaders.AttnShape{
		{Heads: 4, KVHeads: 2, HeadDim: 32},   // GQA 2:1
		{Heads: 16, KVHeads: 2, HeadDim: 64},  // 8:1
		{Heads: 4, KVHeads: 2, HeadDim: 256},  // the real head dim, 2:1
		{Heads: 16, KVHeads: 2, HeadDim: 256}, // the model's shape
		{Heads: 3, KVHeads: 1, HeadDim: 64},   // odd group: a simd-group with one head
		{Heads: 16, KVHeads: 1, HeadDim: 32},  // the largest group: one position stripe
		{Heads: 2, KVHeads: 2, HeadDim: 32},   // no sharing
	}
	B := shaders.AttnBlock
	lengths := []int{1, B - 1, B, B + 1, 3*B + 5}
	for si, a := range shapes {
		for li, n := range lengths {
			// The race check runs both kernels of every shape once,
			// the rest run fast. 1 and B-1 leave parts empty.
			race := li == len(lengths)-1 && si%2 == 0
			t.Run(fmt.Sprintf("heads=%d/kv=%d/dim=%d/n=%d/race=%v", a.Heads, a.KVHeads, a.HeadDim, n, race), func(t *testing.T) {
				testAttnDecode(t, rng, a, n, n+3, race)
			})
		}
	}
	// Many blocks, each split in parts, on the model's shape.
	t.Run("long", func(t *testing.T) { testAttnDecode(t, rng, shapes[3], 20*B+17, 20*B+17, false) })
	// Past AttnSplitParts blocks, where each block is one part.
	n := shaders.AttnSplitParts*B + 1
	t.Run("unsplit", func(t *testing.T) { testAttnDecode(t, rng, shapes[6], n, n, false) })
}

func testAttnDecode(t *testing.T, rng *rand.Rand, a shaders.AttnShape, n, capacity int, race bool) {
	d, k := mixerKernels(t, !race)
	hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	// Scores of standard deviation ~2: softmax weights spread over e^+-4,
	// so a wrong position or scale moves the output well past tolerance.
	q := randFloats(rng, hd, 2/math.Sqrt(math.Sqrt(float64(a.HeadDim))))
	// The caches hold fp16: the reference attends the same rounded values.
	kc := selftest.RoundHalves(randFloats(rng, capacity*kd, 1/math.Sqrt(math.Sqrt(float64(a.HeadDim)))))
	vc := selftest.RoundHalves(randFloats(rng, capacity*kd, 1))
	gate := randFloats(rng, hd, 2)
	for p := n * kd; p < capacity*kd; p++ {
		kc[p], vc[p] = 1e4, 1e4 // positions past n must not count
	}
	ob := floats(t, d, make([]float32, hd))
	scratch := view(floats(t, d, make([]float32, max(1, shaders.AttnScratchBytes(a, n)/4))))
	tr, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
		return k.AttnDecode(cb, shaders.AttnDecodeIO{AttnIO: shaders.AttnIO{O: view(ob), Q: view(floats(t, d, q)), Gate: view(floats(t, d, gate)), KCache: view(halves(t, d, kc)), VCache: view(halves(t, d, vc)), Shape: a}, Scratch: scratch, N: n})
	})
	if err != nil {
		t.Fatal(err)
	}
	const wantDispatches = 2 // the parts, then their merge
	if tr.Dispatches() != wantDispatches || tr.Levels() != wantDispatches || tr.Events[0].Barrier || tr.Events[len(tr.Events)-1].Barrier {
		t.Errorf("encoded %d dispatches in %d levels (%d events), want %d in %d with no leading or trailing barrier",
			tr.Dispatches(), tr.Levels(), len(tr.Events), wantDispatches, wantDispatches)
	}
	got := readFloats(ob, hd)
	for h := range a.Heads {
		want := selftest.Attend(q, gate, kc, vc, a, h, n)
		for i, w := range want {
			// Scores are fp32 dot products of HeadDim terms whose
			// rounding errors add up like a random walk: ~sqrt(HeadDim)
			// * 2^-24 * |q||k| ~ 1e-6 here; they move the weights by that
			// relative amount, and the online softmax and merge add an
			// fp32 rounding per position (~sqrt(n) * 2^-24 relative).
			// The errors seen are below 2e-7; 1e-5 * (1 + |o|) leaves a
			// margin of 50, while one position too many or too few moves
			// o by ~|v|/n, above 1e-3 for every n tested.
			if g := float64(got[h*a.HeadDim+i]); !within(g, w, attnTol*(1+math.Abs(w))) {
				t.Fatalf("o[%d][%d] = %v, want %v", h, i, g, w)
			}
		}
	}
}

// TestAttnSequence decodes a sequence token by token through AttnPrep and
// AttnDecode in one command buffer, across the block threshold, and
// compares every step with engine/cpu's attention.
func TestAttnSequence(t *testing.T) {
	d, k := mixerKernels(t, true)
	rng := rand.New(rand.NewPCG(15, 16))
	a := shaders.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64, RotaryDim: 16, Theta: 1e7, Eps: 1e-6}
	steps := shaders.AttnBlock + 4
	hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	qg := randFloats(rng, steps*2*hd, 1)
	kin := randFloats(rng, steps*kd, 1)
	vin := randFloats(rng, steps*kd, 1)
	qn := randFloats(rng, a.HeadDim, 0.2)
	kn := randFloats(rng, a.HeadDim, 0.2)
	for i := range qn {
		qn[i] += 1.5
		kn[i] += 1.5
	}
	qgb, kb, vb := floats(t, d, qg), floats(t, d, kin), floats(t, d, vin)
	kc, vc := halves(t, d, make([]float32, steps*kd)), halves(t, d, make([]float32, steps*kd))
	qb, gb := floats(t, d, make([]float32, hd)), floats(t, d, make([]float32, hd))
	ob := floats(t, d, make([]float32, steps*hd))
	scratch := view(floats(t, d, make([]float32, shaders.AttnScratchBytes(a, steps)/4)))
	_, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
		for p := range steps {
			if err := k.AttnPrep(cb, shaders.AttnPrepIO{Q: view(qb), Gate: view(gb), QG: view(qgb).At(4 * p * 2 * hd), K: view(kb).At(4 * p * kd), V: view(vb).At(4 * p * kd), KCache: view(kc), VCache: view(vc), QNorm: view(floats(t, d, qn)), KNorm: view(floats(t, d, kn)), Shape: a, Pos: p}); err != nil {
				return err
			}
			cb.Barrier()
			if err := k.AttnDecode(cb, shaders.AttnDecodeIO{AttnIO: shaders.AttnIO{O: view(ob).At(4 * p * hd), Q: view(qb), Gate: view(gb), KCache: view(kc), VCache: view(vc), Shape: a}, Scratch: scratch, N: p + 1}); err != nil {
				return err
			}
			cb.Barrier()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readFloats(ob, steps*hd)
	// engine/cpu: norms, RoPE, cache append, then causal softmax per head.
	// Every step's K and V rows must be the reference's within fp16
	// rounding (checkHalves; V exactly rounded); the attention reference
	// then attends the rows the kernels cached, since a reference K one
	// fp16 ulp away where the fp32 values straddle a rounding boundary
	// would move scores by more than attnTol.
	kAll, vAll := readHalves(kc, steps*kd), readHalves(vc, steps*kd)
	for i, w := range selftest.RoundHalves(vin) {
		if vAll[i] != w {
			t.Fatalf("v cache[%d] = %v, want %v", i, vAll[i], w)
		}
	}
	q := make([]float32, hd)
	gate := make([]float32, hd)
	for p := range steps {
		for h := range a.Heads {
			src := qg[(p*a.Heads+h)*2*a.HeadDim:]
			refRMSNorm(q[h*a.HeadDim:(h+1)*a.HeadDim], src[:a.HeadDim], qn, a.Eps)
			refRope(q[h*a.HeadDim:(h+1)*a.HeadDim], a.RotaryDim, a.Theta, p)
			copy(gate[h*a.HeadDim:(h+1)*a.HeadDim], src[a.HeadDim:2*a.HeadDim])
		}
		kp := make([]float32, kd)
		for h := range a.KVHeads {
			refRMSNorm(kp[h*a.HeadDim:(h+1)*a.HeadDim], kin[p*kd+h*a.HeadDim:p*kd+(h+1)*a.HeadDim], kn, a.Eps)
			refRope(kp[h*a.HeadDim:(h+1)*a.HeadDim], a.RotaryDim, a.Theta, p)
		}
		checkHalves(t, fmt.Sprintf("step %d: k cache", p), kAll[p*kd:(p+1)*kd], kp, a)
		for h := range a.Heads {
			want := selftest.Attend(q, gate, kAll, vAll, a, h, p+1)
			for i, w := range want {
				// As TestAttnDecode; q and k differ from the reference's
				// by ~1e-7 relative (their norms), which moves scores by
				// less than their own rounding.
				if g := float64(got[p*hd+h*a.HeadDim+i]); !within(g, w, attnTol*(1+math.Abs(w))) {
					t.Fatalf("step %d: o[%d][%d] = %v, want %v", p, h, i, g, w)
				}
			}
		}
	}
}

func TestAttnErrors(t *testing.T) {
	d, k := mixerKernels(t, true)
	a := shaders.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 32, RotaryDim: 8, Theta: 1e4, Eps: 1e-6}
	buf := func(n int) shaders.View { return view(floats(t, d, make([]float32, n))) }
	hd, kd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	const capacity = 300
	kc, vc := view(halves(t, d, make([]float32, capacity*kd))), view(halves(t, d, make([]float32, capacity*kd)))
	prep := func(a shaders.AttnShape, qg shaders.View, pos int) error {
		_, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
			return k.AttnPrep(cb, shaders.AttnPrepIO{Q: buf(hd), Gate: buf(hd), QG: qg, K: buf(kd), V: buf(kd), KCache: kc, VCache: vc, QNorm: buf(a.HeadDim), KNorm: buf(a.HeadDim), Shape: a, Pos: pos})
		})
		return err
	}
	decodeIn := func(a shaders.AttnShape, kc, vc, scratch shaders.View, n int) error {
		_, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
			return k.AttnDecode(cb, shaders.AttnDecodeIO{AttnIO: shaders.AttnIO{O: buf(hd), Q: buf(hd), Gate: buf(hd), KCache: kc, VCache: vc, Shape: a}, Scratch: scratch, N: n})
		})
		return err
	}
	decode := func(a shaders.AttnShape, scratch shaders.View, n int) error { return decodeIn(a, kc, vc, scratch, n) }
	bad := func(f func(*shaders.AttnShape)) shaders.AttnShape {
		b := a
		f(&b)
		return b
	}
	cases := map[string]error{
		"pos past the cache":   prep(a, buf(2*hd), capacity),
		"negative pos":         prep(a, buf(2*hd), -1),
		"short qg":             prep(a, buf(2*hd-1), 0),
		"qg without buffer":    prep(a, shaders.View{}, 0),
		"misaligned qg":        prep(a, buf(2*hd+1).At(2), 0),
		"uneven GQA":           prep(bad(func(s *shaders.AttnShape) { s.KVHeads = 3 }), buf(2*hd), 0),
		"odd rotary dim":       prep(bad(func(s *shaders.AttnShape) { s.RotaryDim = 7 }), buf(2*hd), 0),
		"rotary past the head": prep(bad(func(s *shaders.AttnShape) { s.RotaryDim = 34 }), buf(2*hd), 0),
		"zero theta":           prep(bad(func(s *shaders.AttnShape) { s.Theta = 0 }), buf(2*hd), 0),
		"NaN eps":              prep(bad(func(s *shaders.AttnShape) { s.Eps = float32(math.NaN()) }), buf(2*hd), 0),
		"head dim 48":          decode(bad(func(s *shaders.AttnShape) { s.HeadDim = 48 }), buf(1), 1),
		"head dim 512":         decode(bad(func(s *shaders.AttnShape) { s.HeadDim = 512 }), buf(1), 1),
		"group 32":             decode(bad(func(s *shaders.AttnShape) { s.Heads, s.KVHeads = 32, 1 }), buf(1), 1),
		"no positions":         decode(a, buf(1), 0),
		"n past the cache":     decode(a, buf(shaders.AttnScratchBytes(a, capacity+1)/4), capacity+1),
		"short scratch":        decode(a, buf(shaders.AttnScratchBytes(a, 257)/4-1), 257),
		"no scratch":           decode(a, shaders.View{}, 257),
		"no scratch, 1 block":  decode(a, shaders.View{}, shaders.AttnBlock),
		"misaligned k cache":   decodeIn(a, kc.At(1), vc, buf(1), 1),
		"no v cache":           decodeIn(a, kc, shaders.View{}, buf(1), 1),
	}
	for name, err := range cases {
		if !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("%s: got %v, want gpu.ErrInvalid", name, err)
		}
	}
	// The caches hold capacity positions of fp16 elements, all usable.
	if err := decode(a, buf(shaders.AttnScratchBytes(a, capacity)/4), capacity); err != nil {
		t.Errorf("attending the whole fp16 cache: %v", err)
	}
}
