// vision.metal: the vision tower's kernels (Qwen3.5/3.6's ViT and its
// patch merger), everything in fp32 but the weights.
//
//   vis_layernorm_f32: y[r] = (x[r] - mean) / sqrt(var + eps) * w + b
//   vis_dense_bf16:    y[t] = act(W x[t] + b) (+ y[t] when accumulate),
//   vis_dense_f32:     W bf16 or f32 [rows][cols]; act none, gelu
//                      (tanh form) or gelu (erf)
//   vis_rope_f32:      the 2D rotary of each patch's q and k, in place
//   vis_attention_f32: o[p][h] = softmax_k(q[p][h] . k[k][h] * scale) . v[k][h]
//                      over the patches k of p's frame (no mask)
//   vis_copy_f32:      y[i] = x[i] (an image's features into the prompt's
//                      embedding rows)
//
// Layout: activations are float rows, packed: x and y of the norm
// [rows][n]; the dense product's x [tokens][cols] and y [tokens][rows],
// W row-major; qkv [tokens][3][heads][head_dim] (q, k, v of a patch side
// by side, as the fused qkv product writes them); cos and sin
// [frame][head_dim/2] (rows' then columns' angles, every frame alike);
// o [tokens][heads][head_dim]. A patch p belongs to frame p / frame.
// Mapping: vis_layernorm_f32 one threadgroup per row (any size up to
// VIS_THREADS); vis_dense_* a VIS_TILE x VIS_TILE threadgroup per tile of
// (outputs, tokens), thread (x, y) computing output x of token y;
// vis_rope_f32 and vis_copy_f32 one thread per element, VIS_THREADS to a
// threadgroup; vis_attention_f32 one simd-group per (patch, head): lane l
// scores key base + l of each run of 32 keys, an online softmax keeps the
// running max and sum, and lane l accumulates dims l, l + 32, ... of the
// output from every key of the run (the probabilities passed by
// simd_shuffle), so the sums run in one order whatever the device.
// Threadgroup memory: the norm one float per simd-group; the dense
// product two VIS_TILE x (VIS_TILE + 1) staging tiles; the attention the
// query head (VIS_MAX_HEAD_DIM floats).
// CPU reference: engine/vision/tower (compute.go: dense.apply, attention;
// tower.go: layerNormRows, geluTanh, geluErf), fp32 with the norm's
// statistics in float64 there.
#include <metal_stdlib>
#include "args.h"
#include "vision.h"
using namespace metal;

// The running max before any score: exp of it minus a score is 0.
constant float VIS_NO_SCORE = -1.0e30f;

// vis_erf is erf in fp32 (metal_stdlib has none): the rational
// approximation of Eigen's and XLA's float erf, within a few ulp on
// [-4, 4], where it reaches ±1 in fp32.
inline float vis_erf(float x)
{
    x = clamp(x, -4.0f, 4.0f);
    const float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * x;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return p / q;
}

inline float vis_act(float v, int act)
{
    if (act == VIS_ACT_GELU_TANH) {
        // sqrt(2 / pi)
        return 0.5f * v * (1.0f + precise::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
    if (act == VIS_ACT_GELU_ERF) {
        // 1 / sqrt(2)
        return 0.5f * v * (1.0f + vis_erf(v * 0.7071067811865476f));
    }
    return v;
}

// vis_row_sum is the sum over the threadgroup of each thread's v; every
// thread must call it. partial holds one float per simd-group.
inline float vis_row_sum(float v, threadgroup float* partial, uint sg, uint lane, uint simdgroups)
{
    v = simd_sum(v);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lane == 0) {
        partial[sg] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint s = 0; s < simdgroups; s++) {
        total += partial[s];
    }
    return total;
}

[[max_total_threads_per_threadgroup(VIS_THREADS)]]
kernel void vis_layernorm_f32(
    constant VisNormArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const float* w [[buffer(2)]],
    device const float* b [[buffer(3)]],
    device float* y [[buffer(4)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    threadgroup float partial[VIS_THREADS / 32];
    device const float* xr = x + ulong(row) * ulong(args.n);
    device float* yr = y + ulong(row) * ulong(args.n);
    float s = 0.0f;
    for (int i = int(tid); i < args.n; i += int(threads)) {
        s += xr[i];
    }
    const float mean = vis_row_sum(s, partial, sg, lane, simdgroups) / float(args.n);
    // The variance about the mean (two passes), as torch computes it.
    float ss = 0.0f;
    for (int i = int(tid); i < args.n; i += int(threads)) {
        const float d = xr[i] - mean;
        ss += d * d;
    }
    const float inv = rsqrt(vis_row_sum(ss, partial, sg, lane, simdgroups) / float(args.n) + args.eps);
    for (int i = int(tid); i < args.n; i += int(threads)) {
        yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
    }
}

// vis_dense is the tiled product of vis_dense_bf16 and vis_dense_f32.
template <typename W>
void vis_dense(constant VisDenseArgs& args, device const float* x, device const W* w,
               device const float* b, device float* y, threadgroup float* xs, threadgroup float* ws,
               uint2 group, uint2 tid)
{
    const int stride = VIS_TILE + 1; // off by one: no bank conflicts on the columns
    const int tx = int(tid.x), ty = int(tid.y);
    const int o0 = int(group.x) * VIS_TILE, t0 = int(group.y) * VIS_TILE;
    float acc = 0.0f;
    for (int k0 = 0; k0 < args.cols; k0 += VIS_TILE) {
        const int k = k0 + tx;
        const int t = t0 + ty, o = o0 + ty;
        xs[ty * stride + tx] = t < args.tokens && k < args.cols ? x[ulong(t) * ulong(args.cols) + ulong(k)] : 0.0f;
        ws[ty * stride + tx] = o < args.rows && k < args.cols ? float(w[ulong(o) * ulong(args.cols) + ulong(k)]) : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int kk = 0; kk < VIS_TILE; kk++) {
            acc += xs[ty * stride + kk] * ws[tx * stride + kk];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const int t = t0 + ty, o = o0 + tx;
    if (t < args.tokens && o < args.rows) {
        const ulong at = ulong(t) * ulong(args.rows) + ulong(o);
        float v = vis_act(acc + b[o], args.act);
        if (args.accumulate != 0) {
            v += y[at];
        }
        y[at] = v;
    }
}

[[max_total_threads_per_threadgroup(VIS_DENSE_THREADS)]]
kernel void vis_dense_bf16(
    constant VisDenseArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const bfloat* w [[buffer(2)]],
    device const float* b [[buffer(3)]],
    device float* y [[buffer(4)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint2 tid [[thread_position_in_threadgroup]])
{
    threadgroup float xs[VIS_TILE * (VIS_TILE + 1)];
    threadgroup float ws[VIS_TILE * (VIS_TILE + 1)];
    vis_dense(args, x, w, b, y, xs, ws, group, tid);
}

[[max_total_threads_per_threadgroup(VIS_DENSE_THREADS)]]
kernel void vis_dense_f32(
    constant VisDenseArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const float* w [[buffer(2)]],
    device const float* b [[buffer(3)]],
    device float* y [[buffer(4)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint2 tid [[thread_position_in_threadgroup]])
{
    threadgroup float xs[VIS_TILE * (VIS_TILE + 1)];
    threadgroup float ws[VIS_TILE * (VIS_TILE + 1)];
    vis_dense(args, x, w, b, y, xs, ws, group, tid);
}

[[max_total_threads_per_threadgroup(VIS_THREADS)]]
kernel void vis_rope_f32(
    constant VisRopeArgs& args [[buffer(0)]],
    device float* qkv [[buffer(1)]],
    device const float* cos_t [[buffer(2)]],
    device const float* sin_t [[buffer(3)]],
    uint gid [[thread_position_in_grid]])
{
    const int half_d = args.head_dim / 2;
    const int per_token = 2 * args.heads * half_d; // q and k
    if (int(gid) >= args.tokens * per_token) {
        return;
    }
    const int p = int(gid) / per_token;
    const int r = int(gid) % per_token;
    const int part = r / (args.heads * half_d);
    const int h = r / half_d % args.heads;
    const int i = r % half_d;
    const int hidden = args.heads * args.head_dim;
    device float* v = qkv + ulong(p) * 3 * ulong(hidden) + ulong(part * hidden + h * args.head_dim);
    const int at = (p % args.frame) * half_d + i;
    const float c = cos_t[at], s = sin_t[at];
    const float a = v[i], bb = v[i + half_d];
    v[i] = a * c - bb * s;
    v[i + half_d] = bb * c + a * s;
}

[[max_total_threads_per_threadgroup(VIS_ATTN_THREADS)]]
kernel void vis_attention_f32(
    constant VisAttnArgs& args [[buffer(0)]],
    device const float* qkv [[buffer(1)]],
    device float* o [[buffer(2)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float qs[VIS_MAX_HEAD_DIM];
    const int p = int(group.x), h = int(group.y), d = args.head_dim;
    const int hidden = args.heads * d;
    const int f0 = p / args.frame * args.frame;
    device const float* qp = qkv + ulong(p) * 3 * ulong(hidden) + ulong(h * d);
    for (int i = int(lane); i < d; i += 32) {
        qs[i] = qp[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float m = VIS_NO_SCORE, l = 0.0f;
    float acc[VIS_MAX_HEAD_DIM / 32];
    for (int j = 0; j < VIS_MAX_HEAD_DIM / 32; j++) {
        acc[j] = 0.0f;
    }
    for (int base = 0; base < args.frame; base += 32) {
        const int key = base + int(lane);
        const bool valid = key < args.frame;
        float s = VIS_NO_SCORE;
        if (valid) {
            device const float* kp = qkv + ulong(f0 + key) * 3 * ulong(hidden) + ulong(hidden + h * d);
            float dot = 0.0f;
            for (int i = 0; i < d; i++) {
                dot += qs[i] * kp[i];
            }
            s = dot * args.scale;
        }
        const float mn = max(m, simd_max(s));
        const float corr = precise::exp(m - mn);
        const float pr = valid ? precise::exp(s - mn) : 0.0f;
        l = l * corr + simd_sum(pr);
        for (int j = 0; j < VIS_MAX_HEAD_DIM / 32; j++) {
            acc[j] *= corr;
        }
        const int run = min(32, args.frame - base);
        for (int kk = 0; kk < run; kk++) {
            const float pk = simd_shuffle(pr, ushort(kk));
            device const float* vp = qkv + ulong(f0 + base + kk) * 3 * ulong(hidden) + ulong(2 * hidden + h * d);
            for (int j = 0; j < VIS_MAX_HEAD_DIM / 32; j++) {
                const int i = int(lane) + 32 * j;
                if (i < d) {
                    acc[j] += pk * vp[i];
                }
            }
        }
        m = mn;
    }
    device float* op = o + ulong(p) * ulong(hidden) + ulong(h * d);
    for (int j = 0; j < VIS_MAX_HEAD_DIM / 32; j++) {
        const int i = int(lane) + 32 * j;
        if (i < d) {
            op[i] = acc[j] / l;
        }
    }
}

[[max_total_threads_per_threadgroup(VIS_THREADS)]]
kernel void vis_copy_f32(
    constant VisCopyArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device float* y [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    if (int(gid) < args.n) {
        y[gid] = x[gid];
    }
}
