// attention_prefill.metal: causal gated attention for a chunk of prompt
// tokens over the KV cache, which already holds the chunk's own rows.
//
//   attn_prefill_f16kv: for token t of the chunk and query head h,
//                       o[t][h] = softmax_p(q[t][h] . K[p] * scale) . V[p]
//                       over p <= pos0 + t, times sigmoid(gate[t][h])
//
// Layout: q, gate and o are float[tokens][heads][head_dim] (AttnPrep's q
// and gate per token); q and o have rows up to the next multiple of
// ATTN_PREFILL_TOKENS (q's extra rows are read and ignored, o's written
// with zeros). The caches are half[capacity][kv_heads][head_dim] as in
// attention.metal, rows 0 .. pos0+tokens-1 written. Query head h reads KV
// head h / GROUP.
// Mapping: one threadgroup per (KV head, run of token blocks); simd-group
// s handles query head s % GROUP of that KV head for the block of
// ATTN_PREFILL_TOKENS (8) tokens number s / GROUP of the run (the host
// picks how many blocks a threadgroup takes, up to ATTN_PREFILL_BLOCKS,
// within the pipeline's thread limit). Flash attention in 8x8 simdgroup
// matrices: the threadgroup stages 8 cached positions at a time (K
// transposed and V, widened to fp32) once for all its simd-groups; each
// simd-group forms its 8x8 scores S = Q K^T, runs the online softmax on
// them (a lane per token row: running max, sum, the correction factor),
// rescales its fp32 accumulator O[8][head_dim] by diag(correction) only
// when a row's max moved, and adds P V. Tokens past the chunk's end are
// rows with no scores: P and the correction keep them zero, whatever
// their q holds. A block of positions no row of a simd-group sees is
// skipped by it. At the end O is divided by the sums and gated.
// Threadgroup memory: 8 staged positions (K^T and V, 2 * 8 *
// ATTN_MAX_HEAD_DIM floats, static), and per simd-group
// ATTN_PREFILL_SCRATCH floats bound at [[threadgroup(0)]]: its 8x8 S / P
// or diagonal, and the rows' max, sum and correction.
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

// diag writes the 8x8 diagonal matrix of d[0..7] to m.
inline void prefill_diag(threadgroup float* m, threadgroup const float* d, uint lane)
{
    for (uint e = lane; e < 64; e += 32) {
        m[e] = e / 8 == e % 8 ? d[e / 8] : 0.0f;
    }
}

kernel void attn_prefill_f16kv(
    constant AttnPrefillArgs& args [[buffer(0)]],
    device const float* q [[buffer(1)]],
    device const float* gate [[buffer(2)]],
    device const half* kc [[buffer(3)]],
    device const half* vc [[buffer(4)]],
    device float* o [[buffer(5)]],
    threadgroup float* scratch [[threadgroup(0)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 block [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    // The position input is a uint2, so the size input must be one too (MSL
    // 3.1 section 5.2.3.6); the threadgroup is one-dimensional.
    const uint threads = block.x;
    constexpr int TB = ATTN_PREFILL_TOKENS;
    threadgroup float kt_s[ATTN_MAX_HEAD_DIM * TB]; // [HEAD_DIM][8]
    threadgroup float v_s[TB * ATTN_MAX_HEAD_DIM];  // [8][HEAD_DIM]
    const int tiles = HEAD_DIM / 8;
    const int blocks = int(simdgroups) / GROUP; // token blocks per threadgroup
    const int kh = int(group.x);
    const int run0 = int(group.y) * blocks * TB;
    const int t0 = run0 + (int(sg) / GROUP) * TB;
    const int nt = clamp(args.tokens - t0, 0, TB); // rows of this simd-group's block
    const int h = kh * GROUP + int(sg) % GROUP;
    const ulong qrow = ulong(args.heads) * HEAD_DIM;
    const ulong kvrow = ulong(args.kv_heads) * HEAD_DIM;
    threadgroup float* sp = scratch + int(sg) * ATTN_PREFILL_SCRATCH; // S, P or a diagonal
    threadgroup float* run_max = sp + 64;
    threadgroup float* run_sum = run_max + TB;
    threadgroup float* corr = run_sum + TB;

    simdgroup_float8x8 acc[ATTN_MAX_HEAD_DIM / 8];
    for (int i = 0; i < tiles; i++) {
        acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    if (lane < uint(TB)) {
        run_max[lane] = PREFILL_NO_SCORE;
        run_sum[lane] = 0.0f;
    }
    // Positions the threadgroup's last token sees, and this simd-group's
    // (none past the chunk's end).
    const int n = args.pos0 + min(args.tokens, run0 + blocks * TB);
    const int seen = nt > 0 ? args.pos0 + t0 + nt : 0;
    device const float* qb = q + (ulong(t0) * ulong(args.heads) + ulong(h)) * HEAD_DIM;
    for (int p0 = 0; p0 < n; p0 += TB) {
        for (int e = int(tid); e < TB * HEAD_DIM; e += int(threads)) {
            const int j = e / HEAD_DIM;
            const int d = e % HEAD_DIM;
            float kv = 0.0f;
            float vv = 0.0f;
            if (p0 + j < n) {
                const ulong at = ulong(p0 + j) * kvrow + ulong(kh) * HEAD_DIM + ulong(d);
                kv = float(kc[at]);
                vv = float(vc[at]);
            }
            kt_s[d * TB + j] = kv;
            v_s[e] = vv;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (p0 < seen) {
            simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            for (int i = 0; i < tiles; i++) {
                simdgroup_float8x8 a;
                simdgroup_float8x8 b;
                simdgroup_load(a, qb + i * 8, qrow);
                simdgroup_load(b, kt_s + i * 8 * TB, TB);
                simdgroup_multiply_accumulate(s, a, b, s);
            }
            simdgroup_store(s, sp, TB);
            simdgroup_barrier(mem_flags::mem_threadgroup);
            if (lane < uint(TB)) {
                const int r = int(lane);
                const int last = args.pos0 + t0 + r; // the last position row r sees
                const float m_old = run_max[r];
                float m_new = m_old;
                for (int j = 0; j < TB; j++) {
                    if (r < nt && p0 + j <= last) {
                        m_new = max(m_new, sp[r * TB + j] * args.scale);
                    }
                }
                float sum = 0.0f;
                for (int j = 0; j < TB; j++) {
                    const float e = r < nt && p0 + j <= last ? exp(sp[r * TB + j] * args.scale - m_new) : 0.0f;
                    sp[r * TB + j] = e;
                    sum += e;
                }
                const float c = exp(m_old - m_new);
                run_sum[r] = run_sum[r] * c + sum;
                run_max[r] = m_new;
                corr[r] = c;
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);
            simdgroup_float8x8 pm;
            simdgroup_load(pm, sp, TB);
            bool moved = false;
            for (int r = 0; r < TB; r++) {
                moved = moved || corr[r] != 1.0f;
            }
            if (moved) {
                simdgroup_barrier(mem_flags::mem_threadgroup);
                prefill_diag(sp, corr, lane);
                simdgroup_barrier(mem_flags::mem_threadgroup);
                simdgroup_float8x8 dg;
                simdgroup_load(dg, sp, TB);
                for (int i = 0; i < tiles; i++) {
                    simdgroup_float8x8 scaled;
                    simdgroup_multiply(scaled, dg, acc[i]);
                    acc[i] = scaled;
                }
            }
            for (int i = 0; i < tiles; i++) {
                simdgroup_float8x8 b;
                simdgroup_load(b, v_s + i * 8, HEAD_DIM);
                simdgroup_multiply_accumulate(acc[i], pm, b, acc[i]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (nt == 0) {
        return; // the whole simd-group: past the chunk's last token
    }
    if (lane < uint(TB)) {
        corr[lane] = int(lane) < nt ? 1.0f / run_sum[lane] : 0.0f;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    prefill_diag(sp, corr, lane);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 dg;
    simdgroup_load(dg, sp, TB);
    device float* ob = o + (ulong(t0) * ulong(args.heads) + ulong(h)) * HEAD_DIM;
    for (int i = 0; i < tiles; i++) {
        simdgroup_float8x8 r;
        simdgroup_multiply(r, dg, acc[i]);
        simdgroup_store(r, ob + i * 8, qrow);
    }
    simdgroup_barrier(mem_flags::mem_device);
    for (int e = int(lane); e < nt * HEAD_DIM; e += 32) {
        const ulong at = ulong(e / HEAD_DIM) * qrow + ulong(e % HEAD_DIM);
        ob[at] = ob[at] / (1.0f + exp(-gate[(ulong(t0) * ulong(args.heads) + ulong(h)) * HEAD_DIM + at]));
    }
}
