// router.h: the MoE router's softmax and top-k in one simd-group, shared by
// router_topk_f32 (moe.metal) and the expert SwiGLU kernel that routes for
// itself (qmv.metal), so both pick the same experts with the same weights.
//
// Lane j (j < args.k) gets the j-th choice in id (largest logit first, ties
// to the lower index, NaN below every number) and its weight p[id], divided
// by the sum over the chosen when args.normalize, else by the sum over all;
// other lanes get ROUTER_NONE. Every lane of the simd-group must call it.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant constexpr uint ROUTER_NONE = 0xffffffffu;

METAL_FUNC void router_topk_simd(constant MoEArgs& args, device const float* logits, uint lane,
                                 thread uint& id, thread float& weight)
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
        // No expert left (k above the experts there are) wins ROUTER_NONE,
        // whose win / 32 would shift by far more than 31.
        if (win != ROUTER_NONE && win % 32u == lane) {
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
    id = mine;
    weight = mine != ROUTER_NONE ? p / (args.normalize != 0 ? chosen : all) : 0.0f;
}
