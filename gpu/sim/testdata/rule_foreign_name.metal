// Snapshot of shaders/rmsnorm.metal as of commit 9474c35, with args.h inlined, so
// the sim's hazard tests do not move when the real kernels evolve. The
// mutants beside it differ from it in one place each.
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
// args.h: the argument structs that host code passes to Petal's kernels at
// [[buffer(0)]] (inline, with setBytes), and the tiling constants both sides
// must agree on.
//
// Conventions (mirrored by the Go structs in args.go, whose layout a test
// checks against this file compiled by the sim):
//   - element counts and indices are int32_t (registers are 32-bit);
//   - byte offsets and strides are uint64_t;
//   - fields are ordered so that no padding is needed, and every struct is
//     a multiple of 16 bytes (explicit _pad fields).
//   - function-constant indices are FC_<OP> + n, each op spaced by 100.

#ifndef PETAL_ARGS_H
#define PETAL_ARGS_H

// ---- rmsnorm.metal
// Simd-groups per threadgroup are at most 1024/32.
#define RMSNORM_MAX_SIMDGROUPS 32

struct RMSNormArgs {
    int32_t n;              // elements per row
    float eps;              // added to the mean square
    float weight_offset;    // gain = weight_offset + w (1 for zero-centred norms)
    int32_t _pad;
    uint64_t row_stride;    // elements between rows of x and y
    uint64_t _pad2;
};

// ---- qmv.metal
// One simd-group computes QMV_ROWS rows; QMV_SIMDGROUPS simd-groups share a
// threadgroup. The host sizes the grid with the same numbers (qmv.go).
#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
// MLX affine quantization: 4-bit codes packed 8 per uint32, low nibble
// first, one bf16 scale and bias per QMV_GROUP_SIZE inputs of a row.
#define QMV_GROUP_SIZE 64
#define QMV_PER_WORD 8

struct QMVArgs {
    int32_t rows;           // output rows
    int32_t k;              // inputs per row; a multiple of QMV_GROUP_SIZE
    int32_t _pad[2];
};

// ---- argmax.metal
#define ARGMAX_MAX_SIMDGROUPS 32

struct ArgmaxArgs {
    int32_t n;              // number of values
    int32_t out_index;      // element of the output written (a token slot)
    int32_t _pad[2];
};

#endif
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
    float scale = 1.0f / sqrtf(total / float(args.n) + args.eps);
    for (int i = int(tid); i < args.n; i += int(threads)) {
        yr[i] = xr[i] * scale * (args.weight_offset + float(w[i]));
    }
}
