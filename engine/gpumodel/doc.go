// Package gpumodel is the GPU backend: the model's forward pass as Petal's
// Metal kernels (package shaders) dispatched through a gpu.Device — the
// Metal driver on a Mac, the simulated-Metal driver everywhere else, with
// the identical dispatch sequence.
//
// # Decode step
//
// One token is one command buffer holding one concurrent compute pass:
// embedding gather (the token id read on the GPU from a slot), then per
// layer the mixer and the MoE block, and finally the final norm, the
// lm_head product and an argmax that writes the next token id into the
// slot the next step reads. Barriers sit only between dependent ops, so
// independent products (q/k/v, the router and the shared expert, ...)
// share a dependency level. Only the residual stream passes between
// blocks: each block's first products compute the RMSNorm before them
// themselves, its last product adds into the stream (the MoE's ends in
// the combine), so norms and residual adds take no level of their own. In greedy generation two steps are in flight:
// the CPU encodes step n+1 while the GPU runs step n, and never reads a
// token back before deciding to stop.
//
// # Weights
//
// Every safetensors shard is wrapped (gpu.Device.WrapNoCopy of the mmapped
// file: used in place on Metal, copied once to device memory on CUDA);
// quantized matrices are views into those buffers. Only the small vectors
// (norm gains, conv taps, gates) are converted to float32 buffers at load.
//
// # Prefill
//
// A prompt of at least prefillMinTokens runs in chunks: every matrix
// product is a token-tiled GEMM that dequantizes each weight tile into
// threadgroup memory once per chunk; attention runs over
// the chunk and the cache, the DeltaNet conv in one dispatch and its
// recurrence in the chunked form (64-token blocks of small matrix products,
// the fp32 state in registers across the chunk); the MoE is a grouped GEMM
// over a routing (histogram, scan, scatter, block map) built on the GPU in
// the same chunk, so nothing is read back until the logits. Shorter runs
// take the decode kernels one token at a time.
//
// # Batched steps
//
// Model.Step runs several sequences' rows (engine.Stepper) as one pass
// over all their tokens, in activations the model keeps: the products
// are the prefill's token-tiled GEMMs and the MoE its grouped GEMM, so
// each weight is read once for every row, while each row's attention and
// DeltaNet run over its own sequence's caches and state, in one level
// beside the other rows': a decode row through the decode kernels, a run
// of tokens (a prompt piece, draft tokens) through the prefill's. Each
// row's logits are copied to the host; the device sampler per row is not
// wired yet.
//
// # Bounded command buffers
//
// macOS ends a command buffer that keeps the GPU too long, so none may
// carry more work than the base M1 finishes in 250 ms at its full rate
// (cost.go: every op's flops and bytes from its shapes). A chunk is cut
// into command buffers between layers, and at long contexts its attention
// into blocks of query rows; a decode step is far below the bound even at
// the model's last position, and a prompt's few decode steps share a
// command buffer only within it.
package gpumodel
