package shaders_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"petal/engine/sample"
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
func (r *sampleRig) start(t testing.TB, p shaders.SampleParams, prompt []int) {
	t.Helper()
	if err := shaders.WriteSampleState(r.views.State.Buf.Contents(), r.n, p, prompt); err != nil {
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

func sampleParams(p shaders.SampleParams) sample.Params {
	seed := p.Seed
	return sample.Params{
		Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
		PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty,
		RepetitionPenalty: p.RepetitionPenalty, Seed: &seed,
	}
}

// cpuSteps runs the CPU reference for count steps over the same row.
func (r *sampleRig) cpuSteps(t testing.TB, p shaders.SampleParams, prompt []int, count, top int) ([]int, []sample.Logprobs) {
	t.Helper()
	s, err := sample.New(sampleParams(p), sample.Vocab{Size: r.n, TokenizerSize: r.allowed}, prompt)
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
	p    shaders.SampleParams
}{
	{"greedy", shaders.SampleParams{TopP: 1, RepetitionPenalty: 1}},
	{"top_k=1", shaders.SampleParams{Temperature: 1, TopK: 1, TopP: 1, RepetitionPenalty: 1}},
	{"T=0.7/top_p=0.9", shaders.SampleParams{Temperature: 0.7, TopP: 0.9, RepetitionPenalty: 1}},
	{"card_thinking", shaders.SampleParams{Temperature: 1, TopK: 20, TopP: 0.95, PresencePenalty: 1.5, RepetitionPenalty: 1}},
	{"card_coding/min_p", shaders.SampleParams{Temperature: 0.6, TopK: 20, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1}},
	{"top_k=1000/min_p", shaders.SampleParams{Temperature: 0.8, TopK: 1000, TopP: 1, MinP: 0.001, RepetitionPenalty: 1}},
	{"top_k=300/top_p=0.8", shaders.SampleParams{Temperature: 1.5, TopK: 300, TopP: 0.8, RepetitionPenalty: 1}},
	{"min_p=0.01", shaders.SampleParams{Temperature: 1, TopP: 1, MinP: 0.01, RepetitionPenalty: 1}},
	{"no_filter", shaders.SampleParams{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
	{"T=3/top_p=0.5", shaders.SampleParams{Temperature: 3, TopP: 0.5, RepetitionPenalty: 1}},
	{"penalties", shaders.SampleParams{Temperature: 0.9, TopK: 40, TopP: 0.9, RepetitionPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: -0.5}},
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
	}{
		{3000, 2990, 12, 1.5},
		{248320, 248077, 4, 2}, // Qwen3.6's vocabulary and tokenizer
	}
	for ri, row := range rows {
		logits := denseRand(rng, row.n, row.sd)
		logits[rng.IntN(row.allowed)] += 6 // a peak, as real logits have
		logits[row.allowed] = 50           // masked: must never win
		prompt := []int{5, 17, 17, row.allowed - 1}
		for ci, c := range sampleCases {
			t.Run(fmt.Sprintf("n=%d/%s", row.n, c.name), func(t *testing.T) {
				k := fast
				if ri == 0 && ci < 4 {
					k = race
				}
				rig := newSampleRig(t, k, logits, row.allowed)
				c.p.Seed = uint64(100*ri + ci)
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
        OFF(SampleHeader, seed_lo), OFF(SampleHeader, seed_hi), OFF(SampleHeader, counter), OFF(SampleHeader, penalized),
        sizeof(SampleRecord), OFF(SampleRecord, id), OFF(SampleRecord, logprob), OFF(SampleRecord, top), OFF(SampleRecord, top_ids), OFF(SampleRecord, top_logprobs),
        SAMPLE_MAX_THREADS, SAMPLE_MAX_SIMDGROUPS, SAMPLE_LIST, SAMPLE_MAX_TOP_LOGPROBS, SAMPLE_RADIX_BITS, SAMPLE_NO_TOKEN,
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
		unsafe.Offsetof(h.SeedLo), unsafe.Offsetof(h.SeedHi), unsafe.Offsetof(h.Counter), unsafe.Offsetof(h.Penalized),
		unsafe.Sizeof(r), unsafe.Offsetof(r.ID), unsafe.Offsetof(r.Logprob), unsafe.Offsetof(r.Top), unsafe.Offsetof(r.TopIDs), unsafe.Offsetof(r.TopLogprobs),
		shaders.SampleMaxThreads, shaders.SampleMaxSimdgroups, shaders.SampleList, shaders.SampleMaxTopLogprobs, shaders.SampleRadixBits, shaders.SampleNoToken,
	})
}

// TestSampleInvalid: every bad setting, size or view is refused with
// gpu.ErrInvalid before anything is encoded.
func TestSampleInvalid(t *testing.T) {
	k, _ := denseDevices(t)
	d := k.Device()
	const n = 100
	state := make([]byte, shaders.SampleStateBytes(n))
	ok := shaders.SampleParams{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	for _, c := range []struct {
		name   string
		edit   func(p *shaders.SampleParams)
		n      int
		prompt []int
	}{
		{"temperature<0", func(p *shaders.SampleParams) { p.Temperature = -1 }, n, nil},
		{"temperature NaN", func(p *shaders.SampleParams) { p.Temperature = math.NaN() }, n, nil},
		{"top_k<0", func(p *shaders.SampleParams) { p.TopK = -1 }, n, nil},
		{"top_p=0", func(p *shaders.SampleParams) { p.TopP = 0 }, n, nil},
		{"top_p>1", func(p *shaders.SampleParams) { p.TopP = 1.5 }, n, nil},
		{"min_p>1", func(p *shaders.SampleParams) { p.MinP = 2 }, n, nil},
		{"presence>2", func(p *shaders.SampleParams) { p.PresencePenalty = 2.5 }, n, nil},
		{"frequency Inf", func(p *shaders.SampleParams) { p.FrequencyPenalty = math.Inf(-1) }, n, nil},
		{"repetition=0", func(p *shaders.SampleParams) { p.RepetitionPenalty = 0 }, n, nil},
		{"prompt id", func(p *shaders.SampleParams) {}, n, []int{3, n}},
		{"negative prompt id", func(p *shaders.SampleParams) {}, n, []int{-1}},
		{"vocabulary 0", func(p *shaders.SampleParams) {}, 0, nil},
		{"state too small", func(p *shaders.SampleParams) {}, n + 1, nil},
	} {
		p := ok
		c.edit(&p)
		if err := shaders.WriteSampleState(state, c.n, p, c.prompt); !errors.Is(err, gpu.ErrInvalid) {
			t.Errorf("WriteSampleState %s: %v, want gpu.ErrInvalid", c.name, err)
		}
	}
	if err := shaders.WriteSampleState(state, n, ok, []int{0, n - 1}); err != nil {
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
