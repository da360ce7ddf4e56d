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
// kernel alone, prepends cuda_compat.h (MSL types, math, simd-group
// functions as warp intrinsics, 8x8 simdgroup matrices spread over a warp,
// atomics) and compiles it with NVRTC for the card's architecture (sm_90
// on an H200), IEEE arithmetic without contraction. Cubins are cached by
// the hash of NVRTC's version, the flags, the header and the text, under
// $PETAL_CUDA_CACHE or os.UserCacheDir()/petal/cuda.
//
// # Memory
//
// NewBuffer returns managed memory, which the CPU reads and writes in place
// through Contents and the driver migrates to the GPU when a kernel touches
// it; WrapNoCopy copies the region (a checkpoint shard) to device memory
// once, so weights are read from HBM. Info's working set is the card's free
// memory, which the memory-fit check compares a model with.
//
// # Executing
//
// Every command buffer runs on the device's one stream, in commit order,
// each dispatch after the one before it (so every barrier is honoured and
// dispatches of one level do not overlap). setBytes data is copied to
// stream-ordered device memory at commit. Hazards the sim reports (races,
// divergence, out-of-bounds access) are compute-sanitizer's to find here:
// tools/cuda/device-tests.sh runs its four tools over the shaders tests.
//
// $PETAL_CUDA_PROFILE=1 brackets every launch with timing events and prints
// per-kernel GPU time and the host's launch time at Close.
package cuda
