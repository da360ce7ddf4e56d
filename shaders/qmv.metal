// qmv.metal: MLX-affine quantized matrix times vector (4- and 8-bit), its
// gathered form for the routed experts, and the quantized embedding gather.
//
//   qmv:         y[r]    = sum_c (scale[r][c/64] * q[r][c] + bias[r][c/64]) * x[c]
//   qmv_experts: y[j][r] = the same with expert ids[j]'s matrix and the input
//                          x + j*x_stride (x_stride 0: one shared input)
//   embed:       out[c]  = scale[id][c/64] * q[id][c] + bias[id][c/64], id = token[0]
//
// Layout: codes is uint[rows][k*BITS/32]; element c of a row sits in word
// c/(32/BITS) at bit BITS*(c%(32/BITS)), lowest bits first. scales and
// biases are bfloat[rows][k/64]. Stacked experts follow one another: expert
// e's codes start rows*k*BITS/32 words after expert e-1's, its scales and
// biases rows*k/64 values after. x is float[k] (16-byte aligned), y float;
// ids and the token are uint, read on the GPU. An expert id or token out of
// range yields NaN outputs instead of an out-of-bounds read.
// Mapping: qmv and qmv_experts run QMV_SIMDGROUPS simd-groups per threadgroup,
// QMV_ROWS rows per simd-group; grid.y is the expert slot. Per step each
// lane loads QMV_WORDS_PER_LANE consecutive words of each of its rows (one
// uint2: 16 4-bit or 8 8-bit values, always inside one quantization group),
// so a simd-group reads 256 contiguous bytes per row per step; the x values
// are loaded once (float4) and reused by all the simd-group's rows. Codes are
// masked in place rather than shifted: x is prescaled by 2^-(BITS*i), so
// float(w & (mask << BITS*i)) * x' equals q*x exactly. The bias term uses
// the chunk's sum of x. fp32 partial sums; simd_sum per row at the end.
// embed runs one thread per element of the row.
// Threadgroup memory: none.
// CPU reference: engine/cpu matrix.mulQuant (dot4/dot8; dequantize in fp32,
// fp32 accumulation, scale*dot + bias*sum(x) per group) and matrix.row.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// qmv_rows computes rows row0 .. row0+QMV_ROWS-1 (those below rows) of one
// matrix into y; every lane of the simd-group must call it.
template <int BITS>
METAL_FUNC void qmv_rows(
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x,
    device float* y,
    int rows, int k, int row0, uint lane)
{
    constexpr int per_word = 32 / BITS;
    constexpr int values = QMV_WORDS_PER_LANE * per_word;
    constexpr int step = values * 32;
    constexpr uint mask = (1u << BITS) - 1u;
    const int words = k / per_word;
    const int groups = k / QMV_GROUP_SIZE;

    // Rows past the end repeat the last row, so reads stay in bounds; their
    // sums are not written.
    ulong row[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        row[r] = ulong(min(row0 + r, rows - 1));
    }

    float acc[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        acc[r] = 0.0f;
    }
    for (int c = int(lane) * values; c < k; c += step) {
        float xs[values];
        float xsum = 0.0f;
        for (int i = 0; i < values; i += 4) {
            float4 v = *(device const float4*)(x + c + i);
            xsum += (v.x + v.y) + (v.z + v.w);
            xs[i] = v.x;
            xs[i + 1] = v.y;
            xs[i + 2] = v.z;
            xs[i + 3] = v.w;
        }
        for (int i = 0; i < values; i++) {
            xs[i] *= 1.0f / float(1u << (BITS * (i % per_word)));
        }
        const int g = c / QMV_GROUP_SIZE;
        const int wi = c / per_word;
        for (int r = 0; r < QMV_ROWS; r++) {
            const uint2 w = *(device const uint2*)(codes + row[r] * ulong(words) + wi);
            float dot = 0.0f;
            for (int i = 0; i < per_word; i++) {
                dot += float(w.x & (mask << (BITS * i))) * xs[i];
                dot += float(w.y & (mask << (BITS * i))) * xs[per_word + i];
            }
            const ulong si = row[r] * ulong(groups) + g;
            acc[r] += float(scales[si]) * dot + float(biases[si]) * xsum;
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        const float s = simd_sum(acc[r]);
        if (lane == 0 && row0 + r < rows) {
            y[row0 + r] = s;
        }
    }
}

template <int BITS>
METAL_FUNC void qmv(
    constant QMVArgs& args,
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x,
    device float* y,
    uint group, uint sg, uint lane)
{
    const int row0 = (int(group) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return; // the whole simd-group: no simd call is left half-reached
    }
    qmv_rows<BITS>(codes, scales, biases, x, y, args.rows, args.k, row0, lane);
}

kernel void qmv_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    qmv<4>(args, codes, scales, biases, x, y, group, sg, lane);
}

kernel void qmv_bf16_gs64_b8(
    constant QMVArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    qmv<8>(args, codes, scales, biases, x, y, group, sg, lane);
}

kernel void qmv_experts_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    device const uint* ids [[buffer(6)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int row0 = (int(group.x) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    const uint slot = group.y;
    device float* yj = y + ulong(slot) * ulong(args.rows);
    const uint e = ids[slot];
    if (e >= uint(args.experts)) {
        for (int r = int(lane); r < QMV_ROWS && row0 + r < args.rows; r += 32) {
            yj[row0 + r] = NAN;
        }
        return;
    }
    const ulong expert_words = ulong(args.rows) * ulong(args.k / 8);
    const ulong expert_groups = ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    qmv_rows<4>(codes + e * expert_words, scales + e * expert_groups, biases + e * expert_groups,
                x + ulong(slot) * ulong(args.x_stride), yj, args.rows, args.k, row0, lane);
}

kernel void embed_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* token [[buffer(4)]],
    device float* out [[buffer(5)]],
    uint c [[thread_position_in_grid]])
{
    if (int(c) >= args.k) {
        return;
    }
    const uint id = token[0];
    if (id >= uint(args.rows)) {
        out[c] = NAN;
        return;
    }
    const ulong word = ulong(id) * ulong(args.k / 8) + c / 8;
    const ulong g = ulong(id) * ulong(args.k / QMV_GROUP_SIZE) + c / QMV_GROUP_SIZE;
    const float q = float((codes[word] >> (4 * (c % 8))) & 0xfu);
    out[c] = float(scales[g]) * q + float(biases[g]);
}
