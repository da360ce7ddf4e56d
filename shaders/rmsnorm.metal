// rmsnorm.metal: RMS normalisation of rows, alone or fused with the
// residual add that precedes it.
//
//   rmsnorm_f32:     y[r][i] = x[r][i] * rsqrt(mean_i(x[r][i]^2) + eps) * (weight_offset + w[i])
//   add_rmsnorm_f32: x[i] += d[i]; y[i] = x[i] * rsqrt(mean_i(x[i]^2) + eps) * (weight_offset + w[i])
//
// Layout: x, d and y are float rows args.row_stride elements apart (for
// rmsnorm_f32 y may alias x; for add_rmsnorm_f32 y may alias d but not x);
// w is float[n]. The checkpoint's gains already hold the 1 that
// transformers adds, so the host passes weight_offset 0.
// Mapping: one threadgroup per row (threadgroup_position_in_grid.x); thread t
// handles elements t, t + threads, ...; any threadgroup size up to 1024.
// add_rmsnorm_f32 rereads the sums it wrote itself
// (same thread, same element), so it needs no device barrier.
// Threadgroup memory: one float per simd-group for the partial sums.
// CPU reference: engine/cpu rmsNorm (fp32 values, the sum of squares in
// float64 there, fp32 here) and the residual add of Sequence.chunk.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// row_scale is rsqrt(mean square + eps) from each thread's partial sum of
// squares; every thread of the threadgroup must call it.
METAL_FUNC float row_scale(
    float ss, int n, float eps, threadgroup float* partial,
    uint sg, uint lane, uint simdgroups)
{
    ss = simd_sum(ss);
    if (lane == 0) {
        partial[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint s = 0; s < simdgroups; s++) {
        total += partial[s];
    }
    return rsqrt(total / float(n) + eps);
}

kernel void rmsnorm_f32(
    constant RMSNormArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const float* w [[buffer(2)]],
    device float* y [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    threadgroup float partial[RMSNORM_MAX_SIMDGROUPS];
    device const float* xr = x + row * args.row_stride;
    device float* yr = y + row * args.row_stride;

    float ss = 0.0f;
    for (int i = int(tid); i < args.n; i += int(threads)) {
        float v = xr[i];
        ss += v * v;
    }
    const float scale = row_scale(ss, args.n, args.eps, partial, sg, lane, simdgroups);
    for (int i = int(tid); i < args.n; i += int(threads)) {
        yr[i] = xr[i] * scale * (args.weight_offset + w[i]);
    }
}

kernel void add_rmsnorm_f32(
    constant RMSNormArgs& args [[buffer(0)]],
    device float* x [[buffer(1)]],
    device const float* d [[buffer(2)]],
    device const float* w [[buffer(3)]],
    device float* y [[buffer(4)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    threadgroup float partial[RMSNORM_MAX_SIMDGROUPS];
    device float* xr = x + row * args.row_stride;
    device const float* dr = d + row * args.row_stride;
    device float* yr = y + row * args.row_stride;

    float ss = 0.0f;
    for (int i = int(tid); i < args.n; i += int(threads)) {
        float v = xr[i] + dr[i];
        xr[i] = v;
        ss += v * v;
    }
    const float scale = row_scale(ss, args.n, args.eps, partial, sg, lane, simdgroups);
    for (int i = int(tid); i < args.n; i += int(threads)) {
        yr[i] = xr[i] * scale * (args.weight_offset + w[i]);
    }
}
