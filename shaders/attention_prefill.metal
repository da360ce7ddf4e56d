// attention_prefill.metal: causal gated attention for a chunk of prompt
// tokens over the KV cache, which already holds the chunk's own rows.
//
//   attn_prefill_f16kv: for token t of the chunk and query head h,
//                       o[t][h] = softmax_p(q[t][h] . K[p] * scale) . V[p]
//                       over p <= pos0 + t, times sigmoid(gate[t][h])
//
// Layout: q, gate and o are float[tokens][heads][head_dim] (AttnPrep's q
// and gate per token); the caches are half[capacity][kv_heads][head_dim]
// as in attention.metal (widened to fp32 as they are loaded), rows
// 0 .. pos0+tokens-1 written. Query head h reads KV head h / GROUP.
// Mapping: one threadgroup per (KV head, run of token blocks); simd-group
// s handles query head s % GROUP of that KV head for the block of
// ATTN_PREFILL_TOKENS tokens number s / GROUP of the run (the host picks
// how many blocks a threadgroup takes, up to ATTN_PREFILL_BLOCKS, within
// the pipeline's thread limit). Lane
// l holds dims l, l+32, ... of its head's queries and accumulators for the
// block's tokens in registers (as attn_decode_f16kv does for one); each
// position's K/V row is loaded once per simd-group and serves every token
// of its block that sees it (one simd_sum each); the simd-groups of a
// threadgroup read the same rows at about the same time, so device memory
// sees the prefix about once per threadgroup: tokens / (ATTN_PREFILL_TOKENS
// * blocks) times per chunk. fp32 online softmax (running max, sum,
// accumulator) per token, positions in order.
// Threadgroup memory: none.
// CPU reference: engine/cpu/attention.go (the causal softmax and the sigmoid
// gate), per token, fp32; its tests round the cached K and V to half.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant int HEAD_DIM [[function_constant(FC_ATTN + 0)]];
constant int GROUP [[function_constant(FC_ATTN + 1)]];

// The running max before any score (as attention.metal's ATTN_NO_SCORE):
// finite, so fast-math exp of it minus a score stays defined.
constant float PREFILL_NO_SCORE = -1.0e30f;

kernel void attn_prefill_f16kv(
    constant AttnPrefillArgs& args [[buffer(0)]],
    device const float* q [[buffer(1)]],
    device const float* gate [[buffer(2)]],
    device const half* kc [[buffer(3)]],
    device const half* vc [[buffer(4)]],
    device float* o [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    constexpr int per_lane_max = ATTN_MAX_HEAD_DIM / 32;
    constexpr int TB = ATTN_PREFILL_TOKENS;
    const int per_lane = HEAD_DIM / 32;
    const int blocks = int(simdgroups) / GROUP; // token blocks per threadgroup
    const int kh = int(group.x);
    const int t0 = (int(group.y) * blocks + int(sg) / GROUP) * TB;
    const int nt = min(TB, args.tokens - t0);
    if (nt <= 0) {
        return; // the whole simd-group: past the chunk's last token
    }
    const int h = kh * GROUP + int(sg) % GROUP;
    const ulong row = ulong(args.kv_heads) * HEAD_DIM;
    device const half* kh_base = kc + ulong(kh) * HEAD_DIM;
    device const half* vh_base = vc + ulong(kh) * HEAD_DIM;

    float qr[TB][per_lane_max];
    float acc[TB][per_lane_max];
    float m[TB];
    float l[TB];
    for (int t = 0; t < nt; t++) {
        const ulong at = (ulong(t0 + t) * ulong(args.heads) + ulong(h)) * HEAD_DIM;
        for (int i = 0; i < per_lane; i++) {
            qr[t][i] = q[at + ulong(lane) + ulong(32 * i)] * args.scale;
            acc[t][i] = 0.0f;
        }
        m[t] = PREFILL_NO_SCORE;
        l[t] = 0.0f;
    }
    // Token t0+t attends positions 0 .. pos0+t0+t; each row is loaded once
    // for the block's tokens.
    const int n = args.pos0 + t0 + nt;
    for (int p = 0; p < n; p++) {
        device const half* kr = kh_base + ulong(p) * row;
        device const half* vr = vh_base + ulong(p) * row;
        float kv[per_lane_max];
        float vv[per_lane_max];
        for (int i = 0; i < per_lane; i++) {
            kv[i] = float(kr[lane + 32 * i]);
            vv[i] = float(vr[lane + 32 * i]);
        }
        const int first = max(0, p - args.pos0 - t0); // the first token that sees p
        for (int t = first; t < nt; t++) {
            float s = 0.0f;
            for (int i = 0; i < per_lane; i++) {
                s += qr[t][i] * kv[i];
            }
            s = simd_sum(s);
            const float m_new = max(m[t], s);
            const float c = exp(m[t] - m_new);
            const float e = exp(s - m_new);
            l[t] = l[t] * c + e;
            for (int i = 0; i < per_lane; i++) {
                acc[t][i] = acc[t][i] * c + e * vv[i];
            }
            m[t] = m_new;
        }
    }
    for (int t = 0; t < nt; t++) {
        const ulong at = (ulong(t0 + t) * ulong(args.heads) + ulong(h)) * HEAD_DIM;
        for (int i = 0; i < per_lane; i++) {
            const ulong d = at + ulong(lane) + ulong(32 * i);
            o[d] = acc[t][i] / l[t] / (1.0f + exp(-gate[d]));
        }
    }
}
