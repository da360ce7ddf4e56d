// argmax.metal: index of the largest value, written where the next decode
// step reads its token.
//
//   out[args.out_index] = min { i : x[i] == max_j x[j] }, or
//                         SAMPLE_BAD_LOGITS when a value is NaN or the
//                         largest is +Inf (the model's output is broken)
//
// Layout: x is float[n]; out is uint[] (token slots).
// Mapping: one threadgroup. Thread t scans t, t + threads, t + 2*threads,
// ... in rounds of ARGMAX_UNROLL loads issued before any compare, so each
// simd-group load reads 128 contiguous bytes and several are in flight.
// Within a thread indices only grow, so a strict > keeps the first maximum;
// simd-groups reduce with simd_max, then simd_min of the index among equal
// values (the lowest index wins), and simd-group 0 reduces the per-simd-group
// winners the same way.
// Threadgroup memory: a value, an index and a NaN flag per simd-group.
// CPU reference: first index of the maximum, as engine/sample's greedy pick.
#include <metal_stdlib>
#include "args.h"
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
    threadgroup uint best_index[ARGMAX_MAX_SIMDGROUPS];

    threadgroup uint bad_rows[ARGMAX_MAX_SIMDGROUPS];
    float v = -INFINITY;
    uint idx = 0xffffffffu;
    uint bad = 0u;
    for (int base = int(tid); base < args.n; base += ARGMAX_UNROLL * int(threads)) {
        float xs[ARGMAX_UNROLL];
        for (int u = 0; u < ARGMAX_UNROLL; u++) {
            const int i = base + u * int(threads);
            xs[u] = i < args.n ? x[i] : NAN;
        }
        for (int u = 0; u < ARGMAX_UNROLL; u++) {
            bad |= isnan(xs[u]) && base + u * int(threads) < args.n ? 1u : 0u;
            if (xs[u] > v || (idx == 0xffffffffu && !isnan(xs[u]))) {
                v = xs[u];
                idx = uint(base + u * int(threads));
            }
        }
    }
    float m = simd_max(v);
    uint mi = simd_min(v == m ? idx : 0xffffffffu);
    const uint sbad = simd_max(bad);
    if (lane == 0) {
        best_value[sg] = m;
        best_index[sg] = mi;
        bad_rows[sg] = sbad;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (sg == 0) {
        float bv = lane < simdgroups ? best_value[lane] : -INFINITY;
        uint bi = lane < simdgroups ? best_index[lane] : 0xffffffffu;
        float bm = simd_max(bv);
        uint winner = simd_min(bv == bm ? bi : 0xffffffffu);
        const uint tbad = simd_max(lane < simdgroups ? bad_rows[lane] : 0u);
        if (lane == 0) {
            out[args.out_index] = tbad != 0u || bm == INFINITY ? SAMPLE_BAD_LOGITS : winner;
        }
    }
}
