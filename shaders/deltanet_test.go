package shaders_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"petal/gpu"
	"petal/shaders"
	"petal/shaders/selftest"
)

func TestDeltaConv(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	cases := []struct {
		c, kern int
		race    bool
	}{
		{1, 4, true}, // one channel
		{255, 4, false},
		{256, 2, false}, // one tap of history
		{257, 4, true},  // past one threadgroup
		{8192, 4, false},
		{100, 6, false},
	}
	const steps = 5 // more tokens than the window, so history shifts out
	for _, c := range cases {
		t.Run(fmt.Sprintf("c=%d/kern=%d/race=%v", c.c, c.kern, c.race), func(t *testing.T) {
			d, k := mixerKernels(t, !c.race)
			us := randFloats(rng, steps*c.c, 1)
			w := randFloats(rng, c.c*c.kern, 0.5)
			hist := randFloats(rng, c.c*(c.kern-1), 1)
			ub := floats(t, d, us)
			wb, sb := floats(t, d, w), floats(t, d, hist)
			outb := floats(t, d, make([]float32, steps*c.c))
			_, err := mixerRun(t, d, func(cb gpu.CommandBuffer) error {
				for s := range steps {
					if err := k.DeltaConv(cb, view(outb).At(4*s*c.c), view(ub).At(4*s*c.c), view(sb), view(wb), c.c, c.kern); err != nil {
						return err
					}
					cb.Barrier()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := readFloats(outb, steps*c.c)
			for s := range steps {
				for ch := range c.c {
					acc := selftest.Conv(hist, w, ch, c.kern, us[s*c.c+ch])
					// A sum of kern fp32 products: kern * 2^-24 relative to
					// the sum of their magnitudes (< 10 here).
					if g := float64(got[s*c.c+ch]); !within(g, selftest.Silu(acc), 1e-6*(1+math.Abs(acc))) {
						t.Fatalf("step %d: out[%d] = %v, want %v", s, ch, g, selftest.Silu(acc))
					}
				}
			}
			if gotHist := readFloats(sb, len(hist)); fmt.Sprint(gotHist) != fmt.Sprint(hist) {
				t.Fatalf("state after %d steps = %v, want %v", steps, gotHist, hist)
			}
		})
	}
}

// deltaInputs is tokens tokens of DeltaStep's inputs for one shape, drawn
// alike for TestDeltaStep and TestDeltaScan, with the float64 reference
// starting from the same state.
type deltaInputs struct {
	qkv, z, b, a, negA, dtBias, norm, state []float32
	ref                                     *selftest.Delta
}

func newDeltaInputs(rng *rand.Rand, d shaders.DeltaShape, tokens int) deltaInputs {
	hv := d.ValueHeads * d.ValueDim
	in := deltaInputs{
		qkv: randFloats(rng, tokens*d.Channels(), 1),
		z:   randFloats(rng, tokens*hv, 1.5),
		b:   randFloats(rng, tokens*d.ValueHeads, 2),
		a:   randFloats(rng, tokens*d.ValueHeads, 3),
	}
	in.negA = make([]float32, d.ValueHeads)
	for h := range in.negA {
		in.negA[h] = -float32(math.Exp(rng.Float64()*4 - 2))
	}
	in.dtBias = randFloats(rng, d.ValueHeads, 1)
	// Both branches of softplus: past its threshold, and far below 0.
	in.a[0], in.a[1%len(in.a)] = 30, -30
	in.norm = randFloats(rng, d.ValueDim, 0.3)
	for i := range in.norm {
		in.norm[i]++
	}
	in.state = randFloats(rng, d.ValueHeads*d.KeyDim*d.ValueDim, 0.5)
	in.ref = &selftest.Delta{D: d, NegA: in.negA, DtBias: in.dtBias, Norm: in.norm, State: make([]float64, len(in.state))}
	for i, v := range in.state {
		in.ref.State[i] = float64(v)
	}
	return in
}

// deltaBufs holds deltaInputs' per-token inputs and per-head parameters on
// a device.
type deltaBufs struct {
	qkv, z, b, a, negA, dtBias, norm gpu.Buffer
}

func (in deltaInputs) upload(t testing.TB, dev gpu.Device) deltaBufs {
	return deltaBufs{
		qkv: floats(t, dev, in.qkv), z: floats(t, dev, in.z), b: floats(t, dev, in.b), a: floats(t, dev, in.a),
		negA: floats(t, dev, in.negA), dtBias: floats(t, dev, in.dtBias), norm: floats(t, dev, in.norm),
	}
}

// steps encodes DeltaStep for tokens tokens in order, a barrier after
// each, token s's output at row s of o.
func (b deltaBufs) steps(cb gpu.CommandBuffer, k *shaders.Kernels, d shaders.DeltaShape, o, state gpu.Buffer, tokens int) error {
	hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
	for s := range tokens {
		if err := k.DeltaStep(cb, shaders.DeltaStepIO{O: view(o).At(4 * s * hv), QKV: view(b.qkv).At(4 * s * ch), Z: view(b.z).At(4 * s * hv), B: view(b.b).At(4 * s * d.ValueHeads), A: view(b.a).At(4 * s * d.ValueHeads), State: view(state), NegA: view(b.negA), DtBias: view(b.dtBias), Norm: view(b.norm), Shape: d}); err != nil {
			return err
		}
		cb.Barrier()
	}
	return nil
}

func TestDeltaStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	cases := []struct {
		d    shaders.DeltaShape
		race bool
	}{
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 16, ValueDim: 16, Eps: 1e-6}, true}, // half a simd-group
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 32, Eps: 1e-6}, false},
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 2, KeyDim: 64, ValueDim: 48, Eps: 1e-5}, true},      // 2 row slices, ragged simd-groups
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 16, Eps: 1e-6}, false},    // simd-groups span slices
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, Eps: 1e-6}, true},    // the model's head dims
		{shaders.DeltaShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, Eps: 1e-6}, false}, // the model's layer
	}
	const steps = 3
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/race=%v", c.d.KeyHeads, c.d.ValueHeads, c.d.KeyDim, c.d.ValueDim, c.race), func(t *testing.T) {
			dev, k := mixerKernels(t, !c.race)
			d := c.d
			hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
			in := newDeltaInputs(rng, d, steps)
			qkv, z, bs, as, state, ref := in.qkv, in.z, in.b, in.a, in.state, in.ref
			bufs := in.upload(t, dev)
			sb := floats(t, dev, state)
			ob := floats(t, dev, make([]float32, steps*hv))
			tr, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error { return bufs.steps(cb, k, d, ob, sb, steps) })
			if err != nil {
				t.Fatal(err)
			}
			if tr.Dispatches() != steps {
				t.Errorf("%d dispatches for %d steps", tr.Dispatches(), steps)
			}
			got := readFloats(ob, steps*hv)
			for s := range steps {
				want := ref.Step(qkv[s*ch:], z[s*hv:], bs[s*d.ValueHeads:], as[s*d.ValueHeads:])
				for i, w := range want {
					// The fp32 sums over KeyDim terms err like a random
					// walk (~sqrt(128) * 2^-24 ~ 1e-6 of their terms'
					// size); the RMSNorm then scales o by 1/rms(o), which
					// magnifies that error in a head whose o cancelled to
					// small values. Seen: up to 1.3e-5 on the model's
					// layer; 5e-5 * (1 + |o|) keeps a margin of ~4.
					if g := float64(got[s*hv+i]); !within(g, w, 5e-5*(1+math.Abs(w))) {
						t.Fatalf("step %d: o[%d][%d] = %v, want %v", s, i/d.ValueDim, i%d.ValueDim, g, w)
					}
				}
			}
			for i, g := range readFloats(sb, len(state)) {
				// |S| ~ 1 and no normalisation: the ~1e-6 relative
				// error of kv and the update's own rounding (seen: 3e-7
				// after 3 steps).
				if w := ref.State[i]; !within(float64(g), w, 2e-6*(1+math.Abs(w))) {
					t.Fatalf("state[%d][%d][%d] = %v, want %v", i/(d.KeyDim*d.ValueDim), i/d.ValueDim%d.KeyDim, i%d.ValueDim, g, w)
				}
			}
		})
	}
}

func TestDeltaErrors(t *testing.T) {
	dev, k := mixerKernels(t, true)
	buf := func(n int) shaders.View { return view(floats(t, dev, make([]float32, n))) }
	good := shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 32, Eps: 1e-6}
	step := func(d shaders.DeltaShape, state shaders.View) error {
		n := max(1, d.ValueHeads*d.ValueDim)
		_, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
			return k.DeltaStep(cb, shaders.DeltaStepIO{O: buf(n), QKV: buf(max(1, d.Channels())), Z: buf(n), B: buf(max(1, d.ValueHeads)), A: buf(max(1, d.ValueHeads)), State: state, NegA: buf(max(1, d.ValueHeads)), DtBias: buf(max(1, d.ValueHeads)), Norm: buf(max(1, d.ValueDim)), Shape: d})
		})
		return err
	}
	conv := func(c, kern int, state shaders.View) error {
		_, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
			return k.DeltaConv(cb, buf(max(1, c)), buf(max(1, c)), state, buf(max(1, c*kern)), c, kern)
		})
		return err
	}
	with := func(f func(*shaders.DeltaShape)) shaders.DeltaShape {
		d := good
		f(&d)
		return d
	}
	stepConv := func(d shaders.DeltaShape, convState shaders.View) error {
		n, hs := d.ValueHeads*d.ValueDim, d.ValueHeads
		_, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
			return k.DeltaStepConv(cb, shaders.DeltaStepConvIO{
				DeltaStepIO: shaders.DeltaStepIO{
					O: buf(n), QKV: buf(d.Channels()), Z: buf(n), B: buf(hs), A: buf(hs), State: buf(hs * d.KeyDim * d.ValueDim),
					NegA: buf(hs), DtBias: buf(hs), Norm: buf(d.ValueDim), Shape: d,
				},
				ConvState: convState, ConvW: buf(d.Channels() * max(1, d.ConvKernel)),
			})
		})
		return err
	}
	shift := func(c, kern int, state shaders.View) error {
		_, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error { return k.DeltaConvShift(cb, buf(max(1, c)), state, c, kern) })
		return err
	}
	withConv := with(func(d *shaders.DeltaShape) { d.ConvKernel = 4 })
	ch := withConv.Channels()
	cases := map[string]error{
		"step conv without taps":       stepConv(good, buf(ch)),
		"step conv short conv state":   stepConv(withConv, buf(3*ch-1)),
		"step conv conv state no data": stepConv(withConv, shaders.View{}),
		"shift without taps":           shift(8, 1, buf(8)),
		"shift short state":            shift(8, 4, buf(8*3-1)),
		"uneven heads":                 step(with(func(d *shaders.DeltaShape) { d.ValueHeads = 3 }), buf(3*32*32)),
		"no key heads":                 step(with(func(d *shaders.DeltaShape) { d.KeyHeads = 0 }), buf(4*32*32)),
		"key dim 48":                   step(with(func(d *shaders.DeltaShape) { d.KeyDim = 48 }), buf(4*48*32)),
		"too many threads":             step(with(func(d *shaders.DeltaShape) { d.KeyDim, d.ValueDim = 256, 256 }), buf(4*256*256)),
		"negative eps":                 step(with(func(d *shaders.DeltaShape) { d.Eps = -1 }), buf(4*32*32)),
		"short state":                  step(good, buf(4*32*32-1)),
		"state without data":           step(good, shaders.View{}),
		"conv without taps":            conv(8, 1, buf(8)),
		"conv short state":             conv(8, 4, buf(8*3-1)),
		"conv of no channels":          conv(0, 4, buf(1)),
	}
	for name, err := range cases {
		if !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("%s: got %v, want gpu.ErrInvalid", name, err)
		}
	}
	if err := step(good, buf(4*32*32)); err != nil {
		t.Errorf("good shape: %v", err)
	}
	if err := stepConv(withConv, buf(3*ch)); err != nil {
		t.Errorf("good shape, conv folded in: %v", err)
	}
	if err := shift(8, 4, buf(8*3)); err != nil {
		t.Errorf("good conv shift: %v", err)
	}
}

// DeltaStepConv and DeltaConvShift over several tokens write what DeltaConv
// then DeltaStep write, bit for bit: the outputs, the recurrent state and
// the conv state (TestDeltaConv and TestDeltaStep hold those to the
// reference).
func TestDeltaStepConv(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	cases := []struct {
		d    shaders.DeltaShape
		race bool
	}{
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 32, ConvKernel: 4, Eps: 1e-6}, true}, // two value heads read each key head's channels
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 64, ValueDim: 48, ConvKernel: 2, Eps: 1e-5}, true},
		{shaders.DeltaShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4, Eps: 1e-6}, false}, // the model's layer
	}
	const steps = 5 // more tokens than the conv window
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/kern=%d", c.d.KeyHeads, c.d.ValueHeads, c.d.KeyDim, c.d.ValueDim, c.d.ConvKernel), func(t *testing.T) {
			dev, k := mixerKernels(t, !c.race)
			d := c.d
			hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
			in := newDeltaInputs(rng, d, steps)
			bufs := in.upload(t, dev)
			w := floats(t, dev, randFloats(rng, ch*d.ConvKernel, 0.5))
			hist := randFloats(rng, ch*(d.ConvKernel-1), 1)
			fusedConv, conv := floats(t, dev, hist), floats(t, dev, hist)
			fusedState, state := floats(t, dev, in.state), floats(t, dev, in.state)
			fusedO, o := floats(t, dev, make([]float32, steps*hv)), floats(t, dev, make([]float32, steps*hv))
			convOut := floats(t, dev, make([]float32, ch))
			tr, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
				for s := range steps {
					u := view(bufs.qkv).At(4 * s * ch)
					err := k.DeltaStepConv(cb, shaders.DeltaStepConvIO{
						DeltaStepIO: shaders.DeltaStepIO{
							O: view(fusedO).At(4 * s * hv), QKV: u,
							Z: view(bufs.z).At(4 * s * hv), B: view(bufs.b).At(4 * s * d.ValueHeads), A: view(bufs.a).At(4 * s * d.ValueHeads),
							State: view(fusedState), NegA: view(bufs.negA), DtBias: view(bufs.dtBias), Norm: view(bufs.norm), Shape: d,
						},
						ConvState: view(fusedConv), ConvW: view(w),
					})
					if err != nil {
						return err
					}
					cb.Barrier()
					if err := k.DeltaConvShift(cb, u, view(fusedConv), ch, d.ConvKernel); err != nil {
						return err
					}
					cb.Barrier()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Dispatches() != 2*steps || tr.Levels() != 2*steps {
				t.Errorf("%d dispatches in %d levels for %d steps", tr.Dispatches(), tr.Levels(), steps)
			}
			_, err = mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
				for s := range steps {
					if err := k.DeltaConv(cb, view(convOut), view(bufs.qkv).At(4*s*ch), view(conv), view(w), ch, d.ConvKernel); err != nil {
						return err
					}
					cb.Barrier()
					if err := k.DeltaStep(cb, shaders.DeltaStepIO{O: view(o).At(4 * s * hv), QKV: view(convOut), Z: view(bufs.z).At(4 * s * hv), B: view(bufs.b).At(4 * s * d.ValueHeads), A: view(bufs.a).At(4 * s * d.ValueHeads), State: view(state), NegA: view(bufs.negA), DtBias: view(bufs.dtBias), Norm: view(bufs.norm), Shape: d}); err != nil {
						return err
					}
					cb.Barrier()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range []struct {
				what      string
				got, want gpu.Buffer
				n         int
			}{{"o", fusedO, o, steps * hv}, {"state", fusedState, state, len(in.state)}, {"conv state", fusedConv, conv, len(hist)}} {
				got, want := readFloats(b.got, b.n), readFloats(b.want, b.n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s[%d] = %v, unfused %v", b.what, i, got[i], want[i])
					}
				}
			}
		})
	}
}
