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

    if (int(tid) >= args.n) {
        return;
    }
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
