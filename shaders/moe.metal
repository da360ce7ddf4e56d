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
// tokens: logits, ids and weights rows packed) running router_topk_simd
// (router.h): lane l holds the logits of
// experts l, l+32, ... (at most MOE_MAX_EXPERTS/32) in registers and a mask
// of those already taken; each of the k rounds is a simd_max of the lanes'
// best values and a simd_min of the indices that reach it.
// Threadgroup memory: none.
// CPU reference: engine/cpu Sequence.moe (stable sort by logit, softmax in
// float64 there, fp32 here).
#include <metal_stdlib>
#include "args.h"
#include "router.h"
using namespace metal;

[[max_total_threads_per_threadgroup(ROUTER_THREADS)]]
kernel void router_topk_f32(
    constant MoEArgs& args [[buffer(0)]],
    device const float* logits [[buffer(1)]],
    device uint* ids [[buffer(2)]],
    device float* weights [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]])
{
    // Rows (prefill tokens) are threadgroups: row r's logits, ids and
    // weights follow r-1's.
    logits += ulong(row) * ulong(args.n);
    ids += ulong(row) * ulong(args.k);
    weights += ulong(row) * ulong(args.k);
    uint id;
    float w;
    router_topk_simd(args, logits, lane, id, w);
    if (id != ROUTER_NONE) {
        ids[lane] = id;
        weights[lane] = w;
    }
}
