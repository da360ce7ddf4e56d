package gpumodel

import (
	"fmt"

	"petal/engine/checkpoint"
	"petal/gpu/record"
	"petal/shaders"
)

// DefaultPrefillChunk is the tokens per prefill command buffer.
const DefaultPrefillChunk = defaultPrefillChunk

// stateFloatBytes is the size of one DeltaNet state or conv element
// (float32); the KV caches hold shaders.KVElementBytes per element.
const stateFloatBytes = 4

// DecodeCacheBytes is what a decode step at position pos moves besides
// weights: the K and V rows 0..pos of every attention layer (read), and
// every DeltaNet layer's recurrent state and conv window (read and
// written).
func DecodeCacheBytes(cfg *checkpoint.Config, pos int) int64 {
	return attnCacheBytes(cfg, int64(pos+1)) + deltaStateBytes(cfg)
}

// attnCacheBytes is the K and V bytes of rows positions over every
// attention layer.
func attnCacheBytes(cfg *checkpoint.Config, rows int64) int64 {
	var n int64
	for _, k := range cfg.Layers {
		if k == checkpoint.Attention {
			n += 2 * rows * int64(cfg.KVHeads*cfg.HeadDim) * shaders.KVElementBytes
		}
	}
	return n
}

// deltaStateBytes is every DeltaNet layer's state and conv window, read
// once and written once.
func deltaStateBytes(cfg *checkpoint.Config) int64 {
	var n int64
	state := int64(cfg.LinearValueHeads*cfg.LinearKeyDim*cfg.LinearValueDim) + int64(cfg.ConvChannels()*(cfg.ConvKernel-1))
	for _, k := range cfg.Layers {
		if k == checkpoint.DeltaNet {
			n += 2 * state * stateFloatBytes
		}
	}
	return n
}

// ChunkReport describes one recorded prefill chunk.
type ChunkReport struct {
	Position       int   // positions cached before the chunk
	Tokens         int   // tokens in the chunk
	CommandBuffers int   // command buffers the chunk is cut into
	Dispatches     int   // kernels in the chunk's command buffers
	Levels         int   // dependency levels: runs of dispatches between barriers
	WeightBytes    int64 // weight bytes the chunk reads: every matrix once, the experts the chunk can route to, the embedding rows
	CacheBytes     int64 // KV rows the attention kernels read (each threadgroup's tokens read their prefix once; no reuse across threadgroups assumed) and the DeltaNet states read and written once
	// MaxCommandBuffer is the cost of the chunk's costliest command
	// buffer.
	MaxCommandBuffer Cost
}

// BytesMoved is the chunk's weight and cache traffic.
func (r ChunkReport) BytesMoved() int64 { return r.WeightBytes + r.CacheBytes }

// TokensPerSecond is the prefill rate a memory bandwidth of
// bytesPerSecond allows if the chunk's traffic were all it paid for.
func (r ChunkReport) TokensPerSecond(bytesPerSecond float64) float64 {
	return float64(r.Tokens) * bytesPerSecond / float64(r.BytesMoved())
}

// DryRunPrefill records the prefill chunk of tokens tokens after pos
// cached positions (logits of the last one, argmax on the GPU) for a model
// of cfg's shape, without its weights, through the encoding the drivers
// run.
func DryRunPrefill(cfg *checkpoint.Config, pos, tokens int) (ChunkReport, error) {
	if pos < 0 || tokens < prefillMinTokens {
		return ChunkReport{}, fmt.Errorf("gpumodel: a prefill chunk of %d tokens after %d positions (at least %d tokens)", tokens, pos, prefillMinTokens)
	}
	m, err := newShapeOnly(cfg, record.New())
	if err != nil {
		return ChunkReport{}, err
	}
	defer m.Close()
	return m.dryRunPrefill(pos, tokens)
}

func (m *Model) dryRunPrefill(pos, tokens int) (ChunkReport, error) {
	m.prefillChunk = tokens
	s, err := m.sequenceFor(pos + tokens)
	if err != nil {
		return ChunkReport{}, err
	}
	defer s.Close()
	if err := s.ensureTokens(tokens + 1); err != nil {
		return ChunkReport{}, err
	}
	if err := s.ensureChunk(tokens, false); err != nil {
		return ChunkReport{}, err
	}
	r := ChunkReport{Position: pos, Tokens: tokens, WeightBytes: m.ckpt.StepWeightBytes(tokens), CacheBytes: deltaStateBytes(m.cfg)}
	next := s.slot(tokens)
	err = s.encodeChunk(chunk{pos: pos, slot: 0, n: tokens, logits: lastLogits, next: &next}, tally(&r.CommandBuffers, &r.Dispatches, &r.Levels, &r.MaxCommandBuffer))
	if err != nil {
		return ChunkReport{}, err
	}
	// Each attention threadgroup's tokens read rows 0 .. pos+its last
	// token once.
	if m.hasAttention() {
		g, err := m.attnGroupTokens()
		if err != nil {
			return ChunkReport{}, err
		}
		g = min(g, shaders.AttnPrefillRows(tokens))
		var rows int64
		for t0 := 0; t0 < tokens; t0 += g {
			rows += int64(pos + min(t0+g, tokens))
		}
		r.CacheBytes += attnCacheBytes(m.cfg, rows)
	}
	return r, nil
}
