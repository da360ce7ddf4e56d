// attention.metal: gated full attention for one decode token.
//
//   attn_prep_f16kv:   q_h = RoPE(RMSNorm(query_h) * q_norm), gate_h = gate part of qg_h;
//                      K[pos] = half(RoPE(RMSNorm(k_h) * k_norm)), V[pos] = half(v_h)
//   attn_decode_f16kv: a part's unnormalised partial of
//                      softmax_p(q_h . K[p] * scale) . V[p] over its p < n:
//                      running max m, sum l, accumulator acc
//   attn_merge_f32:    o_h = sum_b e^(m_b - M) acc_b / sum_b e^(m_b - M) l_b,
//                      times sigmoid(gate_h)
//
// RoPE rotates the first rotary_dim dims of a head in rotate-half pairs
// (j, j + rotary_dim/2) by pos * inv_freq[j]; the host rounds inv_freq to
// fp32 and the angle is one fp32 product, so both sides see the same angle,
// and precise::sin/cos keep large angles (long contexts) accurate.
//
// Layout: qg is float[heads][2*head_dim] (per head the query, then the
// gate); q, gate and o are float[heads][head_dim]; k and v are
// float[kv_heads][head_dim]; the caches are half[capacity][kv_heads][head_dim]
// (position p of KV head h at (p*kv_heads + h)*head_dim). The caches are
// IEEE fp16 because decode is bandwidth-bound and they are most of what a
// long context reads: keys are RMS-normed (times k_norm) and values are
// projections of normed activations, far inside half's range, and half keeps
// 10 mantissa bits (bf16 keeps 7). Everything else, scores and softmax
// included, is fp32. Query head h reads
// KV head h / (heads/kv_heads). The scratch holds
// float acc[heads][parts][head_dim], then float2 (max, sum)[heads][parts].
//
// Mapping:
//   attn_prep_f16kv: one threadgroup per query head, then one per KV head,
//   by grid.y rows (a prefill chunk's tokens at positions pos, pos+1, ...,
//   their qg, k, v, q and gate rows packed one after another);
//   thread t handles dims t, t + threads, ... (rotated pairs by their first
//   dim).
//   attn_decode_f16kv: one threadgroup per (KV head, part of part_len
//   positions), so a K/V row is fetched once for the GROUP query heads that
//   share it. Its simd-groups form a grid of head columns (each holds
//   ATTN_HEADS_PER_SIMDGROUP query heads) by position stripes; the simd-groups
//   of one stripe read the same rows together (one fetch, then cache hits),
//   stripes take every stripes-th position. Lane l holds dims l, l+32, ... of
//   its heads' query and accumulator in registers, so a row is one coalesced
//   load per 32 dims and a score one simd_sum. Each simd-group keeps an fp32
//   online softmax (running max m, sum l, accumulator); stripes merge through
//   threadgroup memory, and the first writes (m, l, acc); attn_merge_f32
//   (one threadgroup per query head, one thread per dim) combines the parts.
//   Part size: a simd-group walks its positions one after another, each a
//   load of K and V waited on, about 0.9 us on the H200: whole ATTN_BLOCK =
//   256 blocks (128 positions a stripe) made the model's layer (2 KV heads,
//   4 threadgroups on 132 SMs) 120 us at 257-384 positions; in 16-position
//   parts it is 13.6 us, and the merge 7.4 us (issue 29). So while a context has
//   few blocks each is split in up to ATTN_MAX_SPLIT parts, about
//   ATTN_SPLIT_PARTS parts in all (shaders.attnSplit; it depends only on
//   the count of blocks, so a decode plan replays over a block), from 16
//   positions (8 per stripe) a part; past ATTN_SPLIT_PARTS blocks the parts
//   are the blocks, and the merge reads 1/256 of the cache's bytes again.
//
// Threadgroup memory: attn_prep_f16kv, one float per simd-group (the sum of
// squares). attn_decode_f16kv, (stripes - 1) * GROUP * (head_dim + 2) floats
// for the partials of every stripe but the first, which merges them.
//
// CPU reference: engine/cpu/attention.go (rmsNorm, rope.apply, the causal
// softmax and the sigmoid gate), fp32 throughout; its tests round the cached
// K and V to half as these kernels store them.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant int HEAD_DIM [[function_constant(FC_ATTN + 0)]];
constant int GROUP [[function_constant(FC_ATTN + 1)]];

// The running max before any score: exp() of it minus any real score
// underflows to 0. Finite, and far enough from -FLT_MAX that exp's
// scaling by log2(e) stays finite, since fast math assumes no infinities.
constant float ATTN_NO_SCORE = -1.0e30f;

// norm_rope writes y = RoPE(x * inv * w) for the dims thread tid of
// threads handles, converting to y's type (float for q, half for the K
// cache) only on the store, so the rounding to half is the last step.
template <typename T>
void norm_rope(device const float* x, device const float* w, device T* y, float inv,
               int d, int rotary_dim, int pos, constant float* inv_freq, int tid, int threads)
{
    const int half_rot = rotary_dim / 2;
    for (int i = tid; i < half_rot; i += threads) {
        const float a = x[i] * inv * w[i];
        const float b = x[i + half_rot] * inv * w[i + half_rot];
        const float angle = float(pos) * inv_freq[i];
        const float c = precise::cos(angle);
        const float s = precise::sin(angle);
        y[i] = T(a * c - b * s);
        y[i + half_rot] = T(b * c + a * s);
    }
    for (int i = rotary_dim + tid; i < d; i += threads) {
        y[i] = T(x[i] * inv * w[i]);
    }
}

[[max_total_threads_per_threadgroup(ATTN_PREP_MAX_THREADS)]]
kernel void attn_prep_f16kv(
    constant AttnPrepArgs& args [[buffer(0)]],
    device const float* qg [[buffer(1)]],
    device const float* k [[buffer(2)]],
    device const float* v [[buffer(3)]],
    device const float* q_norm [[buffer(4)]],
    device const float* k_norm [[buffer(5)]],
    device float* q [[buffer(6)]],
    device float* gate [[buffer(7)]],
    device half* k_cache [[buffer(8)]],
    device half* v_cache [[buffer(9)]],
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
    threadgroup float partial[ATTN_PREP_MAX_THREADS / 32];
    const int d = args.head_dim;
    const uint g = group.x;
    // Rows (prefill tokens, at positions pos, pos+1, ...) are grid.y; each
    // row's inputs and outputs follow the previous row's.
    const int pos = args.pos + int(group.y);
    qg += ulong(group.y) * ulong(args.heads) * 2 * d;
    q += ulong(group.y) * ulong(args.heads) * d;
    gate += ulong(group.y) * ulong(args.heads) * d;
    k += ulong(group.y) * ulong(args.kv_heads) * d;
    v += ulong(group.y) * ulong(args.kv_heads) * d;
    const bool is_query = int(g) < args.heads;
    const int h = int(g) - args.heads; // the KV head, when not a query head
    const ulong row = is_query ? 0 : (ulong(pos) * args.kv_heads + ulong(h)) * d;
    device const float* x = is_query ? qg + ulong(g) * 2 * d : k + ulong(h) * d;
    if (is_query) {
        for (int i = int(tid); i < d; i += int(threads)) {
            gate[ulong(g) * d + i] = x[d + i];
        }
    } else {
        for (int i = int(tid); i < d; i += int(threads)) {
            v_cache[row + i] = half(v[ulong(h) * d + i]);
        }
    }

    float ss = 0.0f;
    for (int i = int(tid); i < d; i += int(threads)) {
        ss += x[i] * x[i];
    }
    ss = simd_sum(ss);
    if (lane == 0) {
        partial[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint s = 0; s < simdgroups; s++) {
        total += partial[s];
    }
    const float inv = rsqrt(total / float(d) + args.eps);

    if (is_query) {
        norm_rope(x, q_norm, q + ulong(g) * d, inv, d, args.rotary_dim, pos, args.inv_freq, int(tid), int(threads));
    } else {
        norm_rope(x, k_norm, k_cache + row, inv, d, args.rotary_dim, pos, args.inv_freq, int(tid), int(threads));
    }
}

[[max_total_threads_per_threadgroup(ATTN_DECODE_THREADS)]]
kernel void attn_decode_f16kv(
    constant AttnDecodeArgs& args [[buffer(0)]],
    device const float* q [[buffer(1)]],
    device const half* k_cache [[buffer(2)]],
    device const half* v_cache [[buffer(3)]],
    device float* scratch [[buffer(4)]],
    threadgroup float* stripes_tg [[threadgroup(0)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int dims = HEAD_DIM / 32;
    const int columns = (GROUP + ATTN_HEADS_PER_SIMDGROUP - 1) / ATTN_HEADS_PER_SIMDGROUP;
    const int stripes = ATTN_SIMDGROUPS / columns;
    const int column = int(sg) % columns;
    const int stripe = int(sg) / columns;
    const int kh = int(group.x);
    const int part = int(group.y);
    const int first = column * ATTN_HEADS_PER_SIMDGROUP; // within the group
    const int nh = min(ATTN_HEADS_PER_SIMDGROUP, GROUP - first);
    const int start = part * args.part_len;
    if (start >= args.n) {
        return; // the whole threadgroup: a part past n, which the merge skips
    }
    const int end = min(args.n, start + args.part_len);
    const ulong row_stride = ulong(args.kv_heads) * HEAD_DIM;

    float qr[ATTN_HEADS_PER_SIMDGROUP][ATTN_MAX_HEAD_DIM / 32];
    float acc[ATTN_HEADS_PER_SIMDGROUP][ATTN_MAX_HEAD_DIM / 32];
    float m[ATTN_HEADS_PER_SIMDGROUP];
    float l[ATTN_HEADS_PER_SIMDGROUP];
    for (int j = 0; j < nh; j++) {
        device const float* qh = q + ulong(kh * GROUP + first + j) * HEAD_DIM;
        for (int i = 0; i < dims; i++) {
            qr[j][i] = qh[int(lane) + 32 * i];
            acc[j][i] = 0.0f;
        }
        m[j] = ATTN_NO_SCORE;
        l[j] = 0.0f;
    }

    for (int p = start + stripe; p < end; p += stripes) {
        device const half* kp = k_cache + ulong(p) * row_stride + ulong(kh) * HEAD_DIM;
        device const half* vp = v_cache + ulong(p) * row_stride + ulong(kh) * HEAD_DIM;
        float kr[ATTN_MAX_HEAD_DIM / 32];
        float vr[ATTN_MAX_HEAD_DIM / 32];
        for (int i = 0; i < dims; i++) {
            kr[i] = float(kp[int(lane) + 32 * i]);
            vr[i] = float(vp[int(lane) + 32 * i]);
        }
        for (int j = 0; j < nh; j++) {
            float qk = 0.0f;
            for (int i = 0; i < dims; i++) {
                qk += qr[j][i] * kr[i];
            }
            const float s = simd_sum(qk) * args.scale;
            const float mn = max(m[j], s);
            const float c = exp(m[j] - mn);
            const float e = exp(s - mn);
            l[j] = l[j] * c + e;
            for (int i = 0; i < dims; i++) {
                acc[j][i] = acc[j][i] * c + e * vr[i];
            }
            m[j] = mn;
        }
    }

    // Stripes after the first hand their partials to the first.
    threadgroup float* stats_tg = stripes_tg + (stripes - 1) * GROUP * HEAD_DIM;
    if (stripe > 0) {
        for (int j = 0; j < nh; j++) {
            const int slot = (stripe - 1) * GROUP + first + j;
            for (int i = 0; i < dims; i++) {
                stripes_tg[slot * HEAD_DIM + int(lane) + 32 * i] = acc[j][i];
            }
            if (lane == 0) {
                stats_tg[2 * slot] = m[j];
                stats_tg[2 * slot + 1] = l[j];
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (stripe > 0) {
        return;
    }
    for (int s = 1; s < stripes; s++) {
        for (int j = 0; j < nh; j++) {
            const int slot = (s - 1) * GROUP + first + j;
            const float ms = stats_tg[2 * slot];
            const float mn = max(m[j], ms);
            const float c = exp(m[j] - mn);
            const float cs = exp(ms - mn);
            l[j] = l[j] * c + stats_tg[2 * slot + 1] * cs;
            for (int i = 0; i < dims; i++) {
                acc[j][i] = acc[j][i] * c + stripes_tg[slot * HEAD_DIM + int(lane) + 32 * i] * cs;
            }
            m[j] = mn;
        }
    }

    for (int j = 0; j < nh; j++) {
        const int h = kh * GROUP + first + j;
        const ulong at = ulong(h) * args.parts + part;
        for (int i = 0; i < dims; i++) {
            scratch[at * HEAD_DIM + int(lane) + 32 * i] = acc[j][i];
        }
        if (lane == 0) {
            device float* stats = scratch + ulong(args.heads) * args.parts * HEAD_DIM;
            stats[2 * at] = m[j];
            stats[2 * at + 1] = l[j];
        }
    }
}

[[max_total_threads_per_threadgroup(ATTN_MAX_HEAD_DIM)]]
kernel void attn_merge_f32(
    constant AttnDecodeArgs& args [[buffer(0)]],
    device const float* scratch [[buffer(1)]],
    device const float* gate [[buffer(2)]],
    device float* o [[buffer(3)]],
    uint h [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]])
{
    device const float* acc = scratch + ulong(h) * args.parts * HEAD_DIM;
    device const float* stats = scratch + ulong(args.heads) * args.parts * HEAD_DIM + ulong(h) * args.parts * 2;
    // The parts that hold positions (the rest returned unwritten), in one
    // online pass: each part's loads do not wait on the previous part's
    // sums, so they are in flight together.
    const int used = (args.n + args.part_len - 1) / args.part_len;
    float mx = ATTN_NO_SCORE;
    float sum = 0.0f;
    float out = 0.0f;
    for (int b = 0; b < used; b++) {
        const float mb = stats[2 * b];
        const float mn = max(mx, mb);
        const float c = exp(mx - mn);
        const float cb = exp(mb - mn);
        sum = sum * c + stats[2 * b + 1] * cb;
        out = out * c + acc[ulong(b) * HEAD_DIM + tid] * cb;
        mx = mn;
    }
    const ulong at = ulong(h) * HEAD_DIM + tid;
    o[at] = out / sum / (1.0f + exp(-gate[at]));
}
