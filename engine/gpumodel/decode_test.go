package gpumodel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"petal/engine"
	"petal/engine/checkpoint"
	"petal/engine/cpu"
	"petal/engine/sample"
	"petal/gpu/record"
)

// picker picks the most likely id from logits brought to the host, as the
// CPU sampler does for a greedy request, and counts its calls.
type picker struct{ calls int }

func (p *picker) Next(logits []float32) (int, error) {
	p.calls++
	return engine.Argmax(logits), nil
}

// run decodes up to max tokens after prompt on a fresh sequence of m,
// stopping after the token at index stopAt (-1: never), and returns the
// tokens, the stats and the sequence, which the caller closes.
func run(t *testing.T, m engine.Model, d engine.Decode, stopAt int) ([]int, engine.DecodeStats, engine.Sequence) {
	t.Helper()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	d.Token = func(id int) (bool, error) {
		out = append(out, id)
		return len(out)-1 == stopAt, nil
	}
	st, err := engine.Run(t.Context(), seq, m.Config().Vocab, &d)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tokens != len(out) {
		t.Errorf("stats count %d tokens, Token saw %d", st.Tokens, len(out))
	}
	return out, st, seq
}

// The device loop against the CPU backend's host loop: the same tokens
// with the argmax on the GPU (no logits read back) and with a host picker
// (every step's logits read back); a stop discards the step in flight but
// leaves the sequence able to go on; a limit keeps the pick below it; a
// prompt crossing the initial KV capacity grows the caches mid-loop.
func TestDecodeMatchesCPU(t *testing.T) {
	m, c := openTinyA(t)
	v := m.cfg.Vocab
	prompt := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3}
	const steps = 9 // more than tokenRing, so slots are reused

	want, st, cs := run(t, c, engine.Decode{Prompt: prompt, MaxTokens: steps}, -1)
	cs.Close()
	if st.LogitsReadBytes != 0 {
		t.Errorf("CPU backend counted %d bytes read back", st.LogitsReadBytes)
	}
	got, st, gs := run(t, m, engine.Decode{Prompt: prompt, MaxTokens: steps}, -1)
	if !slices.Equal(got, want) {
		t.Errorf("GPU argmax loop %v, CPU %v", got, want)
	}
	if st.LogitsReadBytes != 0 || st.HostTime <= 0 {
		t.Errorf("GPU argmax loop stats %+v, want no bytes read back and some host time", st)
	}
	if n := gs.Len(); n != len(prompt)+steps-1 {
		t.Errorf("after %d tokens the sequence holds %d, want %d (the last is never fed)", steps, n, len(prompt)+steps-1)
	}
	gs.Close()

	p := &picker{}
	got, st, gs = run(t, m, engine.Decode{Prompt: prompt, MaxTokens: steps, Picker: p}, -1)
	gs.Close()
	if !slices.Equal(got, want) || p.calls != steps {
		t.Errorf("GPU with a host picker (%d calls) %v, CPU %v", p.calls, got, want)
	}
	if st.LogitsReadBytes != int64(4*v*steps) {
		t.Errorf("host picker: %d bytes read back, want %d", st.LogitsReadBytes, 4*v*steps)
	}

	// Sampled on the GPU (temperature, top-p and a presence penalty): no
	// logits read back, the same tokens on a second run, and those the CPU
	// sampler draws from the same device's logits read back.
	seed := uint64(7)
	params := sample.Params{Temperature: 0.7, TopP: 0.9, PresencePenalty: 1.5, RepetitionPenalty: 1, Seed: &seed}
	sampler := func() *sample.Sampler {
		sp, err := sample.New(params, sample.Vocab{Size: v}, prompt)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	sampled := func() engine.Decode {
		return engine.Decode{Prompt: prompt, MaxTokens: steps, Picker: sampler(), Sampling: &engine.Sampling{Params: params, Prompt: prompt}}
	}
	drawn, st, gs := run(t, m, sampled(), -1)
	gs.Close()
	again, _, gs := run(t, m, sampled(), -1)
	gs.Close()
	host, _, gs := run(t, m, engine.Decode{Prompt: prompt, MaxTokens: steps, Picker: sampler()}, -1)
	gs.Close()
	if st.LogitsReadBytes != 0 || !slices.Equal(drawn, again) || !slices.Equal(drawn, host) {
		t.Errorf("GPU sampler %v (%d bytes read back), again %v; CPU sampler on the GPU's logits %v", drawn, st.LogitsReadBytes, again, host)
	}

	// Stopping after the third token: the step feeding it was in flight
	// and ran, so the sequence holds it; going on from there continues
	// the CPU's sequence.
	got, _, gs = run(t, m, engine.Decode{Prompt: prompt, MaxTokens: steps}, 2)
	if !slices.Equal(got, want[:3]) || gs.Len() != len(prompt)+3 {
		t.Errorf("stopped at the third token: %v, holds %d; want %v, %d", got, gs.Len(), want[:3], len(prompt)+3)
	}
	var rest []int
	if _, err := engine.Run(t.Context(), gs, v, &engine.Decode{
		Prompt: want[3:4], MaxTokens: steps - 4,
		Token: func(id int) (bool, error) { rest = append(rest, id); return false, nil },
	}); err != nil {
		t.Fatal(err)
	}
	gs.Close()
	if !slices.Equal(rest, want[4:]) {
		t.Errorf("continued after a stop: %v, want %v", rest, want[4:])
	}

	// A limit at the first token's id makes the GPU pick the CPU's best
	// below it.
	limit := want[0]
	if limit == 0 {
		t.Fatal("first token is id 0; pick another prompt")
	}
	logits := make([]float32, v)
	cs, _ = c.NewSequence()
	cs.Forward(prompt, logits)
	cs.Close()
	got, _, gs = run(t, m, engine.Decode{Prompt: prompt, MaxTokens: 1, Limit: limit}, -1)
	gs.Close()
	if w := engine.Argmax(logits[:limit]); got[0] != w {
		t.Errorf("limit %d: picked %d, want %d", limit, got[0], w)
	}

	// Positions 250..259 cross the initial capacity of 256 during decode.
	long := make([]int, initialCapacity-6)
	for i := range long {
		long[i] = (i*31 + 7) % v
	}
	want, _, cs = run(t, c, engine.Decode{Prompt: long, MaxTokens: 10}, -1)
	cs.Close()
	got, _, gs = run(t, m, engine.Decode{Prompt: long, MaxTokens: 10}, -1)
	gs.Close()
	if !slices.Equal(got, want) {
		t.Errorf("across the KV growth: GPU %v, CPU %v", got, want)
	}
}

// BenchmarkEncodeStep35B times encoding one decode step of the 35B shape
// at position 4096 on the recording driver, reporting µs and allocations
// per step (petal bench --dry-run reports the same as host_us_per_step and
// allocs_per_step).
func BenchmarkEncodeStep35B(b *testing.B) {
	ckpt, err := checkpoint.ShapeOnly(checkpoint.Qwen36())
	if err != nil {
		b.Fatal(err)
	}
	dev := record.NewCounting()
	m, err := New(ckpt, dev)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := m.newSequence()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const pos = 4096
	if err := s.ensureCapacity(pos + 1); err != nil {
		b.Fatal(err)
	}
	st := step{pos: pos, token: s.slot(0), next: s.slot(1)}
	cb, _ := dev.NewCommandBuffer()
	if err := s.encode(cb, st); err != nil { // makes the step's plan
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		cb, _ := dev.NewCommandBuffer()
		b.StartTimer()
		if err := s.encode(cb, st); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
}

// cpuLogprobTol bounds a logprob of the sim against the CPU backend's on
// tiny-a: a log-softmax moves by at most twice the largest logit move, and
// the two backends' logits of these decode steps differ by up to 1.5e-3
// (the third step, since the CPU's products changed summation order in
// 4aa9c45; 3.7e-4 elsewhere). The sampler itself is held to 1e-4 against
// the CPU sampler on the sim's own logits.
const cpuLogprobTol = 3e-3

// Logprobs from the GPU sampler's records, greedy and sampled, against the
// CPU backend's sampler on its own logits (within cpuLogprobTol) and against the
// CPU sampler on this device's logits read back; asking for them reads no
// logits back and keeps the tokens.
func TestDecodeLogprobs(t *testing.T) {
	m, c := openTinyA(t)
	v := m.cfg.Vocab
	prompt := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3}
	const steps, top = 9, 5
	seed := uint64(7)
	for _, params := range []sample.Params{
		{Temperature: 0, TopP: 1, RepetitionPenalty: 1, Seed: &seed},
		{Temperature: 0.7, TopP: 0.9, PresencePenalty: 1.5, RepetitionPenalty: 1, Seed: &seed},
	} {
		decode := func(model engine.Model, device bool) ([]int, []sample.Logprobs, engine.DecodeStats) {
			sp, err := sample.New(params, sample.Vocab{Size: v}, prompt)
			if err != nil {
				t.Fatal(err)
			}
			var lps []sample.Logprobs
			d := engine.Decode{Prompt: prompt, MaxTokens: steps, Picker: sp, TopLogprobs: top,
				Logprobs: func(lp sample.Logprobs) { lps = append(lps, lp) }}
			if device {
				d.Sampling = &engine.Sampling{Params: params, Prompt: prompt}
			}
			ids, st, seq := run(t, model, d, -1)
			seq.Close()
			return ids, lps, st
		}
		cpuIDs, cpuLP, _ := decode(c, false)
		hostIDs, hostLP, _ := decode(m, false)
		gpuIDs, gpuLP, st := decode(m, true)
		if st.LogitsReadBytes != 0 {
			t.Errorf("T=%v: %d logits bytes read back with logprobs", params.Temperature, st.LogitsReadBytes)
		}
		if !slices.Equal(gpuIDs, hostIDs) || !slices.Equal(gpuIDs, cpuIDs) {
			t.Fatalf("T=%v: GPU %v, host on GPU logits %v, CPU %v", params.Temperature, gpuIDs, hostIDs, cpuIDs)
		}
		for _, ref := range []struct {
			name string
			lps  []sample.Logprobs
			tol  float64
		}{{"CPU backend", cpuLP, cpuLogprobTol}, {"CPU sampler on GPU logits", hostLP, 1e-4}} {
			if len(gpuLP) != steps || len(ref.lps) != steps {
				t.Fatalf("%d GPU logprobs, %d %s, want %d", len(gpuLP), len(ref.lps), ref.name, steps)
			}
			for i, g := range gpuLP {
				w := ref.lps[i]
				if math.Abs(g.Logprob-w.Logprob) > ref.tol || len(g.Top) != top || len(w.Top) != top {
					t.Fatalf("T=%v step %d: GPU %+v, %s %+v", params.Temperature, i, g, ref.name, w)
				}
				for j := range g.Top {
					if g.Top[j].ID != w.Top[j].ID || math.Abs(g.Top[j].Logprob-w.Top[j].Logprob) > ref.tol {
						t.Fatalf("T=%v step %d top %d: GPU %+v, %s %+v", params.Temperature, i, j, g.Top[j], ref.name, w.Top[j])
					}
				}
			}
		}
	}
}

// modConstraint allows, after token last, the ids one above it modulo 5:
// a fifth of the vocabulary, the next fifth after each token.
type modConstraint struct{ last, advances int }

func (c *modConstraint) allows(id int) bool { return ((id-c.last)%5+5)%5 == 1 }

func (c *modConstraint) Allowed(mask []uint64) bool {
	clear(mask)
	for id := range 64 * len(mask) {
		if c.allows(id) {
			mask[id/64] |= 1 << (id % 64)
		}
	}
	return true
}

func (c *modConstraint) Advance(id int) error {
	if !c.allows(id) {
		return fmt.Errorf("id %d drawn outside the mask after %d", id, c.last)
	}
	c.last, c.advances = id, c.advances+1
	return nil
}

// A constrained decode on the GPU (the mask uploaded before each draw, the
// next forward pass in flight meanwhile) against the CPU backend's host
// loop: the same greedy tokens and logprobs, every one inside its step's
// mask, and no logits read back; sampled, the same tokens as the CPU
// sampler masked on this device's logits read back; across the KV growth
// too.
func TestDecodeConstrained(t *testing.T) {
	m, c := openTinyA(t)
	v := m.cfg.Vocab
	prompt := []int{5, 17, 300, 2, 9, 44, 1, 260, 77, 3}
	long := make([]int, initialCapacity-6)
	for i := range long {
		long[i] = (i*31 + 7) % v
	}
	const steps = 9
	seed := uint64(7)
	for _, tc := range []struct {
		name   string
		prompt []int
		params sample.Params
	}{
		{"greedy", prompt, sample.Params{TopP: 1, RepetitionPenalty: 1, Seed: &seed}},
		{"sampled", prompt, sample.Params{Temperature: 0.7, TopP: 0.9, PresencePenalty: 1.5, RepetitionPenalty: 1, Seed: &seed}},
		{"greedy across the KV growth", long, sample.Params{TopP: 1, RepetitionPenalty: 1, Seed: &seed}},
	} {
		decode := func(model engine.Model, device bool) ([]int, []sample.Logprobs, engine.DecodeStats, *modConstraint) {
			sp, err := sample.New(tc.params, sample.Vocab{Size: v}, tc.prompt)
			if err != nil {
				t.Fatal(err)
			}
			con := &modConstraint{}
			var lps []sample.Logprobs
			d := engine.Decode{Prompt: tc.prompt, MaxTokens: steps, Picker: sp, Constraint: con, TopLogprobs: 3,
				Logprobs: func(lp sample.Logprobs) { lps = append(lps, lp) }}
			if device {
				d.Sampling = &engine.Sampling{Params: tc.params, Prompt: tc.prompt}
			}
			ids, st, seq := run(t, model, d, -1)
			if n := seq.Len(); n != len(tc.prompt)+steps-1 {
				t.Errorf("%s: the sequence holds %d tokens, want %d", tc.name, n, len(tc.prompt)+steps-1)
			}
			seq.Close()
			return ids, lps, st, con
		}
		gpuIDs, gpuLP, st, con := decode(m, true)
		if st.LogitsReadBytes != 0 || con.advances != steps-1 {
			t.Errorf("%s: %d logits bytes read back, %d advances", tc.name, st.LogitsReadBytes, con.advances)
		}
		check := &modConstraint{}
		for _, id := range gpuIDs {
			if err := check.Advance(id); err != nil {
				t.Errorf("%s: GPU %v: %v", tc.name, gpuIDs, err)
			}
		}
		hostIDs, hostLP, _, _ := decode(m, false)
		if !slices.Equal(gpuIDs, hostIDs) {
			t.Errorf("%s: GPU %v, CPU sampler on the GPU's logits %v", tc.name, gpuIDs, hostIDs)
		}
		// The sampler on its own logits is held as in TestDecodeLogprobs;
		// only the CPU backend's logits differ by more.
		type reference struct {
			name string
			lps  []sample.Logprobs
			tol  float64
		}
		refs := []reference{{"CPU sampler on GPU logits", hostLP, 1e-4}}
		if tc.params.Temperature == 0 {
			cpuIDs, cpuLP, _, _ := decode(c, false)
			if !slices.Equal(gpuIDs, cpuIDs) {
				t.Errorf("%s: GPU %v, CPU backend %v", tc.name, gpuIDs, cpuIDs)
			}
			refs = append(refs, reference{"CPU backend", cpuLP, cpuLogprobTol})
		}
		for _, ref := range refs {
			for i := range min(len(ref.lps), len(gpuLP)) {
				if math.Abs(gpuLP[i].Logprob-ref.lps[i].Logprob) > ref.tol || len(gpuLP[i].Top) != 3 || len(ref.lps[i].Top) != 3 {
					t.Errorf("%s step %d: GPU logprobs %+v, %s %+v", tc.name, i, gpuLP[i], ref.name, ref.lps[i])
				}
			}
		}
	}
}

// nanCheckpoint copies a fixture with its final norm's weights set to NaN,
// as broken weights make every logit NaN, and returns the copy's folder.
func nanCheckpoint(t *testing.T, name string) string {
	t.Helper()
	const tensor = "language_model.model.norm.weight"
	src, dst := filepath.Join(fixturesDir, name), t.TempDir()
	files, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	patched := false
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f.Name(), ".safetensors") {
			n := binary.LittleEndian.Uint64(b)
			var header map[string]json.RawMessage
			if err := json.Unmarshal(b[8:8+n], &header); err != nil {
				t.Fatal(err)
			}
			if raw, ok := header[tensor]; ok {
				var info struct {
					Dtype   string
					Offsets [2]int `json:"data_offsets"`
				}
				if err := json.Unmarshal(raw, &info); err != nil || info.Dtype != "BF16" {
					t.Fatalf("%s: %s (%v)", tensor, raw, err)
				}
				data := b[8+int(n):]
				for i := info.Offsets[0]; i < info.Offsets[1]; i += 2 {
					binary.LittleEndian.PutUint16(data[i:], 0x7fc0) // bf16 NaN
				}
				patched = true
			}
		}
		if err := os.WriteFile(filepath.Join(dst, f.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !patched {
		t.Fatalf("%s has no %s", name, tensor)
	}
	return dst
}

// Weights that make NaN logits on the sim: the GPU's argmax and its
// sampler say so with the token (sample.ErrBadLogits), as the CPU backend's
// sampler does, rather than decoding garbage or failing without a cause.
func TestDecodeNaNLogits(t *testing.T) {
	dir := nanCheckpoint(t, "tiny-a")
	m, err := Open(dir, openDevice(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	c, err := cpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	prompt := []int{5, 17, 300}
	seed := uint64(7)
	params := sample.Params{Temperature: 0.7, TopP: 0.9, RepetitionPenalty: 1, Seed: &seed}
	for _, tc := range []struct {
		name  string
		model engine.Model
		d     func() engine.Decode
	}{
		{"GPU argmax", m, func() engine.Decode { return engine.Decode{} }},
		{"GPU sampler", m, func() engine.Decode {
			sp, _ := sample.New(params, sample.Vocab{Size: m.cfg.Vocab}, prompt)
			return engine.Decode{Picker: sp, Sampling: &engine.Sampling{Params: params, Prompt: prompt}}
		}},
		{"GPU sampler under a constraint", m, func() engine.Decode {
			sp, _ := sample.New(params, sample.Vocab{Size: m.cfg.Vocab}, prompt)
			return engine.Decode{Picker: sp, Sampling: &engine.Sampling{Params: params, Prompt: prompt}, Constraint: &modConstraint{}}
		}},
		{"CPU sampler", c, func() engine.Decode {
			sp, _ := sample.New(params, sample.Vocab{Size: m.cfg.Vocab}, prompt)
			return engine.Decode{Picker: sp}
		}},
	} {
		seq, err := tc.model.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		d := tc.d()
		d.Prompt, d.MaxTokens = prompt, 4
		tokens := 0
		d.Token = func(int) (bool, error) { tokens++; return false, nil }
		_, err = engine.Run(t.Context(), seq, m.cfg.Vocab, &d)
		seq.Close()
		if !errors.Is(err, sample.ErrBadLogits) || !strings.Contains(err.Error(), "NaN") || tokens != 0 {
			t.Errorf("%s: %d tokens, error %v; want sample.ErrBadLogits saying NaN", tc.name, tokens, err)
		}
	}
}
