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

// deltaInputs is tokens tokens of a DeltaNet step's inputs for one shape,
// drawn alike for TestDeltaStepConv and TestDeltaScan, with the float64 reference
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

func TestDeltaErrors(t *testing.T) {
	dev, k := mixerKernels(t, true)
	buf := func(n int) shaders.View { return view(floats(t, dev, make([]float32, n))) }
	good := shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 32, ConvKernel: 4, Eps: 1e-6}
	ch := good.Channels()
	run := func(d shaders.DeltaShape, state, convState shaders.View) error {
		n, hs := max(1, d.ValueHeads*d.ValueDim), max(1, d.ValueHeads)
		_, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
			return k.DeltaStepConv(cb, shaders.DeltaStepConvIO{
				DeltaStepIO: shaders.DeltaStepIO{
					O: buf(n), QKV: buf(max(1, d.Channels())), Z: buf(n), B: buf(hs), A: buf(hs), State: state,
					NegA: buf(hs), DtBias: buf(hs), Norm: buf(max(1, d.ValueDim)), Shape: d,
				},
				ConvState: convState, ConvW: buf(max(1, d.Channels()*d.ConvKernel)),
			})
		})
		return err
	}
	// step varies the step's shape and state, stepConv the conv's.
	step := func(d shaders.DeltaShape, state shaders.View) error {
		return run(d, state, buf(max(1, d.Channels()*(d.ConvKernel-1))))
	}
	stepConv := func(d shaders.DeltaShape, convState shaders.View) error {
		return run(d, buf(d.ValueHeads*d.KeyDim*d.ValueDim), convState)
	}
	with := func(f func(*shaders.DeltaShape)) shaders.DeltaShape {
		d := good
		f(&d)
		return d
	}
	shift := func(c, kern int, state shaders.View) error {
		_, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error { return k.DeltaConvShift(cb, buf(max(1, c)), state, c, kern) })
		return err
	}
	cases := map[string]error{
		"step conv one tap":             stepConv(with(func(d *shaders.DeltaShape) { d.ConvKernel = 1 }), buf(ch)),
		"step conv short conv state":    stepConv(good, buf(3*ch-1)),
		"step conv conv state no data":  stepConv(good, shaders.View{}),
		"shift without taps":            shift(8, 1, buf(8)),
		"shift short state":             shift(8, 4, buf(8*3-1)),
		"uneven heads":                  step(with(func(d *shaders.DeltaShape) { d.ValueHeads = 3 }), buf(3*32*32)),
		"no key heads":                  step(with(func(d *shaders.DeltaShape) { d.KeyHeads = 0 }), buf(4*32*32)),
		"key dim 48":                    step(with(func(d *shaders.DeltaShape) { d.KeyDim = 48 }), buf(4*48*32)),
		"too many threads":              step(with(func(d *shaders.DeltaShape) { d.KeyDim, d.ValueDim = 256, 256 }), buf(4*256*256)),
		"past the declared threadgroup": step(with(func(d *shaders.DeltaShape) { d.KeyDim, d.ValueDim = 128, 160 }), buf(4*128*160)), // 640 threads, within Metal's 1024
		"negative eps":                  step(with(func(d *shaders.DeltaShape) { d.Eps = -1 }), buf(4*32*32)),
		"short state":                   step(good, buf(4*32*32-1)),
		"state without data":            step(good, shaders.View{}),
		"shift of no channels":          shift(0, 4, buf(1)),
	}
	for name, err := range cases {
		if !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("%s: got %v, want gpu.ErrInvalid", name, err)
		}
	}
	if err := step(good, buf(4*32*32)); err != nil {
		t.Errorf("good shape: %v", err)
	}
	if err := shift(8, 4, buf(8*3)); err != nil {
		t.Errorf("good conv shift: %v", err)
	}
}

// DeltaStepConv then DeltaConvShift over more tokens than the conv window
// against the float64 reference fed the conv's output (the conv in
// float64, rounded to fp32 as the GPU stores nothing between them): the
// outputs, the recurrent state, and the conv state exactly.
func TestDeltaStepConv(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	cases := []struct {
		d    shaders.DeltaShape
		race bool
	}{
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 16, ValueDim: 16, ConvKernel: 4, Eps: 1e-6}, true},      // half a simd-group
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 32, ConvKernel: 4, Eps: 1e-6}, true},      // two value heads read each key head's channels
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 2, KeyDim: 64, ValueDim: 48, ConvKernel: 2, Eps: 1e-5}, true},      // 2 row slices, ragged simd-groups, one tap of history
		{shaders.DeltaShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 16, ConvKernel: 4, Eps: 1e-6}, false},    // simd-groups span slices
		{shaders.DeltaShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, ConvKernel: 4, Eps: 1e-6}, true},    // the model's head dims
		{shaders.DeltaShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4, Eps: 1e-6}, false}, // the model's layer
	}
	const steps = 4 // more tokens than the conv window, so history shifts out
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/kern=%d/race=%v", c.d.KeyHeads, c.d.ValueHeads, c.d.KeyDim, c.d.ValueDim, c.d.ConvKernel, c.race), func(t *testing.T) {
			dev, k := mixerKernels(t, !c.race)
			d := c.d
			hv, ch := d.ValueHeads*d.ValueDim, d.Channels()
			in := newDeltaInputs(rng, d, steps)
			bufs := in.upload(t, dev)
			w := randFloats(rng, ch*d.ConvKernel, 0.5)
			hist := randFloats(rng, ch*(d.ConvKernel-1), 1)
			wb, conv := floats(t, dev, w), floats(t, dev, hist)
			state := floats(t, dev, in.state)
			o := floats(t, dev, make([]float32, steps*hv))
			tr, err := mixerRun(t, dev, func(cb gpu.CommandBuffer) error {
				for s := range steps {
					u := view(bufs.qkv).At(4 * s * ch)
					err := k.DeltaStepConv(cb, shaders.DeltaStepConvIO{
						DeltaStepIO: shaders.DeltaStepIO{
							O: view(o).At(4 * s * hv), QKV: u,
							Z: view(bufs.z).At(4 * s * hv), B: view(bufs.b).At(4 * s * d.ValueHeads), A: view(bufs.a).At(4 * s * d.ValueHeads),
							State: view(state), NegA: view(bufs.negA), DtBias: view(bufs.dtBias), Norm: view(bufs.norm), Shape: d,
						},
						ConvState: view(conv), ConvW: view(wb),
					})
					if err != nil {
						return err
					}
					cb.Barrier()
					if err := k.DeltaConvShift(cb, u, view(conv), ch, d.ConvKernel); err != nil {
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
			got := readFloats(o, steps*hv)
			h := append([]float32(nil), hist...)
			qkv := make([]float32, ch)
			for s := range steps {
				for c := range ch {
					qkv[c] = float32(selftest.Silu(selftest.Conv(h, w, c, d.ConvKernel, in.qkv[s*ch+c])))
				}
				want := in.ref.Step(qkv, in.z[s*hv:], in.b[s*d.ValueHeads:], in.a[s*d.ValueHeads:])
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
			for i, g := range readFloats(state, len(in.state)) {
				// |S| ~ 1 and no normalisation: the ~1e-6 relative
				// error of kv and the update's own rounding (seen: 3e-7
				// after 3 steps).
				if w := in.ref.State[i]; !within(float64(g), w, 2e-6*(1+math.Abs(w))) {
					t.Fatalf("state[%d][%d][%d] = %v, want %v", i/(d.KeyDim*d.ValueDim), i/d.ValueDim%d.KeyDim, i%d.ValueDim, g, w)
				}
			}
			if gotHist := readFloats(conv, len(h)); fmt.Sprint(gotHist) != fmt.Sprint(h) {
				t.Fatalf("conv state after %d steps = %v, want %v", steps, gotHist[:min(len(h), 8)], h[:min(len(h), 8)])
			}
		})
	}
}
