// moe.metal: the sparse MoE block's glue around its matrix products: router
// softmax and top-k, the SwiGLU product, and the weighted combine with the
// gated shared expert.
//
//   router_topk_f32: p = softmax(logits) over all n experts (fp32);
//                    ids[0..k) = the k largest logits, largest first, ties to
//                    the lower index (NaN ranks below every number);
//                    weights[j] = p[ids[j]], divided by sum_j p[ids[j]] when
//                    args.normalize
//   silu_mul_f32:    out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g)
//   moe_combine_f32: out[i] = sum_j weights[j] * ys[j][i] + sigmoid(sg[0]) * shared[i]
//
// Layout: logits, weights, gate, up, ys ([k][n] rows), shared and out are
// float; ids is uint[k]; sg is one float (the shared expert gate's logit).
// Mapping: router_topk_f32 is one simd-group; lane l holds the logits of
// experts l, l+32, ... (at most MOE_MAX_EXPERTS/32) in registers and a mask
// of those already taken; each of the k rounds is a simd_max of the lanes'
// best values and a simd_min of the indices that reach it. The other two
// are one thread per element.
// Threadgroup memory: none.
// CPU reference: engine/cpu Sequence.moe (stable sort by logit, softmax in
// float64 there, fp32 here; silu and sigmoid as engine/cpu's).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant constexpr uint ROUTER_NONE = 0xffffffffu;

kernel void router_topk_f32(
    constant MoEArgs& args [[buffer(0)]],
    device const float* logits [[buffer(1)]],
    device uint* ids [[buffer(2)]],
    device float* weights [[buffer(3)]],
    uint lane [[thread_index_in_simdgroup]])
{
    constexpr int per_lane = MOE_MAX_EXPERTS / 32;
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

kernel void silu_mul_f32(
    constant MoEArgs& args [[buffer(0)]],
    device const float* gate [[buffer(1)]],
    device const float* up [[buffer(2)]],
    device float* out [[buffer(3)]],
    uint i [[thread_position_in_grid]])
{
    if (int(i) >= args.n) {
        return;
    }
    const float g = gate[i];
    out[i] = g / (1.0f + exp(-g)) * up[i];
}

kernel void moe_combine_f32(
    constant MoEArgs& args [[buffer(0)]],
    device const float* ys [[buffer(1)]],
    device const float* weights [[buffer(2)]],
    device const float* shared [[buffer(3)]],
    device const float* shared_gate [[buffer(4)]],
    device float* out [[buffer(5)]],
    uint i [[thread_position_in_grid]])
{
    if (int(i) >= args.n) {
        return;
    }
    float acc = 0.0f;
    for (int j = 0; j < args.k; j++) {
        acc += weights[j] * ys[ulong(j) * ulong(args.n) + i];
    }
    const float g = 1.0f / (1.0f + exp(-shared_gate[0]));
    out[i] = acc + g * shared[i];
}
