// deltanet.metal: one decode token of a Gated DeltaNet mixer.
//
//   delta_step_conv_f32: the conv, qkv[c] = silu(sum_{j<K-1} w[c][j] *
//                   state[c][j] + w[c][K-1] * u[c]) (the conv state left as
//                   it was), then per value head h (key head h /
//                   (value_heads/key_heads)):
//                   q = l2norm(q) / sqrt(KEY_DIM), k = l2norm(k),
//                   beta = sigmoid(b[h]), alpha = exp(neg_a[h] * softplus(a[h] + dt_bias[h])),
//                   S = alpha S; kv = S^T k; S += k (x) beta (v - kv); o = S^T q;
//                   out = RMSNorm(o) * norm * silu(z)
//   delta_conv_shift_f32: the conv state update: state[c] shifts left and
//                   takes u[c] last
//
// The conv folded into the step saves the decode step a level: the step's
// threadgroups read the conv state (a key head's q and k channels are
// read by every value head sharing it), so none of them may write it; the
// shift runs in the next level, beside the output projection.
// Layout: u: float[C]; state (conv): float[C][K-1], oldest first;
// w: float[C][K]. qkv (the conv's output): float[C] = [q: key_heads][KEY_DIM] | [k: key_heads][KEY_DIM]
// | [v: value_heads][value_dim]; z and out: float[value_heads][value_dim];
// b, a, neg_a (= -exp(A_log)), dt_bias: float[value_heads]; norm:
// float[value_dim]; state (recurrent): float[value_heads][KEY_DIM][value_dim],
// row = key dim, column = value dim; it stays fp32 in device memory.
//
// Mapping:
//   delta_conv_shift_f32: one thread per channel, DELTA_CONV_THREADS per
//   threadgroup.
//   delta_step_conv_f32: one threadgroup per value head; thread (r, j), tid =
//   r * value_dim + j, owns column j of S over the key rows r*rows ..
//   (r+1)*rows - 1, rows = min(KEY_DIM, DELTA_ROWS_PER_THREAD), in registers:
//   the state is read once and written once, a row by consecutive threads
//   (coalesced). kv_j and o_j are sums over the KEY_DIM / rows row slices of
//   column j, exchanged through threadgroup memory; the l2 norms and the
//   output RMSNorm reduce with simd_sum and one float per simd-group.
//   Splitting the rows keeps a thread's state to 32 registers and gives the
//   GPU value_heads * value_dim * KEY_DIM/32 threads (16K for the model).
//   The conv of a v channel is computed by each of its column's row
//   slices (four taps: cheaper than sharing it). A threadgroup is at most
//   DELTA_STEP_MAX_THREADS (the model's 128 columns by 4 slices), which the
//   kernel declares, so the compiler can grant the 32 registers of state.
//
// Threadgroup memory: delta_step_conv_f32, the head's q and k (2 * KEY_DIM floats)
// and the kv and o slices (2 * KEY_DIM/rows * value_dim floats), plus three
// floats per simd-group for the reductions.
//
// CPU reference: engine/cpu/deltanet.go (conv, l2norm, the recurrence, the
// gated RMSNorm) and softplus in engine/cpu/model.go, fp32 throughout.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

constant int KEY_DIM [[function_constant(FC_DELTA + 0)]];

// Added to the sum of squares inside the l2 norms' square root.
constant float DELTA_L2_EPS = 1e-6f;
// softplus(x) is x above this, as torch computes it.
constant float DELTA_SOFTPLUS_THRESHOLD = 20.0f;

// delta_conv_out is the conv's output for channel c, from the state
// before this token.
METAL_FUNC float delta_conv_out(device const float* u, device const float* state, device const float* w, int taps, int c)
{
    device const float* hist = state + ulong(c) * (taps - 1);
    device const float* wc = w + ulong(c) * taps;
    const float cur = u[c];
    float acc = wc[taps - 1] * cur;
    for (int j = 0; j < taps - 1; j++) {
        acc += wc[j] * hist[j];
    }
    return acc / (1.0f + exp(-acc));
}

// delta_conv_shift shifts channel c's state left and appends u[c].
METAL_FUNC void delta_conv_shift(device const float* u, device float* state, int taps, int c)
{
    device float* hist = state + ulong(c) * (taps - 1);
    for (int j = 0; j + 1 < taps - 1; j++) {
        hist[j] = hist[j + 1];
    }
    hist[taps - 2] = u[c];
}

[[max_total_threads_per_threadgroup(DELTA_CONV_THREADS)]]
kernel void delta_conv_shift_f32(
    constant DeltaConvArgs& args [[buffer(0)]],
    device const float* u [[buffer(1)]],
    device float* state [[buffer(2)]],
    uint c [[thread_position_in_grid]])
{
    if (int(c) >= args.channels) {
        return;
    }
    delta_conv_shift(u, state, args.taps, int(c));
}

// delta_step reads qkv as the conv's input, whose output it computes with
// the conv state cs and taps cw.
METAL_FUNC void delta_step(
    constant DeltaStepArgs& args,
    device const float* qkv,
    device const float* z,
    device const float* b,
    device const float* a,
    device float* state,
    device const float* neg_a,
    device const float* dt_bias,
    device const float* norm,
    device float* o,
    device const float* cs,
    device const float* cw,
    threadgroup float* tg_mem,
    threadgroup float* part_q, threadgroup float* part_k, threadgroup float* part_o,
    uint h, uint tid, uint threads, uint sg, uint lane, uint simdgroups)
{
    const int rows = min(KEY_DIM, DELTA_ROWS_PER_THREAD);
    const int slices = KEY_DIM / rows;
    const int vd = args.value_dim;
    const int j = int(tid) % vd;
    const int r = int(tid) / vd;
    threadgroup float* qs = tg_mem;
    threadgroup float* ks = qs + KEY_DIM;
    threadgroup float* kv_part = ks + KEY_DIM;
    threadgroup float* o_part = kv_part + slices * vd;

    const int kh = int(h) / (args.value_heads / args.key_heads);
    const int q_at = kh * KEY_DIM;
    const int k_at = (args.key_heads + kh) * KEY_DIM;
    const int v_at = 2 * args.key_heads * KEY_DIM + int(h) * vd;

    float sq = 0.0f;
    float sk = 0.0f;
    for (int t = int(tid); t < KEY_DIM; t += int(threads)) {
        const float x = delta_conv_out(qkv, cs, cw, args.taps, q_at + t);
        const float y = delta_conv_out(qkv, cs, cw, args.taps, k_at + t);
        qs[t] = x;
        ks[t] = y;
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
    for (uint s = 0; s < simdgroups; s++) {
        tq += part_q[s];
        tk += part_k[s];
    }
    const float inv_q = rsqrt(tq + DELTA_L2_EPS) * args.q_scale;
    const float inv_k = rsqrt(tk + DELTA_L2_EPS);

    const float beta = 1.0f / (1.0f + exp(-b[h]));
    const float x = a[h] + dt_bias[h];
    const float sp = x > DELTA_SOFTPLUS_THRESHOLD ? x : log(1.0f + exp(x));
    const float alpha = exp(neg_a[h] * sp);

    // kv_j = sum_a (alpha S[a][j]) k[a] over this thread's rows.
    device float* col = state + (ulong(h) * KEY_DIM + ulong(r) * rows) * vd + j;
    threadgroup const float* kr = ks + r * rows;
    threadgroup const float* qr = qs + r * rows;
    float s[DELTA_ROWS_PER_THREAD];
    float kv = 0.0f;
    for (int i = 0; i < rows; i++) {
        s[i] = col[ulong(i) * vd];
        kv += s[i] * (kr[i] * inv_k * alpha);
    }
    kv_part[r * vd + j] = kv;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    kv = 0.0f;
    for (int t = 0; t < slices; t++) {
        kv += kv_part[t * vd + j];
    }
    const float vj = delta_conv_out(qkv, cs, cw, args.taps, v_at + j);
    const float delta = beta * (vj - kv);
    float oj = 0.0f;
    for (int i = 0; i < rows; i++) {
        const float sv = alpha * s[i] + (kr[i] * inv_k) * delta;
        col[ulong(i) * vd] = sv;
        oj += sv * (qr[i] * inv_q);
    }
    o_part[r * vd + j] = oj;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    oj = 0.0f;
    for (int t = 0; t < slices; t++) {
        oj += o_part[t * vd + j];
    }

    // Gated RMSNorm over the head's value_dim outputs (slice 0 owns them).
    float so = simd_sum(r == 0 ? oj * oj : 0.0f);
    if (lane == 0) {
        part_o[sg] = so;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (r != 0) {
        return;
    }
    float to = 0.0f;
    for (uint t = 0; t < simdgroups; t++) {
        to += part_o[t];
    }
    const float inv = rsqrt(to / float(vd) + args.eps);
    const ulong at = ulong(h) * vd + j;
    const float zj = z[at];
    o[at] = oj * inv * norm[j] * (zj / (1.0f + exp(-zj)));
}

[[max_total_threads_per_threadgroup(DELTA_STEP_MAX_THREADS)]]
kernel void delta_step_conv_f32(
    constant DeltaStepArgs& args [[buffer(0)]],
    device const float* u [[buffer(1)]],
    device const float* z [[buffer(2)]],
    device const float* b [[buffer(3)]],
    device const float* a [[buffer(4)]],
    device float* state [[buffer(5)]],
    device const float* neg_a [[buffer(6)]],
    device const float* dt_bias [[buffer(7)]],
    device const float* norm [[buffer(8)]],
    device float* o [[buffer(9)]],
    device const float* conv_state [[buffer(10)]],
    device const float* conv_w [[buffer(11)]],
    threadgroup float* tg_mem [[threadgroup(0)]],
    uint h [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    // Threadgroup storage lives at kernel scope (MSL 4.4); delta_step
    // takes pointers to the per-simd-group partial sums.
    threadgroup float part_q[DELTA_MAX_SIMDGROUPS];
    threadgroup float part_k[DELTA_MAX_SIMDGROUPS];
    threadgroup float part_o[DELTA_MAX_SIMDGROUPS];
    delta_step(args, u, z, b, a, state, neg_a, dt_bias, norm, o, conv_state, conv_w, tg_mem,
               part_q, part_k, part_o, h, tid, threads, sg, lane, simdgroups);
}
