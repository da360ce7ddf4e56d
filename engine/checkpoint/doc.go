// Package checkpoint opens a Qwen3.5/3.6 MoE checkpoint in the MLX layout:
// it reads config.json (nested under text_config or flat), maps every
// safetensors shard, and checks each tensor the model needs against the
// config (present, dtype, shape, quantization) before anything computes.
//
// # Weights
//
// Nothing is copied: a [Matrix] or [Vector] refers to bytes inside the
// memory-mapped shards. Matrices are MLX affine-quantized (4 or 8 bits,
// bf16 scales and biases, groups along the input dimension) or dense (BF16,
// F32); which one is decided per tensor from the presence of ".scales" and
// the config's quantization overrides.
//
// # Errors
//
// Every error about the files is marked [ErrBadModel] and names the file,
// the tensor, what was expected and what was found.
package checkpoint
