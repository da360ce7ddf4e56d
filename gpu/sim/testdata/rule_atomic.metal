// Snapshot of shaders/argmax.metal as of commit 9474c35, with args.h inlined, so
// the sim's hazard tests do not move when the real kernels evolve. The
// mutants beside it differ from it in one place each.
// argmax.metal: index of the largest value, written where the next decode
// step reads its token.
//
//   out[args.out_index] = min { i : x[i] == max_j x[j] }
//
// Layout: x is float[n]; out is uint[] (token slots).
// Mapping: one threadgroup; thread t scans t, t + threads, ...; simd-groups
// reduce with simd_max / simd_min (lowest index among equal values), then
// simd-group 0 reduces the per-simd-group winners.
// Threadgroup memory: a value and an index per simd-group.
// CPU reference: first index of the maximum (NaN never wins).
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

kernel void argmax_f32(
    constant ArgmaxArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device uint* out [[buffer(2)]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    threadgroup float best_value[ARGMAX_MAX_SIMDGROUPS];
    threadgroup atomic<ulong> best_index[ARGMAX_MAX_SIMDGROUPS];

    float v = -INFINITY;
    uint idx = 0xffffffffu;
    for (int i = int(tid); i < args.n; i += int(threads)) {
        float xi = x[i];
        if (xi > v || (idx == 0xffffffffu && !isnan(xi))) {
            v = xi;
            idx = uint(i);
        }
    }
    float m = simd_max(v);
    uint mi = simd_min(v == m ? idx : 0xffffffffu);
    if (lane == 0) {
        best_value[sg] = m;
        best_index[sg] = mi;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (sg == 0) {
        float bv = lane < simdgroups ? best_value[lane] : -INFINITY;
        uint bi = lane < simdgroups ? best_index[lane] : 0xffffffffu;
        float bm = simd_max(bv);
        uint winner = simd_min(bv == bm ? bi : 0xffffffffu);
        if (lane == 0) {
            out[args.out_index] = winner;
        }
    }
}
