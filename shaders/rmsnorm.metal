// rmsnorm.metal: RMS normalisation of rows.
//
//   y[r][i] = x[r][i] * rsqrt(mean_i(x[r][i]^2) + eps) * (weight_offset + w[i])
//
// Layout: x and y are float rows args.row_stride elements apart (y may
// alias x); w is bfloat[n].
// Mapping: one threadgroup per row (threadgroup_position_in_grid.x); thread t
// handles elements t, t + threads, ...; any threadgroup size up to 1024.
// Threadgroup memory: one float per simd-group for the partial sums.
// CPU reference: the engine's RMSNorm (fp32 accumulation).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

kernel void rmsnorm_f32_bf16(
    constant RMSNormArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const bfloat* w [[buffer(2)]],
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
    ss = simd_sum(ss);
    if (lane == 0) {
        partial[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float total = 0.0f;
    for (uint s = 0; s < simdgroups; s++) {
        total += partial[s];
    }
    float scale = rsqrt(total / float(args.n) + args.eps);
    for (int i = int(tid); i < args.n; i += int(threads)) {
        yr[i] = xr[i] * scale * (args.weight_offset + float(w[i]));
    }
}
