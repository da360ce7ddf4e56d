// moe.metal: the sparse MoE block's router: softmax and top-k. (Its SwiGLU
// products live in qmv.metal, its combine with the gated shared expert in
// rmsnorm.metal, fused with the residual add and the next norm.)
//
//   router_topk_f32: p = softmax(logits) over all n experts (fp32);
//                    ids[0..k) = the k largest logits, largest first, ties to
//                    the lower index (NaN ranks below every number);
//                    weights[j] = p[ids[j]], divided by sum_j p[ids[j]] when
//                    args.normalize
//
// Layout: logits and weights are float; ids is uint[k].
// Mapping: router_topk_f32 is one simd-group per row (a prefill chunk's
// tokens: logits, ids and weights rows packed); lane l holds the logits of
// experts l, l+32, ... (at most MOE_MAX_EXPERTS/32) in registers and a mask
// of those already taken; each of the k rounds is a simd_max of the lanes'
// best values and a simd_min of the indices that reach it.
// Threadgroup memory: none.
// CPU reference: engine/cpu Sequence.moe (stable sort by logit, softmax in
// float64 there, fp32 here).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant constexpr uint ROUTER_NONE = 0xffffffffu;

kernel void router_topk_f32(
    constant MoEArgs& args [[buffer(0)]],
    device const float* logits [[buffer(1)]],
    device uint* ids [[buffer(2)]],
    device float* weights [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]])
{
    constexpr int per_lane = MOE_MAX_EXPERTS / 32;
    // Rows (prefill tokens) are threadgroups: row r's logits, ids and
    // weights follow r-1's.
    logits += ulong(row) * ulong(args.n);
    ids += ulong(row) * ulong(args.k);
    weights += ulong(row) * ulong(args.k);
    float key[per_lane];
    uint taken = 0; // bit i: expert lane + 32*i chosen already, or absent
    for (int i = 0; i < per_lane; i++) {
        const int e = int(lane) + 32 * i;
        const float v = e < args.n ? logits[e] : -INFINITY;
        key[i] = isnan(v) ? -INFINITY : v;
        if (e >= args.n) {
            taken |= 1u << i;
        }
    }

    uint mine = ROUTER_NONE; // lane j keeps the j-th choice
    float top = 0.0f;
    for (int j = 0; j < args.k; j++) {
        float bv = -INFINITY;
        uint bi = ROUTER_NONE;
        for (int i = 0; i < per_lane; i++) {
            if (((taken >> i) & 1u) == 0 && (key[i] > bv || bi == ROUTER_NONE)) {
                bv = key[i];
                bi = lane + 32u * uint(i);
            }
        }
        const float m = simd_max(bv);
        const uint win = simd_min(bi != ROUTER_NONE && bv == m ? bi : ROUTER_NONE);
        if (j == 0) {
            top = m;
        }
        if (win % 32u == lane) {
            taken |= 1u << (win / 32u);
        }
        if (uint(j) == lane) {
            mine = win;
        }
    }

    float all = 0.0f;
    for (int i = 0; i < per_lane; i++) {
        if (int(lane) + 32 * i < args.n) {
            all += exp(key[i] - top);
        }
    }
    all = simd_sum(all);
    float p = 0.0f;
    if (mine != ROUTER_NONE) {
        const float v = logits[mine];
        p = exp((isnan(v) ? -INFINITY : v) - top);
    }
    const float chosen = simd_sum(p);
    if (mine != ROUTER_NONE) {
        ids[lane] = mine;
        weights[lane] = p / (args.normalize != 0 ? chosen : all);
    }
}
