// Package fit decides whether a model fits a machine's GPU memory, and at
// which context length: the check behind `petal fit`, the setup screen, and
// every model load.
//
// # What is counted
//
// Everything the GPU backend (package petal/engine/gpumodel) holds:
//
//   - the weights, mapped from the safetensors shards as they are on disk;
//   - the copies of weights that lie misaligned for the kernels in their
//     shard (an MLX-written folder that petal pull did not realign), made
//     once at load;
//   - the model's float32 copies of its small vectors;
//   - the KV caches of the 10 attention layers at the context's capacity
//     (the caches grow by doubling, so a context is paid for at the next
//     power of two), the attention scratch, and the moment during the
//     last doubling when the old cache and the new live side by side;
//   - per resident sequence (the one generating plus the cached sessions),
//     the Gated DeltaNet conv and recurrent state and the per-step
//     activations;
//   - the chunk activations of the prompt being processed, which live
//     only while it runs and never together with the caches' growth
//     peak, so the larger of the two is counted;
//   - a fixed margin for the runtime: Metal's own objects, compiled
//     pipelines, the tokenizer and the Go heap.
//
// The device figures come from gpumodel.MeasureFootprints, which runs the
// backend's own allocation code on a recording driver, so they are what
// Petal allocates, not what the model could use: the KV cache is fp16,
// 20 KiB per token, the figure MODEL.md gives for a 16-bit cache.
//
// # The budget
//
// The budget is the caller's to give, and this package opens no device
// for it. A GPU's is what the device that will run the model says it can
// use ([Device] of its gpu.Info: Metal's recommendedMaxWorkingSetSize,
// never the physical memory; an NVIDIA card's free memory). Where the
// model's memory is the host's (the CPU backend, the simulator), [Host]
// is the memory Linux reports available, or on a Mac the share of its
// memory Metal grants by default. [SimulatedMac] derives a Mac's from a
// memory size with the rule macOS applies (see [WorkingSetFraction]).
//
// # Before a load
//
// [ForLoad] turns a check into what a load does: run at the asked context,
// at the largest that fits when only a shorter one does, or not at all
// (a [NoFitError] that names the verdict and the largest context). The
// headroom at the chosen context bounds the prefix cache.
//
// # Units
//
// Every size this package prints is in decimal units ([FormatBytes]: GB
// are 10^9 bytes), as the web UI, disks and the Hub count them; JSON
// carries bytes. Only the names of Macs' memory sizes are Apple's binary
// ones: a "32 GB" Mac has 32 GiB, 34.4 GB.
package fit
