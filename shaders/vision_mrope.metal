// vision_mrope.metal: the attention layers' prep for prompt rows whose
// rotary positions are 3D (mRoPE: a prompt with images), as
// attention.metal's attn_prep_f16kv for the rest.
//
//   mrope_prep_f16kv: per row r and head, q = RoPE3(RMSNorm(q) * q_norm),
//                     gate split off, K cache row pos + r =
//                     half(RoPE3(RMSNorm(k) * k_norm)), V cache row
//                     half(v); RoPE3 rotates frequency j by
//                     pos3[r][axis[j]] * inv_freq[j]
//
// Layout: as attn_prep_f16kv (qg [rows][heads][2][head_dim], k and v
// [rows][kv_heads][head_dim], q and gate [rows][heads][head_dim], the
// caches half[capacity][kv_heads][head_dim]); pos3 is int[rows][3]
// (time, height, width), read on the GPU; with args.text every row is text
// turning by its cache row plus args.delta in all three components (a
// decode step past an image: only the inline position changes from step
// to step), and pos3 is not read.
// Mapping: one threadgroup per (head, row): heads first, then KV heads;
// threads stride over a head's dims, up to ATTN_PREP_MAX_THREADS.
// Threadgroup memory: one float per simd-group for the sum of squares.
// CPU reference: engine/cpu/vision_prefill.go (ropeAxes, ropePos) with
// engine/cpu's attention prep; text rows (all three components equal)
// rotate as attn_prep_f16kv at that position.
#include <metal_stdlib>
#include "args.h"
#include "vision.h"
using namespace metal;

// mrope_norm_rope writes y = RoPE3(x * inv * w) for the dims thread tid
// of threads handles, converting to y's type on the store.
template <typename T>
void mrope_norm_rope(device const float* x, device const float* w, device T* y, float inv, int d,
                     constant MRopePrepArgs& args, device const int* pos3, int row_pos, int tid, int threads)
{
    const int half_rot = args.rotary_dim / 2;
    for (int i = tid; i < half_rot; i += threads) {
        const float a = x[i] * inv * w[i];
        const float b = x[i + half_rot] * inv * w[i + half_rot];
        const int p = args.text != 0 ? row_pos + args.delta : pos3[args.axis[i]];
        const float angle = float(p) * args.inv_freq[i];
        const float c = precise::cos(angle);
        const float s = precise::sin(angle);
        y[i] = T(a * c - b * s);
        y[i + half_rot] = T(b * c + a * s);
    }
    for (int i = args.rotary_dim + tid; i < d; i += threads) {
        y[i] = T(x[i] * inv * w[i]);
    }
}

[[max_total_threads_per_threadgroup(ATTN_PREP_MAX_THREADS)]]
kernel void mrope_prep_f16kv(
    constant MRopePrepArgs& args [[buffer(0)]],
    device const float* qg [[buffer(1)]],
    device const float* k [[buffer(2)]],
    device const float* v [[buffer(3)]],
    device const float* q_norm [[buffer(4)]],
    device const float* k_norm [[buffer(5)]],
    device float* q [[buffer(6)]],
    device float* gate [[buffer(7)]],
    device half* k_cache [[buffer(8)]],
    device half* v_cache [[buffer(9)]],
    device const int* pos3 [[buffer(10)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint2 block [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    const uint threads = block.x;
    threadgroup float partial[ATTN_PREP_MAX_THREADS / 32];
    const int d = args.head_dim;
    const uint g = group.x;
    const int row_pos = args.pos + int(group.y);
    if (args.text == 0) {
        pos3 += ulong(group.y) * 3;
    }
    qg += ulong(group.y) * ulong(args.heads) * 2 * d;
    q += ulong(group.y) * ulong(args.heads) * d;
    gate += ulong(group.y) * ulong(args.heads) * d;
    k += ulong(group.y) * ulong(args.kv_heads) * d;
    v += ulong(group.y) * ulong(args.kv_heads) * d;
    const bool is_query = int(g) < args.heads;
    const int h = int(g) - args.heads;
    const ulong row = is_query ? 0 : (ulong(row_pos) * args.kv_heads + ulong(h)) * d;
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
        mrope_norm_rope(x, q_norm, q + ulong(g) * d, inv, d, args, pos3, row_pos, int(tid), int(threads));
    } else {
        mrope_norm_rope(x, k_norm, k_cache + row, inv, d, args, pos3, row_pos, int(tid), int(threads));
    }
}
