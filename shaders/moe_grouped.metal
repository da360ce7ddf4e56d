// moe_grouped.metal: routing for the grouped expert GEMM of prefill, built
// on the GPU (no CPU round trip), and the per-token combine after it.
//
//   moe_route:           a counting sort of the (token, choice) pairs by
//                        expert: histogram, prefix scan, scatter, block map.
//                        Pair p = t*k + j routes to expert ids[p]; its slot
//                        is offset[e] + (pairs before p routed to e), so
//                        the order is stable; map[slot] = p, slot_of[p] =
//                        slot (0xffffffff for a dropped id); blocks holds
//                        (e, m0, m_end, 0) for each QMM_BM-slot tile of each
//                        expert, in expert order, then zero sentinels up to
//                        the capacity.
//   moe_combine_rows_f32: out[t][i] = sum_j w[t*k+j] * ys[slot_of[t*k+j]][i]
//                        + sigmoid(sg[t]) * shared[t][i]
//   swiglu_f32:          out[i] = silu(gate[i]) * up[i] over n floats (the
//                        experts' and the shared expert's gate and up rows)
//
// Layout: ids, map, slot_of uint[pairs]; blocks uint4[capacity]; w float
// [pairs]; ys float[pairs][n]; sg float[tokens]; shared, out float[tokens][n].
// Mapping: moe_route is one threadgroup; thread e handles experts e, e +
// threads, ...: it counts its pairs (a pass over ids), thread 0 scans the
// counts serially (at most MOE_MAX_EXPERTS), then each thread scatters its
// experts' pairs in order and writes their blocks; the sentinels are
// strided over all threads. Nothing depends on thread order, so the result
// is deterministic. moe_combine_rows_f32: one thread per element, grid.y the
// token; swiglu_f32: one thread per element.
// Threadgroup memory: moe_route, two uint[MOE_MAX_EXPERTS] arrays (slot and
// tile offsets) and the tile total.
// CPU reference: engine/cpu Sequence.moe (the weighted sum of the chosen
// experts' outputs plus the gated shared expert, silu as engine/cpu's), per
// token.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant constexpr uint ROUTE_NONE = 0xffffffffu;

kernel void moe_route(
    constant MoERouteArgs& args [[buffer(0)]],
    device const uint* ids [[buffer(1)]],
    device uint* map [[buffer(2)]],
    device uint* slot_of [[buffer(3)]],
    device uint4* blocks [[buffer(4)]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]])
{
    threadgroup uint offset[MOE_MAX_EXPERTS];
    threadgroup uint tile[MOE_MAX_EXPERTS];
    threadgroup uint total_tiles[1];
    const uint experts = uint(args.experts);
    const uint pairs = uint(args.pairs);
    for (uint e = tid; e < experts; e += threads) {
        uint c = 0;
        for (uint p = 0; p < pairs; p++) {
            c += ids[p] == e ? 1u : 0u;
        }
        offset[e] = c;
    }
    for (uint p = tid; p < pairs; p += threads) {
        if (ids[p] >= experts) {
            slot_of[p] = ROUTE_NONE;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        uint slots = 0;
        uint tiles = 0;
        for (uint e = 0; e < experts; e++) {
            const uint c = offset[e];
            offset[e] = slots;
            tile[e] = tiles;
            slots += c;
            tiles += (c + QMM_BM - 1) / QMM_BM;
        }
        total_tiles[0] = tiles;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < experts; e += threads) {
        const uint base = offset[e];
        uint n = 0;
        for (uint p = 0; p < pairs; p++) {
            if (ids[p] == e) {
                map[base + n] = p;
                slot_of[p] = base + n;
                n++;
            }
        }
        for (uint i = 0; i * QMM_BM < n; i++) {
            const uint m0 = base + i * QMM_BM;
            blocks[tile[e] + i] = uint4(e, m0, min(base + n, m0 + QMM_BM), 0u);
        }
    }
    for (uint b = total_tiles[0] + tid; b < uint(args.capacity); b += threads) {
        blocks[b] = uint4(0u);
    }
}

[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]]
kernel void moe_combine_rows_f32(
    constant MoEArgs& args [[buffer(0)]],
    device const float* ys [[buffer(1)]],
    device const float* w [[buffer(2)]],
    device const uint* slot_of [[buffer(3)]],
    device const float* shared [[buffer(4)]],
    device const float* sg [[buffer(5)]],
    device float* out [[buffer(6)]],
    uint2 pos [[thread_position_in_grid]])
{
    const int n = args.n;
    if (int(pos.x) >= n) {
        return;
    }
    const ulong t = pos.y;
    float acc = 0.0f;
    for (int j = 0; j < args.k; j++) {
        const ulong p = t * ulong(args.k) + ulong(j);
        const uint slot = slot_of[p];
        const float y = slot == ROUTE_NONE ? NAN : ys[ulong(slot) * ulong(n) + pos.x];
        acc += w[p] * y;
    }
    const float g = sg[t];
    out[t * ulong(n) + pos.x] = acc + shared[t * ulong(n) + pos.x] / (1.0f + exp(-g));
}

[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]]
kernel void swiglu_f32(
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
