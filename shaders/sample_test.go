package shaders_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"petal/engine"
	"petal/engine/sample"
	"petal/engine/sample/chisq"
	"petal/gpu"
	"petal/shaders"
)

// sampleRig holds one vocabulary's logits, mask and a request state on a
// device, and runs steps of Kernels.Sample against them.
type sampleRig struct {
	k       *shaders.Kernels
	n       int
	allowed int
	logits  []float32
	views   shaders.Sampling
	// bias is the logit bias of the requests start begins.
	bias sample.LogitBias
}

func newSampleRig(t testing.TB, k *shaders.Kernels, logits []float32, allowed int) *sampleRig {
	t.Helper()
	d := k.Device()
	n := len(logits)
	mask := denseBuf(t, d, 0, make([]byte, shaders.SampleMaskBytes(n)))
	if err := shaders.WriteSampleMask(mask.Buf.Contents(), n, allowed); err != nil {
		t.Fatal(err)
	}
	return &sampleRig{k: k, n: n, allowed: allowed, logits: logits, views: shaders.Sampling{
		Logits: denseBuf(t, d, 0, denseF32s(logits)), N: n, Mask: mask,
		State: denseBuf(t, d, 0, make([]byte, shaders.SampleStateBytes(n))),
	}}
}

// start begins a request.
func (r *sampleRig) start(t testing.TB, p sample.Params, prompt []int) {
	t.Helper()
	if err := shaders.WriteSampleState(r.views.State.Buf.Contents(), r.n, seeded(p), r.bias, prompt); err != nil {
		t.Fatal(err)
	}
}

// steps runs count samples in one command buffer, a barrier between each,
// each writing its own token slot and, with top >= 0, its own record.
func (r *sampleRig) steps(t testing.TB, count, top int) ([]uint32, []shaders.SampleRecord) {
	t.Helper()
	d := r.k.Device()
	slots := denseBuf(t, d, 0, make([]byte, 4*count))
	var recs shaders.View
	if top >= 0 {
		recs = denseBuf(t, d, 0, make([]byte, shaders.SampleRecordBytes*count))
	}
	denseRun(t, r.k, func(cb gpu.CommandBuffer) error {
		for j := range count {
			s := r.views
			s.Out = slots.At(4 * j)
			if top >= 0 {
				s.Record, s.TopLogprobs = recs.At(shaders.SampleRecordBytes*j), top
			}
			if err := r.k.Sample(cb, s); err != nil {
				return err
			}
			cb.Barrier()
		}
		return nil
	})
	var out []shaders.SampleRecord
	for j := range count {
		if top < 0 {
			break
		}
		rec, err := shaders.ReadSampleRecord(recs.Buf.Contents()[shaders.SampleRecordBytes*j:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return denseReadU32(slots, count), out
}

// seeded is p with seed 0 when it has none, as the GPU needs one and the
// CPU reference must draw from the same.
func seeded(p sample.Params) sample.Params {
	if p.Seed == nil {
		p.Seed = new(uint64(0))
	}
	return p
}

// cpuSteps runs the CPU reference for count steps over the same row.
func (r *sampleRig) cpuSteps(t testing.TB, p sample.Params, prompt []int, count, top int) ([]int, []sample.Logprobs) {
	t.Helper()
	s, err := sample.New(seeded(p), sample.Vocab{Size: r.n, TokenizerSize: r.allowed}, prompt)
	if err == nil {
		err = s.SetLogitBias(r.bias)
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	var lps []sample.Logprobs
	for range count {
		id, lp, err := s.NextLogprobs(slices.Clone(r.logits), max(top, 0))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		lps = append(lps, lp)
	}
	return ids, lps
}

// sampleCases cover each path of the kernel: greedy, top-k within the
// list, cuts inside the list, and exact cuts past it (top-k by count, top-p
// by mass, min-p alone, no filter at all), with and without penalties.
var sampleCases = []struct {
	name string
	p    sample.Params
}{
	{"greedy", sample.Params{TopP: 1, RepetitionPenalty: 1}},
	{"top_k=1", sample.Params{Temperature: 1, TopK: 1, TopP: 1, RepetitionPenalty: 1}},
	{"T=0.7/top_p=0.9", sample.Params{Temperature: 0.7, TopP: 0.9, RepetitionPenalty: 1}},
	{"card_thinking", sample.Params{Temperature: 1, TopK: 20, TopP: 0.95, PresencePenalty: 1.5, RepetitionPenalty: 1}},
	{"card_coding/min_p", sample.Params{Temperature: 0.6, TopK: 20, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1}},
	{"top_k=1000/min_p", sample.Params{Temperature: 0.8, TopK: 1000, TopP: 1, MinP: 0.001, RepetitionPenalty: 1}},
	{"top_k=300/top_p=0.8", sample.Params{Temperature: 1.5, TopK: 300, TopP: 0.8, RepetitionPenalty: 1}},
	{"min_p=0.01", sample.Params{Temperature: 1, TopP: 1, MinP: 0.01, RepetitionPenalty: 1}},
	{"no_filter", sample.Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
	{"T=3/top_p=0.5", sample.Params{Temperature: 3, TopP: 0.5, RepetitionPenalty: 1}},
	{"penalties", sample.Params{Temperature: 0.9, TopK: 40, TopP: 0.9, RepetitionPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: -0.5}},
}

// TestSampleMatchesCPU runs every case on the GPU and through
// engine/sample's Sampler with the same seed over the same rows: the same
// ids, step after step (the generator, the cuts and the id-order draw
// agree; float32 against float64 could differ only for a u within about
// 1e-7 of a boundary), and logprobs within 1e-4.
func TestSampleMatchesCPU(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(3, 4))
	rows := []struct {
		n, allowed, steps int
		sd                float64
		raced             bool // on the race-checking device
	}{
		{400, 390, 5, 1, true},
		{3000, 2990, 8, 1.5, false},
		{248320, 248077, 3, 2, false}, // Qwen3.6's vocabulary and tokenizer
	}
	for ri, row := range rows {
		logits := denseRand(rng, row.n, row.sd)
		logits[rng.IntN(row.allowed)] += 6 // a peak, as real logits have
		logits[row.allowed] = 50           // masked: must never win
		prompt := []int{5, 17, 17, row.allowed - 1}
		for ci, c := range sampleCases {
			t.Run(fmt.Sprintf("n=%d/%s", row.n, c.name), func(t *testing.T) {
				k, _ := densePick(race, fast, row.raced)
				rig := newSampleRig(t, k, logits, row.allowed)
				c.p.Seed = new(uint64(100*ri + ci))
				rig.start(t, c.p, prompt)
				got, recs := rig.steps(t, row.steps, 5)
				want, lps := rig.cpuSteps(t, c.p, prompt, row.steps, 5)
				for j := range want {
					if got[j] != uint32(want[j]) {
						t.Fatalf("step %d: GPU picked %d, CPU %d (GPU %v, CPU %v)", j, got[j], want[j], got, want)
					}
					checkRecord(t, j, recs[j], want[j], lps[j])
				}
			})
		}
	}
}

// TestSampleBiasMatchesCPU runs every case with a logit bias on the GPU
// and through engine/sample's Sampler with the same seed: the same ids and
// logprobs. The bias bans the row's peak (-100), lifts ids past it and
// into the list, and falls on prompt ids whose penalised logit shows the
// order (bias first): id 17's (6 + 1.25) / 1.3 against 6 / 1.3 + 1.25, and
// id 5's -0.5 that the bias turns positive, so the repetition penalty
// divides it (6 / 1.3) instead of multiplying it (-0.65 + 6.5).
func TestSampleBiasMatchesCPU(t *testing.T) {
	race, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(7, 8))
	rows := []struct {
		n, allowed, steps int
		raced             bool
	}{
		{400, 390, 4, true},
		{248320, 248077, 3, false}, // Qwen3.6's vocabulary and tokenizer
	}
	for ri, row := range rows {
		logits := denseRand(rng, row.n, 1.5)
		peak := 20 + rng.IntN(row.allowed-40)
		logits[peak] += 6
		logits[row.allowed] = 50 // masked: must never win
		prompt := []int{5, 17, 17, row.allowed - 1}
		logits[5], logits[17] = -0.5, 6
		bias := sample.LogitBias{
			peak: -sample.MaxLogitBias, 5: 6.5, 17: 1.25, 11: 2.5,
			row.allowed - 1: -0.75, row.allowed - 2: 7,
		}
		for ci, c := range sampleCases {
			t.Run(fmt.Sprintf("n=%d/%s", row.n, c.name), func(t *testing.T) {
				k, _ := densePick(race, fast, row.raced)
				rig := newSampleRig(t, k, logits, row.allowed)
				rig.bias = bias
				c.p.Seed = new(uint64(300*ri + ci))
				rig.start(t, c.p, prompt)
				got, recs := rig.steps(t, row.steps, 5)
				want, lps := rig.cpuSteps(t, c.p, prompt, row.steps, 5)
				for j := range want {
					if got[j] != uint32(want[j]) {
						t.Fatalf("step %d: GPU picked %d, CPU %d (GPU %v, CPU %v)", j, got[j], want[j], got, want)
					}
					if want[j] == peak {
						t.Fatalf("step %d: the banned peak %d was picked", j, peak)
					}
					checkRecord(t, j, recs[j], want[j], lps[j])
				}
			})
		}
	}
}

// checkRecord compares a GPU logprobs record with the CPU's.
func checkRecord(t *testing.T, step int, rec shaders.SampleRecord, id int, lp sample.Logprobs) {
	t.Helper()
	const tol = 1e-4
	if rec.ID != uint32(id) || math.Abs(float64(rec.Logprob)-lp.Logprob) > tol || int(rec.Top) != len(lp.Top) {
		t.Fatalf("step %d: record id %d logprob %v top %d, want %d %v %d", step, rec.ID, rec.Logprob, rec.Top, id, lp.Logprob, len(lp.Top))
	}
	for i, e := range lp.Top {
		if rec.TopIDs[i] != uint32(e.ID) || math.Abs(float64(rec.TopLogprobs[i])-e.Logprob) > tol {
			t.Fatalf("step %d: top %d is %d %v, want %d %v", step, i, rec.TopIDs[i], rec.TopLogprobs[i], e.ID, e.Logprob)
		}
	}
	for i := len(lp.Top); i < shaders.SampleMaxTopLogprobs; i++ {
		if rec.TopIDs[i] != shaders.SampleNoToken || !math.IsInf(float64(rec.TopLogprobs[i]), -1) {
			t.Fatalf("step %d: unused top %d holds %d %v", step, i, rec.TopIDs[i], rec.TopLogprobs[i])
		}
	}
}

// TestSampleArgsLayout compares the sampler's structs and constants in
// args.h with their Go mirrors.
func TestSampleArgsLayout(t *testing.T) {
	const values = `
        sizeof(SampleArgs), OFF(SampleArgs, n), OFF(SampleArgs, top_logprobs),
        sizeof(SampleHeader), OFF(SampleHeader, inv_temperature), OFF(SampleHeader, top_p), OFF(SampleHeader, min_p),
        OFF(SampleHeader, presence), OFF(SampleHeader, frequency), OFF(SampleHeader, repetition), OFF(SampleHeader, top_k),
        OFF(SampleHeader, seed_lo), OFF(SampleHeader, seed_hi), OFF(SampleHeader, counter), OFF(SampleHeader, penalized), OFF(SampleHeader, biased),
        sizeof(SampleRecord), OFF(SampleRecord, id), OFF(SampleRecord, logprob), OFF(SampleRecord, top), OFF(SampleRecord, top_ids), OFF(SampleRecord, top_logprobs),
        SAMPLE_MAX_THREADS, SAMPLE_MAX_SIMDGROUPS, SAMPLE_LIST, SAMPLE_MAX_TOP_LOGPROBS, SAMPLE_RADIX_BITS, SAMPLE_NO_TOKEN, SAMPLE_BAD_LOGITS, SAMPLE_MAX_BIAS,
`
	var (
		a shaders.SampleArgs
		h shaders.SampleHeader
		r shaders.SampleRecord
	)
	checkLayout(t, device(t), values, []uintptr{
		unsafe.Sizeof(a), unsafe.Offsetof(a.N), unsafe.Offsetof(a.TopLogprobs),
		unsafe.Sizeof(h), unsafe.Offsetof(h.InvTemperature), unsafe.Offsetof(h.TopP), unsafe.Offsetof(h.MinP),
		unsafe.Offsetof(h.Presence), unsafe.Offsetof(h.Frequency), unsafe.Offsetof(h.Repetition), unsafe.Offsetof(h.TopK),
		unsafe.Offsetof(h.SeedLo), unsafe.Offsetof(h.SeedHi), unsafe.Offsetof(h.Counter), unsafe.Offsetof(h.Penalized), unsafe.Offsetof(h.Biased),
		unsafe.Sizeof(r), unsafe.Offsetof(r.ID), unsafe.Offsetof(r.Logprob), unsafe.Offsetof(r.Top), unsafe.Offsetof(r.TopIDs), unsafe.Offsetof(r.TopLogprobs),
		shaders.SampleMaxThreads, shaders.SampleMaxSimdgroups, shaders.SampleList, shaders.SampleMaxTopLogprobs, shaders.SampleRadixBits, shaders.SampleNoToken, shaders.SampleBadLogits, shaders.SampleMaxBias,
	})
}

// TestSampleInvalid: every bad setting, size or view is refused with
// gpu.ErrInvalid before anything is encoded.
func TestSampleInvalid(t *testing.T) {
	k, _ := denseDevices(t)
	d := k.Device()
	const n = 100
	state := make([]byte, shaders.SampleStateBytes(n))
	ok := sample.Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1, Seed: new(uint64(1))}
	for _, c := range []struct {
		name   string
		edit   func(p *sample.Params)
		n      int
		prompt []int
	}{
		{"temperature<0", func(p *sample.Params) { p.Temperature = -1 }, n, nil},
		{"temperature NaN", func(p *sample.Params) { p.Temperature = math.NaN() }, n, nil},
		{"top_k<0", func(p *sample.Params) { p.TopK = -1 }, n, nil},
		{"top_p=0", func(p *sample.Params) { p.TopP = 0 }, n, nil},
		{"top_p>1", func(p *sample.Params) { p.TopP = 1.5 }, n, nil},
		{"min_p>1", func(p *sample.Params) { p.MinP = 2 }, n, nil},
		{"presence>2", func(p *sample.Params) { p.PresencePenalty = 2.5 }, n, nil},
		{"frequency Inf", func(p *sample.Params) { p.FrequencyPenalty = math.Inf(-1) }, n, nil},
		{"repetition=0", func(p *sample.Params) { p.RepetitionPenalty = 0 }, n, nil},
		{"top_k past int32", func(p *sample.Params) { p.TopK = math.MaxInt32 + 1 }, n, nil},
		{"no seed", func(p *sample.Params) { p.Seed = nil }, n, nil},
		{"prompt id", func(p *sample.Params) {}, n, []int{3, n}},
		{"negative prompt id", func(p *sample.Params) {}, n, []int{-1}},
		{"vocabulary 0", func(p *sample.Params) {}, 0, nil},
		{"state too small", func(p *sample.Params) {}, n + 1, nil},
	} {
		p := ok
		c.edit(&p)
		if err := shaders.WriteSampleState(state, c.n, p, nil, c.prompt); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("WriteSampleState %s: %v, want gpu.ErrInvalid", c.name, err)
		}
	}
	// A vocabulary wider than the most biased ids, so only their count
	// is wrong in the last case.
	const wide = 2 * shaders.SampleMaxBias
	tooMany := sample.LogitBias{}
	for id := range shaders.SampleMaxBias + 1 {
		tooMany[id] = 1
	}
	for name, b := range map[string]sample.LogitBias{
		"bias id past the vocabulary": {wide: 1}, "bias id -1": {-1: 1}, "bias 100.5": {3: 100.5}, "bias NaN": {3: math.NaN()},
		"bias of 301 ids": tooMany,
	} {
		if err := shaders.WriteSampleState(make([]byte, shaders.SampleStateBytes(wide)), wide, ok, b, nil); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("WriteSampleState %s: %v, want gpu.ErrInvalid", name, err)
		}
	}
	if err := shaders.WriteSampleState(state, n, ok, sample.LogitBias{0: -100, n - 1: 100}, []int{0, n - 1}); err != nil {
		t.Fatalf("valid state refused: %v", err)
	}
	mask := make([]byte, shaders.SampleMaskBytes(n))
	for _, allowed := range []int{0, n + 1} {
		if err := shaders.WriteSampleMask(mask, n, allowed); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("WriteSampleMask allowed %d: %v", allowed, err)
		}
	}
	if err := shaders.WriteSampleMask(mask[:4], n, n); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("short mask: %v", err)
	}
	if _, err := shaders.ReadSampleRecord(make([]byte, 8)); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("short record: %v", err)
	}

	buf := func(bytes int) shaders.View { return denseBuf(t, d, 0, make([]byte, bytes)) }
	good := shaders.Sampling{
		Logits: buf(4 * n), N: n, Mask: buf(shaders.SampleMaskBytes(n)),
		State: buf(shaders.SampleStateBytes(n)), Out: buf(4),
	}
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(s *shaders.Sampling)
	}{
		{"n=0", func(s *shaders.Sampling) { s.N = 0 }},
		{"n past logits", func(s *shaders.Sampling) { s.N = n + 1 }},
		{"short mask", func(s *shaders.Sampling) { s.Mask = buf(4) }},
		{"short state", func(s *shaders.Sampling) { s.State = buf(shaders.SampleStateBytes(n) - 4) }},
		{"no out", func(s *shaders.Sampling) { s.Out = shaders.View{} }},
		{"misaligned out", func(s *shaders.Sampling) { s.Out = buf(8).At(2) }},
		{"short record", func(s *shaders.Sampling) { s.Record = buf(16) }},
		{"top_logprobs 21", func(s *shaders.Sampling) { s.Record, s.TopLogprobs = buf(shaders.SampleRecordBytes), 21 }},
		{"top_logprobs -1", func(s *shaders.Sampling) { s.Record, s.TopLogprobs = buf(shaders.SampleRecordBytes), -1 }},
	} {
		s := good
		c.edit(&s)
		if err := k.Sample(cb, s); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("Sample %s: %v, want gpu.ErrInvalid", c.name, err)
		}
	}
}

// TestSamplePhiloxMatchesGo runs sample.metal's Philox4x32-10 on many
// counters and keys through the sim and compares every word with
// engine/sample's, and the draw word of Draw(seed, counter) with the
// kernel's (counter, 0, 0, 0) / (seed low, seed high) layout.
func TestSamplePhiloxMatchesGo(t *testing.T) {
	d := device(t)
	src, err := shaders.Expand("philox_probe.metal", `#include "sample.metal"
kernel void philox_probe(device const uint* in [[buffer(0)]], device uint* out [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
    const uint4 r = sample_philox(uint4(in[6 * i], in[6 * i + 1], in[6 * i + 2], in[6 * i + 3]),
                                  uint2(in[6 * i + 4], in[6 * i + 5]));
    out[4 * i] = r.x;
    out[4 * i + 1] = r.y;
    out[4 * i + 2] = r.z;
    out[4 * i + 3] = r.w;
}
`)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.NewPipeline(gpu.Source{Name: "philox_probe.metal", Text: src}, "philox_probe")
	if err != nil {
		t.Fatal(err)
	}
	const count = 4096
	rng := rand.New(rand.NewPCG(11, 12))
	in := make([]uint32, 6*count)
	for i := range count {
		w := in[6*i : 6*i+6]
		switch {
		case i < count/2: // random words
			for j := range w {
				w[j] = rng.Uint32()
			}
		case i < count/2+16: // all bits set, and zero
			for j := range w {
				w[j] = ^uint32(0) * uint32(i%2)
			}
		default: // the sampler's layout: (counter, 0, 0, 0), seed
			seed := rng.Uint64()
			w[0], w[4], w[5] = uint32(i), uint32(seed), uint32(seed>>32)
		}
	}
	inBuf := denseBuf(t, d, 0, denseU32s(in))
	outBuf := denseBuf(t, d, 0, make([]byte, 16*count))
	if err := run(t, d, &gpu.Dispatch{Pipeline: p, Groups: gpu.Size{X: count / 64, Y: 1, Z: 1}, Threads: gpu.Size{X: 64, Y: 1, Z: 1},
		Args: []gpu.Arg{inBuf.Arg(0), outBuf.Arg(1)}}); err != nil {
		t.Fatal(err)
	}
	got := denseReadU32(outBuf, 4*count)
	for i := range count {
		w := in[6*i : 6*i+6]
		want := sample.Philox4x32([4]uint32{w[0], w[1], w[2], w[3]}, [2]uint32{w[4], w[5]})
		if g := [4]uint32(got[4*i : 4*i+4]); g != want {
			t.Fatalf("input %d %08x: MSL %08x, Go %08x", i, w, g, want)
		}
		if w[1] == 0 && w[2] == 0 && w[3] == 0 {
			if draw := sample.Draw(uint64(w[5])<<32|uint64(w[4]), w[0]); draw != uint64(got[4*i])<<32|uint64(got[4*i+1]) {
				t.Fatalf("input %d: Draw %016x, kernel words %08x %08x", i, draw, got[4*i], got[4*i+1])
			}
		}
	}
}

// TestSampleGreedyEdges holds the greedy pick to argmax.metal's rules (the
// first maximum; a NaN, or a largest +Inf, is a broken row) together with
// the mask, and the cases where sampling falls back to greedy.
func TestSampleGreedyEdges(t *testing.T) {
	race, _ := denseDevices(t)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	greedy := sample.Params{TopP: 1, RepetitionPenalty: 1}
	hot := sample.Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1, Seed: new(uint64(3))}
	cases := []struct {
		name    string
		logits  []float32
		allowed int
		p       sample.Params
		want    uint32
	}{
		{"tie: lowest id", []float32{0.5, 3, -1, 3, 2.9}, 5, greedy, 1},
		{"masked largest", []float32{0.5, 3, -1, 3, 100}, 4, greedy, 1},
		{"a NaN: broken", []float32{nan, 1, nan, 2, nan}, 5, greedy, shaders.SampleBadLogits},
		{"a NaN sampled: broken", []float32{1, 2, 3, nan}, 4, hot, shaders.SampleBadLogits},
		{"all NaN: broken", []float32{nan, nan, nan}, 3, greedy, shaders.SampleBadLogits},
		{"a masked NaN is no matter", []float32{5, 6, nan}, 2, greedy, 1},
		{"all -Inf: the first", []float32{-inf, -inf, -inf, 7}, 3, greedy, 0},
		{"all -Inf sampled: the first", []float32{-inf, -inf, -inf, 7}, 3, hot, 0},
		{"+Inf: broken", []float32{1, inf, 2, inf}, 4, greedy, shaders.SampleBadLogits},
		{"+Inf sampled: broken", []float32{1, inf, 2, inf}, 4, hot, shaders.SampleBadLogits},
		{"a masked +Inf is no matter", []float32{1, 2, inf}, 2, greedy, 1},
		{"temperature under 1e-5", []float32{1, 2, 1.9}, 3, sample.Params{Temperature: 9e-6, TopP: 1, RepetitionPenalty: 1, Seed: new(uint64(1))}, 1},
		{"top_k=1", []float32{1, 2, 1.9}, 3, sample.Params{Temperature: 2, TopK: 1, TopP: 1, RepetitionPenalty: 1, Seed: new(uint64(1))}, 1},
		{"-0 ties +0", []float32{-1, float32(math.Copysign(0, -1)), 0}, 3, greedy, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newSampleRig(t, race, c.logits, c.allowed)
			r.start(t, c.p, nil)
			got, _ := r.steps(t, 3, 2)
			for j, g := range got {
				if g != c.want {
					t.Fatalf("step %d picked %d, want %d", j, g, c.want)
				}
			}
		})
	}
	// Penalties over the generated ids move greedy off a repeated token:
	// presence 0.8 > the margin 0.5 (1, 0.5, 0 -> 0.2, 0.5, 0 -> 0.2, -0.3, 0).
	r := newSampleRig(t, race, []float32{1, 0.5, 0}, 3)
	r.start(t, sample.Params{TopP: 1, RepetitionPenalty: 1, PresencePenalty: 0.8}, nil)
	if got, _ := r.steps(t, 3, -1); !slices.Equal(got, []uint32{0, 1, 0}) {
		t.Fatalf("presence penalty: picked %v, want [0 1 0]", got)
	}
	// Repetition over the prompt: id 0 (in the prompt) drops to 1/2.
	r = newSampleRig(t, race, []float32{1, 0.6, 0}, 3)
	r.start(t, sample.Params{TopP: 1, RepetitionPenalty: 2}, []int{0})
	if got, _ := r.steps(t, 1, -1); got[0] != 1 {
		t.Fatalf("repetition penalty over the prompt: picked %d, want 1", got[0])
	}
}

// TestSampleSeedReproducible: one seed gives the same ids on every run, and
// another seed other ids.
func TestSampleSeedReproducible(t *testing.T) {
	_, fast := denseDevices(t)
	rng := rand.New(rand.NewPCG(5, 6))
	r := newSampleRig(t, fast, denseRand(rng, 600, 1), 600) // a nucleus past the list
	p := sample.Params{Temperature: 0.7, TopP: 0.9, RepetitionPenalty: 1, PresencePenalty: 0.5, Seed: new(uint64(7))}
	var runs [][]uint32
	for _, seed := range []uint64{7, 7, 8} {
		p.Seed = new(seed)
		r.start(t, p, nil)
		got, _ := r.steps(t, 20, -1)
		runs = append(runs, got)
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Fatalf("seed 7 twice:\n%v\n%v", runs[0], runs[1])
	}
	if slices.Equal(runs[0], runs[2]) {
		t.Fatalf("seeds 7 and 8 gave the same 20 ids %v", runs[0])
	}
}

// TestSampleDistributions draws many ids on the GPU per parameter set and
// checks the counts against the CPU reference's distribution
// (sample.Sampler.Probabilities) with a chi-square test at significance
// 0.001; the same counts must fail against the distribution of a
// temperature 20% off (and, for a case with a logit bias, against the
// distribution without it), so each test has power. The first row is
// engine/sample's own test row (every path inside the list), the second a
// slowly decaying one whose cuts lie past the list.
func TestSampleDistributions(t *testing.T) {
	_, fast := denseDevices(t)
	short := []float32{2.0, 1.5, 1.2, 1.0, 0.7, 0.5, 0.1, -0.3, -1, -2, 9, 9}
	long := make([]float32, 160)
	for i := range long {
		long[i] = -0.05*float32(i) + 0.4*float32(i%5)/4
	}
	long[150], long[155] = 20, 30 // masked
	type named struct {
		name string
		p    sample.Params
		bias sample.LogitBias
	}
	rows := []struct {
		logits  []float32
		allowed int
		draws   int
		cases   []named
	}{
		{short, 10, 10000, []named{
			{"T=1", sample.Params{Temperature: 1, TopP: 1}, nil},
			{"T=0.5", sample.Params{Temperature: 0.5, TopP: 1}, nil},
			{"T=2", sample.Params{Temperature: 2, TopP: 1}, nil},
			{"top_k=4", sample.Params{Temperature: 1, TopK: 4, TopP: 1}, nil},
			{"top_p=0.8", sample.Params{Temperature: 1, TopP: 0.8}, nil},
			{"min_p=0.2", sample.Params{Temperature: 1, TopP: 1, MinP: 0.2}, nil},
			{"top_k=6/top_p=0.9/min_p=0.1/T=0.7", sample.Params{Temperature: 0.7, TopK: 6, TopP: 0.9, MinP: 0.1}, nil},
			{"card_thinking", sample.Params{Temperature: 1, TopK: 20, TopP: 0.95}, nil},
			{"T=1/bias", sample.Params{Temperature: 1, TopP: 1}, sample.LogitBias{0: -100, 3: 1, 9: 2.5}},
		}},
		// Every cut here lies past the SampleList best.
		{long, 150, 4000, []named{
			{"top_p=0.9", sample.Params{Temperature: 1, TopP: 0.9}, nil},
			{"top_k=100/top_p=0.95/T=0.8", sample.Params{Temperature: 0.8, TopK: 100, TopP: 0.95}, nil},
			{"top_k=60/T=0.6", sample.Params{Temperature: 0.6, TopK: 60, TopP: 1}, nil},
			{"min_p=0.15", sample.Params{Temperature: 1, TopP: 1, MinP: 0.15}, nil},
			{"no_filter/T=1.2", sample.Params{Temperature: 1.2, TopP: 1}, nil},
			{"top_p=0.9/bias", sample.Params{Temperature: 1, TopP: 0.9}, sample.LogitBias{0: -100, 1: -100, 40: 1.5, 120: 3}},
		}},
	}
	const perBuffer = 1000
	for ri, row := range rows {
		for ci, c := range row.cases {
			p := c.p
			t.Run(fmt.Sprintf("n=%d/%s", len(row.logits), c.name), func(t *testing.T) {
				p.RepetitionPenalty, p.Seed = 1, new(uint64(1000*ri+ci))
				r := newSampleRig(t, fast, row.logits, row.allowed)
				r.bias = c.bias
				r.start(t, p, nil)
				counts := make([]int, len(row.logits))
				for drawn := 0; drawn < row.draws; drawn += perBuffer {
					ids, _ := r.steps(t, perBuffer, -1)
					for _, id := range ids {
						if int(id) >= row.allowed {
							t.Fatalf("drew masked id %d", id)
						}
						counts[id]++
					}
				}
				probs := func(p sample.Params, bias sample.LogitBias) []float64 {
					s, err := sample.New(seeded(p), sample.Vocab{Size: len(row.logits), TokenizerSize: row.allowed}, nil)
					if err == nil {
						err = s.SetLogitBias(bias)
					}
					if err != nil {
						t.Fatal(err)
					}
					pr, err := s.Probabilities(slices.Clone(row.logits))
					if err != nil {
						t.Fatal(err)
					}
					return pr
				}
				want := probs(p, c.bias)
				for id, c := range counts {
					if c > 0 && want[id] == 0 {
						t.Fatalf("id %d drawn %d times, outside the support", id, c)
					}
				}
				chi, df := chisq.Test(counts, want, row.draws)
				if limit := chisq.Limit(df); chi > limit {
					t.Fatalf("chi-square %.1f > %.1f (df %d): counts %v, want %v", chi, limit, df, counts, want)
				}
				off := p
				off.Temperature *= 1.2
				if chiOff, dfOff := chisq.Test(counts, probs(off, c.bias), row.draws); chiOff <= chisq.Limit(dfOff) {
					t.Fatalf("counts also pass for temperature %v (chi-square %.1f, df %d): the test cannot tell", off.Temperature, chiOff, dfOff)
				}
				if c.bias != nil {
					if chiOff, dfOff := chisq.Test(counts, probs(p, nil), row.draws); chiOff <= chisq.Limit(dfOff) {
						t.Fatalf("counts also pass without the bias (chi-square %.1f, df %d): the test cannot tell", chiOff, dfOff)
					}
				}
				t.Logf("chi-square %.1f (df %d, limit %.1f)", chi, df, chisq.Limit(df))
			})
		}
	}
}

// BenchmarkSample times one Sample dispatch in the sim (Fast device) on the
// fixture-sized and the real vocabulary, for a draw from the list (the
// model card's settings, alone and with the most biased ids) and one
// whose top-p cut lies past it.
func BenchmarkSample(b *testing.B) {
	_, fast := denseDevices(b)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{12, 248320} {
		logits := denseRand(rng, n, 2)
		// The most ids a bias holds, spread over the vocabulary.
		full := sample.LogitBias{}
		for j := range min(n, shaders.SampleMaxBias) {
			full[j*n/min(n, shaders.SampleMaxBias)] = float64(j%7) - 3
		}
		card := sample.Params{Temperature: 1, TopK: 20, TopP: 0.95, PresencePenalty: 1.5, RepetitionPenalty: 1}
		for _, c := range []struct {
			name string
			p    sample.Params
			bias sample.LogitBias
		}{
			{"card", card, nil},
			{"card/bias=max", card, full},
			{"top_p=0.9", sample.Params{Temperature: 1, TopP: 0.9, RepetitionPenalty: 1}, nil},
		} {
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				r := newSampleRig(b, fast, logits, n)
				r.bias = c.bias
				r.start(b, c.p, nil)
				r.steps(b, 1, -1) // compiles the pipeline
				for b.Loop() {
					r.steps(b, 1, -1)
				}
			})
		}
	}
}

// WriteSampleAllowed bans exactly the ids a grammar's set leaves out and
// those from the limit on, which falls inside a word here.
func TestWriteSampleAllowed(t *testing.T) {
	const n, limit = 1000, 937
	rng := rand.New(rand.NewPCG(4, 5))
	allowed := make([]uint64, (n+63)/64)
	for i := range allowed {
		allowed[i] = rng.Uint64()
	}
	mask := make([]byte, shaders.SampleMaskBytes(n))
	if err := shaders.WriteSampleAllowed(mask, n, limit, allowed); err != nil {
		t.Fatal(err)
	}
	for id := range n {
		banned := mask[id/8]>>(id%8)&1 == 1
		if want := id >= limit || allowed[id/64]>>(id%64)&1 == 0; banned != want {
			t.Fatalf("id %d banned %v, want %v", id, banned, want)
		}
	}
	if err := shaders.WriteSampleAllowed(mask, n, limit, allowed[:3]); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("a short allowed set: %v", err)
	}
}

// BenchmarkGrammarMask is the host's work per token to mask a constrained
// reply over Qwen3.6's 248,320 ids, besides the grammar's own mask
// (grammar.BenchmarkAllowed): on a GPU backend now the 31 KB upload into
// the sampler's mask, before it the 1 MB of logits copied back and masked
// on the host as the CPU backend still does.
func BenchmarkGrammarMask(b *testing.B) {
	const n = 248_320
	rng := rand.New(rand.NewPCG(6, 7))
	allowed := make([]uint64, (n+63)/64)
	for i := range allowed {
		allowed[i] = rng.Uint64() // half the ids: no word skipped
	}
	b.Run("path=upload", func(b *testing.B) {
		mask := make([]byte, shaders.SampleMaskBytes(n))
		b.SetBytes(int64(len(mask)))
		for b.Loop() {
			if err := shaders.WriteSampleAllowed(mask, n, n, allowed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("path=readback", func(b *testing.B) {
		device := make([]byte, 4*n)
		logits := make([]float32, n)
		b.SetBytes(int64(len(device)))
		for b.Loop() {
			for i := range logits {
				logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(device[4*i:]))
			}
			engine.MaskLogits(logits, allowed)
		}
	})
}
