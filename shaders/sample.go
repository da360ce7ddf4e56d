package shaders

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"unsafe"

	"petal/engine/sample"
	"petal/gpu"
)

// The sampler: one dispatch that picks the next token from a row of logits
// on the GPU (sample.metal; engine/sample is its CPU reference).

const sampleFile = "sample.metal"

// SampleArgs mirrors struct SampleArgs.
type SampleArgs struct {
	N           int32
	TopLogprobs int32
	_           [2]int32
}

// SampleHeader mirrors struct SampleHeader.
type SampleHeader struct {
	InvTemperature float32
	TopP           float32
	MinP           float32
	Presence       float32
	Frequency      float32
	Repetition     float32
	TopK           int32
	SeedLo         uint32
	SeedHi         uint32
	Counter        uint32
	Penalized      uint32
	Biased         uint32
	_              [4]uint32
}

// SampleRecord mirrors struct SampleRecord.
type SampleRecord struct {
	ID          uint32
	Logprob     float32
	Top         uint32
	_           uint32
	TopIDs      [SampleMaxTopLogprobs]uint32
	TopLogprobs [SampleMaxTopLogprobs]float32
}

// Constants shared with args.h (a test checks they agree).
const (
	SampleMaxThreads     = 1024
	SampleMaxSimdgroups  = 32
	SampleList           = 32
	SampleMaxTopLogprobs = 20
	SampleRadixBits      = 4
	// SampleMaxBias is the most logit_bias entries a request holds.
	SampleMaxBias = sample.MaxLogitBiasTokens
	// SampleNoToken is the id the sampler writes when no id can be picked
	// (every id masked).
	SampleNoToken = math.MaxUint32
	// SampleBadLogits is what the sampler and Argmax write instead of an id
	// when a logit they may pick is NaN or the largest is +Inf: the model's
	// output is broken (engine/sample.ErrBadLogits on the CPU).
	SampleBadLogits = math.MaxUint32 - 1
)

// Sizes of the sampler's buffers.
const (
	sampleHeaderBytes = int(unsafe.Sizeof(SampleHeader{}))
	// SampleRecordBytes is the size of one step's logprobs record.
	SampleRecordBytes = int(unsafe.Sizeof(SampleRecord{}))
	// sampleMaxVocab bounds the vocabulary so that ids and counts fit the
	// kernel's 32-bit arithmetic with room to spare.
	sampleMaxVocab = 1 << 24
	// sampleInPrompt marks a prompt id in the state's counts.
	sampleInPrompt = 1 << 31
)

func sampleWords(n int) int { return (n + 31) / 32 }

// SampleMaskBytes is the size of the mask of a vocabulary of n ids.
func SampleMaskBytes(n int) int { return 4 * sampleWords(n) }

// SampleStateBytes is the size of one request's sampler state for a
// vocabulary of n ids: its header, the touched bitset, the counts and the
// logit bias (SampleMaxBias ids, then as many biases).
func SampleStateBytes(n int) int { return sampleBiasAt(n) + 8*SampleMaxBias }

// sampleBiasAt is where the state's logit bias starts.
func sampleBiasAt(n int) int { return sampleHeaderBytes + 4*sampleWords(n) + 4*n }

func sampleInvalid(format string, args ...any) error {
	return fmt.Errorf("%w: shaders: Sample: "+format, append([]any{gpu.ErrInvalid}, args...)...)
}

// WriteSampleState starts a request: it writes p, its logit bias and the
// prompt's ids into state, the bytes of a SampleStateBytes(n) state buffer
// (its Contents), before the command buffer of the request's first Sample
// is committed. From then on the kernel keeps the state: the draw counter
// and the counts of the ids it picks. Out-of-range settings, biases or ids
// wrap gpu.ErrInvalid.
func WriteSampleState(state []byte, n int, p sample.Params, bias sample.LogitBias, prompt []int) error {
	if n < 1 || n > sampleMaxVocab {
		return sampleInvalid("vocabulary of %d ids, want 1..%d", n, sampleMaxVocab)
	}
	if len(state) < SampleStateBytes(n) {
		return sampleInvalid("state of %d bytes, want %d", len(state), SampleStateBytes(n))
	}
	switch err := p.Validate(); {
	case err != nil:
		return sampleInvalid("%v", err)
	case p.TopK > math.MaxInt32:
		return sampleInvalid("top_k %d must be at most %d", p.TopK, math.MaxInt32)
	case p.Seed == nil:
		return sampleInvalid("the seed must be resolved")
	}
	if err := bias.Validate(sample.Vocab{Size: n}); err != nil {
		return sampleInvalid("%v", err)
	}
	for _, id := range prompt {
		if id < 0 || id >= n {
			return sampleInvalid("prompt id %d outside the vocabulary [0, %d)", id, n)
		}
	}
	h := SampleHeader{
		TopP: float32(p.TopP), MinP: float32(p.MinP),
		Presence: float32(p.PresencePenalty), Frequency: float32(p.FrequencyPenalty),
		Repetition: float32(p.RepetitionPenalty), TopK: int32(p.TopK),
		SeedLo: uint32(*p.Seed), SeedHi: uint32(*p.Seed >> 32),
	}
	if p.Temperature >= sample.GreedyBelow {
		h.InvTemperature = float32(1 / p.Temperature)
	}
	if p.RepetitionPenalty != 1 || p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		h.Penalized = 1
	}
	h.Biased = uint32(len(bias))
	state = state[:SampleStateBytes(n)]
	copy(state, Bytes(&h))
	clear(state[sampleHeaderBytes:])
	touched := state[sampleHeaderBytes : sampleHeaderBytes+4*sampleWords(n)]
	counts := state[sampleHeaderBytes+4*sampleWords(n) : sampleBiasAt(n)]
	touch := func(id int) {
		w := touched[4*(id/32):]
		binary.LittleEndian.PutUint32(w, binary.LittleEndian.Uint32(w)|1<<(id%32))
	}
	for _, id := range prompt {
		binary.LittleEndian.PutUint32(counts[4*id:], sampleInPrompt)
		touch(id)
	}
	// The kernel looks a touched id up in the biased ids, ascending, and
	// adds the bias as the CPU does: rounded to float32.
	ids := slices.Sorted(maps.Keys(bias))
	at := sampleBiasAt(n)
	for j, id := range ids {
		binary.LittleEndian.PutUint32(state[at+4*j:], uint32(id))
		binary.LittleEndian.PutUint32(state[at+4*SampleMaxBias+4*j:], math.Float32bits(float32(bias[id])))
		touch(id)
	}
	return nil
}

// WriteSampleMask writes the mask of a vocabulary of n ids into mask (a
// SampleMaskBytes(n) buffer's bytes): the ids from allowed on (those the
// tokenizer never produces, the embedding's padding rows) are never picked.
func WriteSampleMask(mask []byte, n, allowed int) error {
	return WriteSampleAllowed(mask, n, allowed, nil)
}

// WriteSampleAllowed is WriteSampleMask for one step of a constrained
// reply: the ids whose bit is clear in allowed (a bitset of n bits, bit
// i%64 of word i/64; nil allows every id) are never picked either. It runs
// between two steps, so it writes whole words, 31 KB for 248k ids.
func WriteSampleAllowed(mask []byte, n, limit int, allowed []uint64) error {
	switch {
	case n < 1 || n > sampleMaxVocab:
		return sampleInvalid("vocabulary of %d ids, want 1..%d", n, sampleMaxVocab)
	case limit < 1 || limit > n:
		return sampleInvalid("%d producible ids, want 1..%d", limit, n)
	case len(mask) < SampleMaskBytes(n):
		return sampleInvalid("mask of %d bytes, want %d", len(mask), SampleMaskBytes(n))
	case allowed != nil && len(allowed) < (n+63)/64:
		return sampleInvalid("allowed set of %d words, want %d", len(allowed), (n+63)/64)
	}
	for w := range sampleWords(n) {
		var banned uint32
		if allowed != nil {
			banned = ^uint32(allowed[w/2] >> (32 * (w % 2)))
		}
		if lo := 32 * w; lo+32 > limit {
			banned |= ^uint32(0) << max(limit-lo, 0)
		}
		binary.LittleEndian.PutUint32(mask[4*w:], banned)
	}
	return nil
}

// ReadSampleRecord decodes a record the sampler wrote (read it after the
// command buffer completed).
func ReadSampleRecord(b []byte) (SampleRecord, error) {
	var r SampleRecord
	if len(b) < SampleRecordBytes {
		return r, sampleInvalid("record of %d bytes, want %d", len(b), SampleRecordBytes)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), SampleRecordBytes), b)
	return r, nil
}

// Sampling names the buffers of one [Kernels.Sample].
type Sampling struct {
	// Logits is float32[N], the step's lm_head output; it is only read.
	Logits View
	N      int
	// Mask is SampleMaskBytes(N) bytes (WriteSampleMask): one per model,
	// or one per request where a request bans more (a grammar's bans OR'ed
	// in).
	Mask View
	// State is SampleStateBytes(N) bytes, one per request in flight
	// (WriteSampleState at its start).
	State View
	// Out is the uint32 token slot the next step's Embed reads.
	Out View
	// Record, if it has a buffer, receives a SampleRecord with TopLogprobs
	// alternatives (0..SampleMaxTopLogprobs). Steps in flight together need
	// records of their own.
	Record      View
	TopLogprobs int
}

// Sample encodes one dispatch that draws the next token from s.Logits with
// the request's settings in s.State and writes it to s.Out, as
// engine/sample's Sampler does on the CPU: mask, logit bias, penalties over
// the prompt and the generated ids, greedy (the first maximum, NaN never wins) or
// temperature, top-k, top-p and min-p, and a Philox4x32-10 draw keyed by
// the request's seed and a counter the kernel keeps in State, so a seed
// gives the same ids on every run and the host patches nothing per step.
// It writes SampleNoToken when no id can be picked, SampleBadLogits for a
// row holding NaN or +Inf. Bad views or sizes wrap gpu.ErrInvalid.
//
// One dispatch of one threadgroup, in place of Argmax. It reads the logits
// once (with the mask, and the touched bitset and the counts of the
// touched ids when penalised or biased, and the biases of the biased
// ids: 1,024,384 bytes for N = 248,320 without either) for greedy, top-k up to SampleList and top-p/min-p cuts that
// fall within the SampleList best. A cut past them is searched over the
// logits again: 8 passes per threshold (top-k, top-p), up to 6 more when
// ids tie on the cut's logit, and one for the draw, so a nucleus alone
// costs 9 more passes and top-k past the list with top-p at most 29.
func (k *Kernels) Sample(cb gpu.CommandBuffer, s Sampling) error {
	const op = "Sample"
	if s.N < 1 || s.N > sampleMaxVocab {
		return sampleInvalid("vocabulary of %d ids, want 1..%d", s.N, sampleMaxVocab)
	}
	words := sampleWords(s.N)
	views := []viewBytes{
		{"logits", s.Logits, 4 * s.N}, {"mask", s.Mask, 4 * words},
		{"state", s.State, SampleStateBytes(s.N)}, {"out", s.Out, 4},
	}
	args := SampleArgs{N: int32(s.N), TopLogprobs: -1}
	record := s.Out
	if s.Record.Buf != nil {
		if s.TopLogprobs < 0 || s.TopLogprobs > SampleMaxTopLogprobs {
			return sampleInvalid("%d top logprobs, want 0..%d", s.TopLogprobs, SampleMaxTopLogprobs)
		}
		views = append(views, viewBytes{"record", s.Record, SampleRecordBytes})
		args.TopLogprobs = int32(s.TopLogprobs)
		record = s.Record
	}
	if err := requireViews(op, views); err != nil {
		return err
	}
	p, err := k.Pipeline(sampleFile, "sample_f32")
	if err != nil {
		return err
	}
	// A thread per 4 ids up to the largest threadgroup: small vocabularies
	// (the fixtures) take one simd-group.
	threads := denseThreads(p, min(SampleMaxThreads, (s.N+4*gpu.SimdWidth-1)/(4*gpu.SimdWidth)*gpu.SimdWidth))
	return cb.Dispatch(&gpu.Dispatch{
		Pipeline: p, Groups: denseSize(1), Threads: denseSize(threads),
		Args: []gpu.Arg{
			gpu.BytesArg(0, Bytes(&args)),
			s.Logits.Arg(1), s.Mask.Arg(2),
			s.State.Arg(3), s.State.At(sampleHeaderBytes).Arg(4), s.State.At(sampleHeaderBytes + 4*words).Arg(5),
			s.Out.Arg(6), record.Arg(7),
			s.State.At(sampleBiasAt(s.N)).Arg(8), s.State.At(sampleBiasAt(s.N) + 4*SampleMaxBias).Arg(9),
		},
	})
}
