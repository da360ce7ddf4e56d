// deltanet_chunk.metal: a chunk of prompt tokens through a Gated DeltaNet
// mixer's conv and recurrence in one dispatch each, the token-by-token
// math of deltanet.metal run in order inside the kernel.
//
//   delta_conv_rows_f32: for t in order: out[t][c] = silu(sum_{j<K-1}
//                        w[c][j] * hist[c][j] + w[c][K-1] * u[t][c]), then
//                        hist[c] shifts u[t][c] in; the history is stored
//                        back after the last token
//   delta_scan_f32:      for t in order, per value head h: delta_step_f32's
//                        update of S with token t's q, k, v, b, a, and its
//                        gated output out[t]
//
// Layout: as deltanet.metal with a leading token dimension on every per-token
// array: u, out (conv) float[tokens][C]; qkv float[tokens][C]; z, out (scan)
// float[tokens][value_heads][value_dim]; b, a float[tokens][value_heads].
// state (conv) float[C][K-1]; state (recurrent) float[value_heads][KEY_DIM]
// [value_dim], fp32.
//
// Mapping:
//   delta_conv_rows_f32: one thread per channel walks the chunk with its
//   history (at most DELTA_MAX_TAPS-1 values) in registers.
//   delta_scan_f32: delta_step_f32's mapping (one threadgroup per value head,
//   thread (r, j) owns rows r*rows .. of column j of S), with the state held
//   in registers across the whole chunk: loaded once, stored once. This is
//   the per-token scan, chosen over the chunked (WY / UT-transform) form:
//   it has exactly the decode kernel's arithmetic, so prefill and decode
//   agree to the last bit of each step, and it reads and writes the 64 KiB
//   per head state once per chunk instead of once per token. Per token it
//   costs four threadgroup barriers.
//
// Threadgroup memory: delta_scan_f32, as delta_step_f32: q and k of the
// head (2 * KEY_DIM floats), the kv and o slices (2 * KEY_DIM/rows *
// value_dim floats), three floats per simd-group.
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

kernel void delta_scan_f32(
    constant DeltaScanArgs& args [[buffer(0)]],
    device const float* qkv [[buffer(1)]],
    device const float* z [[buffer(2)]],
    device const float* b [[buffer(3)]],
    device const float* a [[buffer(4)]],
    device float* state [[buffer(5)]],
    device const float* neg_a [[buffer(6)]],
    device const float* dt_bias [[buffer(7)]],
    device const float* norm [[buffer(8)]],
    device float* o [[buffer(9)]],
    threadgroup float* tg_mem [[threadgroup(0)]],
    uint h [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    threadgroup float part_q[DELTA_MAX_SIMDGROUPS];
    threadgroup float part_k[DELTA_MAX_SIMDGROUPS];
    threadgroup float part_o[DELTA_MAX_SIMDGROUPS];
    const int rows = min(KEY_DIM, DELTA_ROWS_PER_THREAD);
    const int slices = KEY_DIM / rows;
    const int vd = args.value_dim;
    const int j = int(tid) % vd;
    const int r = int(tid) / vd;
    const ulong channels = ulong(2 * args.key_heads) * KEY_DIM + ulong(args.value_heads) * vd;
    const ulong hv = ulong(args.value_heads) * vd;
    threadgroup float* qs = tg_mem;
    threadgroup float* ks = qs + KEY_DIM;
    threadgroup float* kv_part = ks + KEY_DIM;
    threadgroup float* o_part = kv_part + slices * vd;
    const int kh = int(h) / (args.value_heads / args.key_heads);
    threadgroup const float* kr = ks + r * rows;
    threadgroup const float* qr = qs + r * rows;
    const float na = neg_a[h];
    const float dtb = dt_bias[h];
    const float gain = norm[j];

    device float* col = state + (ulong(h) * KEY_DIM + ulong(r) * rows) * vd + j;
    float s[DELTA_ROWS_PER_THREAD];
    for (int i = 0; i < rows; i++) {
        s[i] = col[ulong(i) * vd];
    }

    for (int t = 0; t < args.tokens; t++) {
        device const float* row = qkv + ulong(t) * channels;
        device const float* q_in = row + ulong(kh) * KEY_DIM;
        device const float* k_in = row + ulong(args.key_heads + kh) * KEY_DIM;
        device const float* v_in = row + ulong(2 * args.key_heads) * KEY_DIM + ulong(h) * vd;

        float sq = 0.0f;
        float sk = 0.0f;
        for (int i = int(tid); i < KEY_DIM; i += int(threads)) {
            const float x = q_in[i];
            const float y = k_in[i];
            qs[i] = x;
            ks[i] = y;
            sq += x * x;
            sk += y * y;
        }
        sq = simd_sum(sq);
        sk = simd_sum(sk);
        if (lane == 0) {
            part_q[sg] = sq;
            part_k[sg] = sk;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float tq = 0.0f;
        float tk = 0.0f;
        for (uint g = 0; g < simdgroups; g++) {
            tq += part_q[g];
            tk += part_k[g];
        }
        const float inv_q = rsqrt(tq + CHUNK_L2_EPS) * args.q_scale;
        const float inv_k = rsqrt(tk + CHUNK_L2_EPS);

        const ulong th = ulong(t) * ulong(args.value_heads) + h;
        const float beta = 1.0f / (1.0f + exp(-b[th]));
        const float x = a[th] + dtb;
        const float sp = x > CHUNK_SOFTPLUS_THRESHOLD ? x : log(1.0f + exp(x));
        const float alpha = exp(na * sp);

        float kv = 0.0f;
        for (int i = 0; i < rows; i++) {
            kv += s[i] * (kr[i] * inv_k * alpha);
        }
        kv_part[r * vd + j] = kv;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        kv = 0.0f;
        for (int g = 0; g < slices; g++) {
            kv += kv_part[g * vd + j];
        }
        const float delta = beta * (v_in[j] - kv);
        float oj = 0.0f;
        for (int i = 0; i < rows; i++) {
            s[i] = alpha * s[i] + (kr[i] * inv_k) * delta;
            oj += s[i] * (qr[i] * inv_q);
        }
        o_part[r * vd + j] = oj;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        oj = 0.0f;
        for (int g = 0; g < slices; g++) {
            oj += o_part[g * vd + j];
        }

        // Gated RMSNorm over the head's value_dim outputs (slice 0 owns them).
        const float so = simd_sum(r == 0 ? oj * oj : 0.0f);
        if (lane == 0) {
            part_o[sg] = so;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (r == 0) {
            float to = 0.0f;
            for (uint g = 0; g < simdgroups; g++) {
                to += part_o[g];
            }
            const float inv = rsqrt(to / float(vd) + args.eps);
            const ulong at = ulong(t) * hv + ulong(h) * vd + j;
            const float zj = z[at];
            o[at] = oj * inv * gain * (zj / (1.0f + exp(-zj)));
        }
    }
    for (int i = 0; i < rows; i++) {
        col[ulong(i) * vd] = s[i];
    }
}
