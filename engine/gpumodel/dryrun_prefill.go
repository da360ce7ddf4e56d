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
	Position    int   // positions cached before the chunk
	Tokens      int   // tokens in the chunk
	Dispatches  int   // kernels in the chunk's command buffer
	Levels      int   // dependency levels: runs of dispatches between barriers
	WeightBytes int64 // weight bytes the chunk reads: every matrix once, the experts the chunk can route to, the embedding rows
	CacheBytes  int64 // KV rows the attention kernels read (each threadgroup's tokens read their prefix once; no reuse across threadgroups assumed) and the DeltaNet states read and written once
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
	ckpt, err := checkpoint.ShapeOnly(cfg)
	if err != nil {
		return ChunkReport{}, err
	}
	dev := record.New()
	m, err := New(ckpt, dev)
	if err != nil {
		return ChunkReport{}, err
	}
	defer m.Close()
	m.prefillChunk = tokens
	s, err := m.newSequence()
	if err != nil {
		return ChunkReport{}, err
	}
	defer s.Close()
	if err := s.ensureCapacity(pos + tokens); err != nil {
		return ChunkReport{}, err
	}
	if err := s.ensureTokens(tokens + 1); err != nil {
		return ChunkReport{}, err
	}
	if err := s.ensureChunk(tokens, false); err != nil {
		return ChunkReport{}, err
	}
	cb, err := dev.NewCommandBuffer()
	if err != nil {
		return ChunkReport{}, err
	}
	next := s.slot(tokens)
	if err := s.encodeChunk(cb, chunk{pos: pos, slot: 0, n: tokens, logits: lastLogits, next: &next}); err != nil {
		return ChunkReport{}, err
	}
	tr := cb.Trace()
	// Each attention threadgroup's tokens read rows 0 .. pos+its last
	// token once.
	var rows int64
	if m.hasAttention() {
		g, err := m.k.AttnPrefillGroupTokens(m.attn)
		if err != nil {
			return ChunkReport{}, err
		}
		g = min(g, (tokens+shaders.AttnPrefillTokens-1)/shaders.AttnPrefillTokens*shaders.AttnPrefillTokens)
		for t0 := 0; t0 < tokens; t0 += g {
			rows += int64(pos + min(t0+g, tokens))
		}
	}
	return ChunkReport{
		Position: pos, Tokens: tokens, Dispatches: tr.Dispatches(), Levels: tr.Levels(),
		WeightBytes: ckpt.StepWeightBytes(tokens),
		CacheBytes:  attnCacheBytes(cfg, rows) + deltaStateBytes(cfg),
	}, nil
}
