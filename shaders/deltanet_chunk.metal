// deltanet_chunk.metal: a chunk of prompt tokens through a Gated DeltaNet
// mixer: the conv in one dispatch, then the recurrence in the chunked (WY)
// form, blocks of DELTA_CHUNK tokens, the fp32 state carried from block to
// block.
//
//   delta_conv_rows_f32:      for t in order: out[t][c] = silu(sum_{j<K-1}
//                             w[c][j] * hist[c][j] + w[c][K-1] * u[t][c]),
//                             then hist[c] shifts u[t][c] in; the history is
//                             stored back after the last token
//   delta_chunk_prep_f32:     per value head and block, from q, k (l2-
//                             normalised, q also by q_scale), beta =
//                             sigmoid(b), g = negA * softplus(a + dt_bias)
//                             and G = the running sum of g in the block:
//                               qg = e^G q, kn = -e^G k, ktT = (e^(G_last-G) k)^T,
//                               P = tril(e^(G_i-G_j) q_i . k_j) (diagonal in),
//                               Tb = (I + L)^-1 diag(beta) with L the strictly
//                               lower beta_i e^(G_i-G_j) k_i . k_j,
//                               gl = e^G_last
//   delta_chunk_scan_f32:     per value head and 8 state columns, block by
//                             block: U = Tb (V + kn S); O = qg S + P U;
//                             S = gl S + ktT U
//   delta_gated_norm_rows_f32: o = RMSNorm(o) * norm * silu(z) per token
//                             and value head, in place
//
// The block form is the token recurrence of deltanet.metal unrolled:
// S_t = e^g_t S_(t-1) + k_t u_t^T, u_t = beta_t (v_t - e^g_t S_(t-1)^T k_t),
// o_t = S_t^T q_t. Written from the block's start S, u solves a unit lower
// triangular system, hence Tb; every exponent is G_i - G_j with j <= i, so
// no factor exceeds 1. Rows past the last token are zero in every prep
// output (k = q = 0, beta = 0, g = 0), which leaves U, O and S exact.
//
// Layout: as deltanet.metal with a leading token dimension on every per-token
// array: u, out (conv) float[tokens][C]; qkv float[tokens][C]; z, o
// float[tokens][value_heads][value_dim]; b, a float[tokens][value_heads].
// state (conv) float[C][K-1]; state (recurrent) float[value_heads][KEY_DIM]
// [value_dim], fp32. The prep outputs live in one scratch buffer, per value
// head: qg, kn float[blocks*DELTA_CHUNK][KEY_DIM], ktT float[blocks]
// [KEY_DIM][DELTA_CHUNK], P, Tb float[blocks*DELTA_CHUNK][DELTA_CHUNK], gl
// float[blocks] (delta_chunk_layout).
//
// Mapping:
//   delta_conv_rows_f32: one thread per channel walks the chunk with its
//   history (at most DELTA_MAX_TAPS-1 values) in registers.
//   delta_chunk_prep_f32: a threadgroup of DELTA_CHUNK_PREP_THREADS per (value
//   head, block); q and k staged DELTA_CHUNK_STAGE key columns at a time, the
//   64x64 products in 8x8 simdgroup matrices (simd-group i owns row block
//   i), the triangular inverse by forward substitution in threadgroup memory.
//   delta_chunk_scan_f32: a simd-group per (value head, 8 value columns)
//   holds those columns of S in simdgroup matrices for the whole chunk
//   (loaded once, stored once); the columns are independent, so simd-groups
//   share nothing (each stages its V and O rows in its own slice of
//   threadgroup memory, ordered by simd-group barriers).
//   delta_gated_norm_rows_f32: a threadgroup per (value head, token).
//
// Threadgroup memory: static; delta_chunk_prep_f32 24 KiB of staging
// (q, k [64][32] and k^T [32][64]), reused for one 64x64 product at a time,
// and five per-token float[64]; delta_chunk_scan_f32 float[64][8] per
// simd-group; delta_gated_norm_rows_f32 one float per simd-group.
//
// CPU reference: engine/cpu/deltanet.go (conv, l2norm, the recurrence, the
// gated RMSNorm) per token, fp32 throughout.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant int KEY_DIM [[function_constant(FC_DELTA + 0)]];

// Added to the sum of squares inside the l2 norms' square root.
constant float CHUNK_L2_EPS = 1e-6f;
// softplus(x) is x above this, as torch computes it.
constant float CHUNK_SOFTPLUS_THRESHOLD = 20.0f;

[[max_total_threads_per_threadgroup(DELTA_CONV_THREADS)]]
kernel void delta_conv_rows_f32(
    constant DeltaChunkArgs& args [[buffer(0)]],
    device const float* u [[buffer(1)]],
    device float* state [[buffer(2)]],
    device const float* w [[buffer(3)]],
    device float* out [[buffer(4)]],
    uint c [[thread_position_in_grid]])
{
    if (int(c) >= args.channels) {
        return;
    }
    const int taps = args.taps;
    const ulong channels = ulong(args.channels);
    device float* hist_mem = state + ulong(c) * (taps - 1);
    device const float* wc = w + ulong(c) * taps;
    float hist[DELTA_MAX_TAPS];
    float wr[DELTA_MAX_TAPS];
    for (int j = 0; j < taps; j++) {
        wr[j] = wc[j];
    }
    for (int j = 0; j < taps - 1; j++) {
        hist[j] = hist_mem[j];
    }
    for (int t = 0; t < args.tokens; t++) {
        const float cur = u[ulong(t) * channels + c];
        float acc = wr[taps - 1] * cur;
        for (int j = 0; j < taps - 1; j++) {
            acc += wr[j] * hist[j];
        }
        for (int j = 0; j + 1 < taps - 1; j++) {
            hist[j] = hist[j + 1];
        }
        hist[taps - 2] = cur;
        out[ulong(t) * channels + c] = acc / (1.0f + exp(-acc));
    }
    for (int j = 0; j < taps - 1; j++) {
        hist_mem[j] = hist[j];
    }
}

// The scratch regions of value head h (see Layout).
struct DeltaChunkScratch {
    device float* qg;
    device float* kn;
    device float* ktT;
    device float* p;
    device float* tb;
    device float* gl;
};

inline DeltaChunkScratch delta_chunk_layout(device float* base, int h, int heads, int blocks)
{
    const ulong rows = ulong(blocks) * DELTA_CHUNK;
    const ulong keys = rows * KEY_DIM;
    const ulong mats = rows * DELTA_CHUNK;
    DeltaChunkScratch s;
    s.qg = base + ulong(h) * keys;
    s.kn = base + ulong(heads) * keys + ulong(h) * keys;
    s.ktT = base + 2 * ulong(heads) * keys + ulong(h) * keys;
    s.p = base + 3 * ulong(heads) * keys + ulong(h) * mats;
    s.tb = base + 3 * ulong(heads) * keys + ulong(heads) * mats + ulong(h) * mats;
    s.gl = base + 3 * ulong(heads) * keys + 2 * ulong(heads) * mats + ulong(h) * blocks;
    return s;
}

[[max_total_threads_per_threadgroup(DELTA_CHUNK_PREP_THREADS)]]
kernel void delta_chunk_prep_f32(
    constant DeltaScanArgs& args [[buffer(0)]],
    device const float* qkv [[buffer(1)]],
    device const float* b [[buffer(2)]],
    device const float* a [[buffer(3)]],
    device const float* neg_a [[buffer(4)]],
    device const float* dt_bias [[buffer(5)]],
    device float* scratch [[buffer(6)]],
    uint2 hb [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    // Staging of q, k and k^T, later the 64x64 products.
    threadgroup float mat[DELTA_CHUNK * DELTA_CHUNK + DELTA_CHUNK * DELTA_CHUNK_STAGE];
    threadgroup float inv_q[DELTA_CHUNK];
    threadgroup float inv_k[DELTA_CHUNK];
    threadgroup float beta[DELTA_CHUNK];
    threadgroup float gam[DELTA_CHUNK];
    threadgroup float lrow[DELTA_CHUNK];
    const int C = DELTA_CHUNK;
    const int W = DELTA_CHUNK_STAGE;
    const int threads = DELTA_CHUNK_PREP_THREADS;
    const int h = int(hb.x);
    const int blk = int(hb.y);
    const int t0 = blk * C;
    const int n = args.tokens;
    const int kh = h / (args.value_heads / args.key_heads);
    const ulong channels = ulong(2 * args.key_heads) * KEY_DIM + ulong(args.value_heads) * args.value_dim;
    const ulong q_off = ulong(kh) * KEY_DIM;
    const ulong k_off = ulong(args.key_heads + kh) * KEY_DIM;
    const DeltaChunkScratch sc = delta_chunk_layout(scratch, h, args.value_heads, args.blocks);

    // Per token: the l2 norms' factors, beta and g; a simd-group per token.
    for (int t = int(sg); t < C; t += threads / 32) {
        const int at = t0 + t;
        float sq = 0.0f;
        float sk = 0.0f;
        if (at < n) {
            device const float* row = qkv + ulong(at) * channels;
            for (int i = int(lane); i < KEY_DIM; i += 32) {
                const float x = row[q_off + i];
                const float y = row[k_off + i];
                sq += x * x;
                sk += y * y;
            }
        }
        sq = simd_sum(sq);
        sk = simd_sum(sk);
        if (lane == 0) {
            float iq = 0.0f, ik = 0.0f, bt = 0.0f, g = 0.0f;
            if (at < n) {
                const ulong th = ulong(at) * ulong(args.value_heads) + h;
                iq = rsqrt(sq + CHUNK_L2_EPS) * args.q_scale;
                ik = rsqrt(sk + CHUNK_L2_EPS);
                bt = 1.0f / (1.0f + exp(-b[th]));
                const float x = a[th] + dt_bias[h];
                g = neg_a[h] * (x > CHUNK_SOFTPLUS_THRESHOLD ? x : log(1.0f + exp(x)));
            }
            inv_q[t] = iq;
            inv_k[t] = ik;
            beta[t] = bt;
            gam[t] = g;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float run = 0.0f;
        for (int t = 0; t < C; t++) {
            run += gam[t];
            gam[t] = run;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float g_last = gam[C - 1];

    // Q K^T and K K^T over the key dim, W columns at a time; the scaled q
    // and k go out to the scan as they pass.
    threadgroup float* qs = mat;                 // [C][W]
    threadgroup float* ks = qs + C * W;          // [C][W]
    threadgroup float* kst = ks + C * W;         // [W][C]
    simdgroup_float8x8 qk[C / 8];
    simdgroup_float8x8 kk[C / 8];
    for (int j = 0; j < C / 8; j++) {
        qk[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        kk[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    for (int k0 = 0; k0 < KEY_DIM; k0 += W) {
        for (int e = int(tid); e < C * W; e += threads) {
            const int t = e / W;
            const int col = e % W;
            const int kd = k0 + col;
            float qv = 0.0f;
            float kv = 0.0f;
            if (t0 + t < n && kd < KEY_DIM) {
                device const float* row = qkv + ulong(t0 + t) * channels;
                qv = row[q_off + kd] * inv_q[t];
                kv = row[k_off + kd] * inv_k[t];
            }
            qs[e] = qv;
            ks[e] = kv;
            kst[col * C + t] = kv;
            if (kd < KEY_DIM) {
                const ulong at = ulong(t0 + t) * KEY_DIM + kd;
                const float eg = exp(gam[t]);
                sc.qg[at] = eg * qv;
                sc.kn[at] = -eg * kv;
                sc.ktT[(ulong(blk) * KEY_DIM + kd) * C + t] = exp(g_last - gam[t]) * kv;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int c8 = 0; c8 < W; c8 += 8) {
            simdgroup_float8x8 qa;
            simdgroup_float8x8 ka;
            simdgroup_load(qa, qs + int(sg) * 8 * W + c8, W);
            simdgroup_load(ka, ks + int(sg) * 8 * W + c8, W);
            for (int j = 0; j < C / 8; j++) {
                simdgroup_float8x8 kb;
                simdgroup_load(kb, kst + c8 * C + j * 8, C);
                simdgroup_multiply_accumulate(qk[j], qa, kb, qk[j]);
                simdgroup_multiply_accumulate(kk[j], ka, kb, kk[j]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    // P: the decayed, causal Q K^T.
    for (int j = 0; j < C / 8; j++) {
        simdgroup_store(qk[j], mat + int(sg) * 8 * C + j * 8, C);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = int(tid); e < C * C; e += threads) {
        const int i = e / C;
        const int j = e % C;
        sc.p[ulong(t0 + i) * C + j] = j <= i ? mat[e] * exp(gam[i] - gam[j]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // L, then (I + L)^-1 in place: row i of the strictly lower part is
    // T[i][c] = -(L[i][c] + sum_{c<j<i} L[i][j] T[j][c]), the unit diagonal
    // implied.
    for (int j = 0; j < C / 8; j++) {
        simdgroup_store(kk[j], mat + int(sg) * 8 * C + j * 8, C);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = int(tid); e < C * C; e += threads) {
        const int i = e / C;
        const int j = e % C;
        mat[e] = j < i ? beta[i] * exp(gam[i] - gam[j]) * mat[e] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int i = 1; i < C; i++) {
        if (int(tid) < i) {
            lrow[tid] = mat[i * C + int(tid)];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (int(tid) < i) {
            const int c = int(tid);
            float acc = lrow[c];
            for (int j = c + 1; j < i; j++) {
                acc += lrow[j] * mat[j * C + c];
            }
            mat[i * C + c] = -acc;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (int e = int(tid); e < C * C; e += threads) {
        const int i = e / C;
        const int j = e % C;
        const float t = i == j ? 1.0f : (j < i ? mat[e] : 0.0f);
        sc.tb[ulong(t0 + i) * C + j] = t * beta[j];
    }
    if (tid == 0) {
        sc.gl[blk] = exp(g_last);
    }
}

[[max_total_threads_per_threadgroup(DELTA_CHUNK_SCAN_THREADS)]]
kernel void delta_chunk_scan_f32(
    constant DeltaScanArgs& args [[buffer(0)]],
    device const float* qkv [[buffer(1)]],
    device float* scratch [[buffer(2)]],
    device float* state [[buffer(3)]],
    device float* o [[buffer(4)]],
    uint2 hb [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    // A simd-group's V rows, then its O rows, zero past the last token.
    threadgroup float stage[DELTA_CHUNK_SCAN_SIMDGROUPS][DELTA_CHUNK * 8];
    const int C = DELTA_CHUNK;
    const int tiles = KEY_DIM / 8;
    const int h = int(hb.x);
    const int vd = args.value_dim;
    const int j0 = (int(hb.y) * int(simdgroups) + int(sg)) * 8;
    const int n = args.tokens;
    const ulong channels = ulong(2 * args.key_heads) * KEY_DIM + ulong(args.value_heads) * vd;
    const ulong v_off = ulong(2 * args.key_heads) * KEY_DIM + ulong(h) * vd + j0;
    const ulong hv = ulong(args.value_heads) * vd;
    const DeltaChunkScratch sc = delta_chunk_layout(scratch, h, args.value_heads, args.blocks);
    threadgroup float* vs = stage[sg];
    device float* st = state + ulong(h) * KEY_DIM * vd + j0;

    simdgroup_float8x8 s[DELTA_CHUNK_MAX_KEY_DIM / 8];
    for (int i = 0; i < tiles; i++) {
        simdgroup_load(s[i], st + ulong(i) * 8 * vd, vd);
    }
    for (int blk = 0; blk < args.blocks; blk++) {
        const int t0 = blk * C;
        for (int e = int(lane); e < C * 8; e += 32) {
            const int t = t0 + e / 8;
            vs[e] = t < n ? qkv[ulong(t) * channels + v_off + e % 8] : 0.0f;
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);

        // U = Tb (V + kn S), Tb lower triangular by 8x8 blocks.
        simdgroup_float8x8 u[DELTA_CHUNK / 8];
        {
            simdgroup_float8x8 r[DELTA_CHUNK / 8];
            for (int i = 0; i < C / 8; i++) {
                simdgroup_load(r[i], vs + i * 64, 8);
                device const float* kn = sc.kn + ulong(t0 + i * 8) * KEY_DIM;
                for (int c = 0; c < tiles; c++) {
                    simdgroup_float8x8 m;
                    simdgroup_load(m, kn + c * 8, KEY_DIM);
                    simdgroup_multiply_accumulate(r[i], m, s[c], r[i]);
                }
            }
            for (int i = 0; i < C / 8; i++) {
                u[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
                device const float* tb = sc.tb + ulong(t0 + i * 8) * C;
                for (int j = 0; j <= i; j++) {
                    simdgroup_float8x8 m;
                    simdgroup_load(m, tb + j * 8, C);
                    simdgroup_multiply_accumulate(u[i], m, r[j], u[i]);
                }
            }
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);

        // O = qg S + P U, P lower triangular by 8x8 blocks.
        for (int i = 0; i < C / 8; i++) {
            simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            device const float* qg = sc.qg + ulong(t0 + i * 8) * KEY_DIM;
            for (int c = 0; c < tiles; c++) {
                simdgroup_float8x8 m;
                simdgroup_load(m, qg + c * 8, KEY_DIM);
                simdgroup_multiply_accumulate(acc, m, s[c], acc);
            }
            device const float* p = sc.p + ulong(t0 + i * 8) * C;
            for (int j = 0; j <= i; j++) {
                simdgroup_float8x8 m;
                simdgroup_load(m, p + j * 8, C);
                simdgroup_multiply_accumulate(acc, m, u[j], acc);
            }
            simdgroup_store(acc, vs + i * 64, 8);
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (int e = int(lane); e < C * 8; e += 32) {
            const int t = t0 + e / 8;
            if (t < n) {
                o[ulong(t) * hv + ulong(h) * vd + j0 + e % 8] = vs[e];
            }
        }

        // S = gl S + ktT U.
        const simdgroup_float8x8 decay(sc.gl[blk]);
        for (int c = 0; c < tiles; c++) {
            simdgroup_float8x8 acc;
            simdgroup_multiply(acc, s[c], decay);
            device const float* kt = sc.ktT + (ulong(blk) * KEY_DIM + c * 8) * C;
            for (int j = 0; j < C / 8; j++) {
                simdgroup_float8x8 m;
                simdgroup_load(m, kt + j * 8, C);
                simdgroup_multiply_accumulate(acc, m, u[j], acc);
            }
            s[c] = acc;
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (int i = 0; i < tiles; i++) {
        simdgroup_store(s[i], st + ulong(i) * 8 * vd, vd);
    }
}

kernel void delta_gated_norm_rows_f32(
    constant DeltaScanArgs& args [[buffer(0)]],
    device float* o [[buffer(1)]],
    device const float* z [[buffer(2)]],
    device const float* norm [[buffer(3)]],
    uint2 ht [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 block [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    // The position input is a uint2, so the size input must be one too (MSL
    // 3.1 section 5.2.3.6); the threadgroup is one-dimensional.
    const uint threads = block.x;
    threadgroup float part[DELTA_MAX_SIMDGROUPS];
    const int vd = args.value_dim;
    const ulong base = ulong(ht.y) * ulong(args.value_heads) * vd + ulong(ht.x) * vd;
    float ss = 0.0f;
    for (int j = int(tid); j < vd; j += int(threads)) {
        const float x = o[base + j];
        ss += x * x;
    }
    ss = simd_sum(ss);
    if (lane == 0) {
        part[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint g = 0; g < simdgroups; g++) {
        total += part[g];
    }
    const float inv = rsqrt(total / float(vd) + args.eps);
    for (int j = int(tid); j < vd; j += int(threads)) {
        const float zj = z[base + j];
        o[base + j] = o[base + j] * inv * norm[j] * (zj / (1.0f + exp(-zj)));
    }
}
