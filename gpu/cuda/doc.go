// Package cuda is a gpu driver for NVIDIA GPUs: the same Metal Shading
// Language kernels the Mac and the sim run, compiled at run time for the
// card in hand. libcuda and libnvrtc are loaded with purego, so the package
// builds with CGO_ENABLED=0 everywhere and [Open] fails with a clear
// gpu.ErrUnsupported ([ErrNoDriver], [ErrNoDevice], [ErrNoCompiler]) where
// no NVIDIA driver, GPU or NVRTC is present.
//
// # Compiling
//
// NewPipeline rewrites the source with petal/gpu/msl (Apple's rules are
// checked as on every driver), emitting an entry point for the asked
// kernel alone, prepends cuda_compat.h (MSL math, simd-group functions as
// warp intrinsics, 8x8 simdgroup matrices spread over a warp, atomics, over
// the vector types and math petal/gpu/msl shares with the sim) and compiles
// it with NVRTC for the card's architecture (sm_90 on an H200), IEEE
// arithmetic without contraction. Cubins are cached by
// the hash of NVRTC's version, the flags, the headers and the text, under
// $PETAL_CUDA_CACHE or os.UserCacheDir()/petal/cuda.
//
// # Memory
//
// NewBuffer returns managed memory, which the CPU reads and writes in place
// through Contents and the driver migrates to the GPU when a kernel touches
// it; WrapNoCopy and Upload copy the region (a checkpoint shard, a
// misaligned tensor) to device memory once, so weights are read from HBM,
// and their Contents is the region itself. Info's working set is the card's
// free memory, which the memory-fit check compares a model with.
//
// # Executing
//
// Every command buffer runs on the device's one stream, in commit order.
// By default a command buffer replays a CUDA graph of its shape (its
// kernels and their dependency levels; graph.go): each dispatch is a
// kernel node depending on the dispatches of the level before, so every
// barrier is honoured and the dispatches of one level may run at once, as
// in Metal's concurrent pass. The graph is built at the first command
// buffer of its shape, and later ones update only the nodes whose launch
// changed; setBytes data is copied on the stream into the graph's own
// device memory before each replay. $PETAL_CUDA_GRAPHS=serial chains the
// nodes in encoding order; =off launches each dispatch with cuLaunchKernel
// after copying the setBytes data to stream-ordered memory. Hazards the
// sim reports (races, divergence, out-of-bounds access) are
// compute-sanitizer's to find here: tools/cuda/device-tests.sh runs its
// four tools over the shaders tests.
//
// $PETAL_CUDA_PROFILE=1 builds each graph as a chain with an event node
// after every kernel, waits for each command buffer, and prints per-kernel
// GPU time (back to back) and the host's time in Commit at Close.
//
// The graph entry points (cuGraphInstantiateWithFlags) need a CUDA 11.4 or
// later driver, which Open requires whatever the mode.
package cuda
