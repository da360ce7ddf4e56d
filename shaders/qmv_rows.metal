// qmv_rows.metal: MLX-affine quantized matrices times the few vectors of a
// batched step's decode rows (one token each, up to QMV_ROWS_MAX_TOKENS), so
// that a step of several rows reads each weight once, as one row's does.
//
//   qmv_rows:        y[t][r] = sum_c (scale[r][c/64] * q[r][c] + bias[r][c/64]) * x[t][c]
//                    for t < tokens
//   qmv_rows_swiglu: y[t][r] = silu(gate[r] · x[t]) * (up[r] · x[t]) (the
//                    shared expert of every row)
//   qmv_rows_experts_swiglu: y[p][r] = silu(G[ids[p]][r] · x[p / x_div]) *
//                    (U[ids[p]][r] · x[p / x_div]) over the (row, choice) pairs
//                    p of the routed experts (pair p = row * top_k + choice)
//   moe_rows_down_combine: y[t][r] = sum_j weights[t][j] * (down[ids[t][j]] · h[t][j])[r]
//                    + sigmoid(sg[t]) * (shared_down · sh[t])[r] (the MoE
//                    block's output of row t, which the caller adds to the
//                    stream)
//
// Layout: as qmv.metal's: codes uint[rows][k*BITS/32], element c of a row in
// word c/(32/BITS) at bit BITS*(c%(32/BITS)); scales and biases
// bfloat[rows][k/64]; stacked experts follow one another. x is
// float[tokens][k] (each row on 16 bytes), y float[tokens][rows]; ids, the
// weights and the shared gates have one entry per pair (or row), in order.
// An expert id out of range yields NaN outputs instead of an out-of-bounds
// read.
// Mapping: qmv.metal's: QMV_SIMDGROUPS simd-groups per threadgroup, QMV_ROWS
// weight rows per simd-group, each lane loading one uint2 of each of its rows
// per step (all the rows' words and scales before any arithmetic, so they are
// in flight together). A lane dequantizes its words once (scale * q + bias)
// and applies them to every token's x (float4 loads, from cache after the
// first simd-group), one fp32 accumulator per row and token, simd_sum at the
// end; the weight traffic is one row's, the arithmetic tokens times it.
// grid.y is the pair (qmv_rows_experts_swiglu) or the token
// (moe_rows_down_combine), whose routed experts differ per row.
// Threadgroup memory: none.
// CPU reference: engine/cpu matrix.mulQuant (the same dequantized values;
// fp32 sums in another order, within the self-test's bounds), silu and the
// MoE combine as qmv.metal's.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// qmv_rows_dots computes rows row0 .. row0+QMV_ROWS-1 of one matrix (rows
// past rows repeat the last, so reads stay in bounds) times the tokens
// vectors x + t*k, into dot[r * QMV_ROWS_MAX_TOKENS + t] in every lane;
// every lane of the simd-group must call it.
template <int BITS>
METAL_FUNC void qmv_rows_dots(
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x, int tokens,
    int rows, int k, int row0, uint lane, thread float* dot)
{
    constexpr int per_word = 32 / BITS;
    constexpr int values = QMV_WORDS_PER_LANE * per_word;
    constexpr uint mask = (1u << BITS) - 1u;
    ulong row[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        row[r] = ulong(min(row0 + r, rows - 1));
    }
    float acc[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    for (int i = 0; i < QMV_ROWS * QMV_ROWS_MAX_TOKENS; i++) {
        acc[i] = 0.0f;
    }
    for (int c = int(lane) * values; c < k; c += values * 32) {
        uint2 w[QMV_ROWS];
        float s[QMV_ROWS];
        float b[QMV_ROWS];
        for (int r = 0; r < QMV_ROWS; r++) {
            w[r] = *(device const uint2*)(codes + row[r] * ulong(k / per_word) + c / per_word);
            const ulong si = row[r] * ulong(k / QMV_GROUP_SIZE) + c / QMV_GROUP_SIZE;
            s[r] = float(scales[si]);
            b[r] = float(biases[si]);
        }
        float wv[QMV_ROWS][values];
        for (int r = 0; r < QMV_ROWS; r++) {
            for (int i = 0; i < per_word; i++) {
                wv[r][i] = s[r] * float((w[r].x >> (BITS * i)) & mask) + b[r];
                wv[r][per_word + i] = s[r] * float((w[r].y >> (BITS * i)) & mask) + b[r];
            }
        }
        for (int t = 0; t < QMV_ROWS_MAX_TOKENS; t++) {
            if (t >= tokens) {
                break;
            }
            device const float* xt = x + ulong(t) * ulong(k) + c;
            float xs[values];
            for (int i = 0; i < values; i += 4) {
                const float4 v = *(device const float4*)(xt + i);
                xs[i] = v.x;
                xs[i + 1] = v.y;
                xs[i + 2] = v.z;
                xs[i + 3] = v.w;
            }
            for (int r = 0; r < QMV_ROWS; r++) {
                float d = 0.0f;
                for (int i = 0; i < values; i++) {
                    d = fma(wv[r][i], xs[i], d);
                }
                acc[r * QMV_ROWS_MAX_TOKENS + t] += d;
            }
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        for (int t = 0; t < QMV_ROWS_MAX_TOKENS; t++) {
            if (t < tokens) {
                dot[r * QMV_ROWS_MAX_TOKENS + t] = simd_sum(acc[r * QMV_ROWS_MAX_TOKENS + t]);
            }
        }
    }
}

// qmv_rows_silu is silu(g) * u, as qmv.metal's swiglu forms write it.
METAL_FUNC float qmv_rows_silu(float g, float u)
{
    return g / (1.0f + exp(-g)) * u;
}

template <int BITS>
METAL_FUNC void qmv_rows(
    constant QMMArgs& args,
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
    float dot[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    qmv_rows_dots<BITS>(codes, scales, biases, x, args.tokens, args.rows, args.k, row0, lane, dot);
    if (lane != 0) {
        return;
    }
    for (int t = 0; t < args.tokens; t++) {
        for (int r = 0; r < QMV_ROWS && row0 + r < args.rows; r++) {
            y[ulong(t) * ulong(args.rows) + ulong(row0 + r)] = dot[r * QMV_ROWS_MAX_TOKENS + t];
        }
    }
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_rows_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    qmv_rows<4>(args, codes, scales, biases, x, y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_rows_bf16_gs64_b8(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    qmv_rows<8>(args, codes, scales, biases, x, y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_rows_swiglu_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* gcodes [[buffer(1)]],
    device const bfloat* gscales [[buffer(2)]],
    device const bfloat* gbiases [[buffer(3)]],
    device const uint* ucodes [[buffer(4)]],
    device const bfloat* uscales [[buffer(5)]],
    device const bfloat* ubiases [[buffer(6)]],
    device const float* x [[buffer(7)]],
    device float* y [[buffer(8)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int row0 = (int(group) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    float g[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    float u[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    qmv_rows_dots<4>(gcodes, gscales, gbiases, x, args.tokens, args.rows, args.k, row0, lane, g);
    qmv_rows_dots<4>(ucodes, uscales, ubiases, x, args.tokens, args.rows, args.k, row0, lane, u);
    if (lane != 0) {
        return;
    }
    for (int t = 0; t < args.tokens; t++) {
        for (int r = 0; r < QMV_ROWS && row0 + r < args.rows; r++) {
            const int i = r * QMV_ROWS_MAX_TOKENS + t;
            y[ulong(t) * ulong(args.rows) + ulong(row0 + r)] = qmv_rows_silu(g[i], u[i]);
        }
    }
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_rows_experts_swiglu_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* gcodes [[buffer(1)]],
    device const bfloat* gscales [[buffer(2)]],
    device const bfloat* gbiases [[buffer(3)]],
    device const uint* ucodes [[buffer(4)]],
    device const bfloat* uscales [[buffer(5)]],
    device const bfloat* ubiases [[buffer(6)]],
    device const float* x [[buffer(7)]],
    device float* y [[buffer(8)]],
    device const uint* ids [[buffer(9)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int row0 = (int(group.x) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    const uint pair = group.y;
    device float* yp = y + ulong(pair) * ulong(args.rows);
    const uint e = ids[pair]; // one id for the whole simd-group
    if (e >= uint(args.experts)) {
        for (int r = int(lane); r < QMV_ROWS && row0 + r < args.rows; r += 32) {
            yp[row0 + r] = NAN;
        }
        return;
    }
    const ulong words = ulong(e) * ulong(args.rows) * ulong(args.k / 8);
    const ulong groups = ulong(e) * ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    device const float* xp = x + ulong(pair / uint(args.x_div)) * ulong(args.k);
    float g[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    float u[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    qmv_rows_dots<4>(gcodes + words, gscales + groups, gbiases + groups, xp, 1, args.rows, args.k, row0, lane, g);
    qmv_rows_dots<4>(ucodes + words, uscales + groups, ubiases + groups, xp, 1, args.rows, args.k, row0, lane, u);
    for (int r = 0; r < QMV_ROWS; r++) {
        if (lane == 0 && row0 + r < args.rows) {
            const int i = r * QMV_ROWS_MAX_TOKENS;
            yp[row0 + r] = qmv_rows_silu(g[i], u[i]);
        }
    }
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void moe_rows_down_combine_bf16_gs64_b4(
    constant MoEDownArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* h [[buffer(4)]],
    device const uint* ids [[buffer(5)]],
    device const float* weights [[buffer(6)]],
    device const uint* scodes [[buffer(7)]],
    device const bfloat* sscales [[buffer(8)]],
    device const bfloat* sbiases [[buffer(9)]],
    device const float* sh [[buffer(10)]],
    device const float* shared_gate [[buffer(11)]],
    device float* y [[buffer(12)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int row0 = (int(group.x) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    const ulong t = group.y;
    const ulong expert_words = ulong(args.rows) * ulong(args.k / 8);
    const ulong expert_groups = ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    float acc[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        acc[r] = 0.0f;
    }
    for (int j = 0; j < args.top_k; j++) {
        const ulong pair = t * ulong(args.top_k) + ulong(j);
        const uint e = ids[pair]; // one id for the whole simd-group
        float d[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
        if (e >= uint(args.experts)) {
            for (int r = 0; r < QMV_ROWS; r++) {
                d[r * QMV_ROWS_MAX_TOKENS] = NAN;
            }
        } else {
            qmv_rows_dots<4>(codes + e * expert_words, scales + e * expert_groups, biases + e * expert_groups,
                             h + pair * ulong(args.k), 1, args.rows, args.k, row0, lane, d);
        }
        for (int r = 0; r < QMV_ROWS; r++) {
            acc[r] += weights[pair] * d[r * QMV_ROWS_MAX_TOKENS];
        }
    }
    float shared[QMV_ROWS * QMV_ROWS_MAX_TOKENS];
    qmv_rows_dots<4>(scodes, sscales, sbiases, sh + t * ulong(args.shared_k), 1, args.rows, args.shared_k, row0, lane, shared);
    // moe_combine_rows_f32's expression, row by row.
    const float g = 1.0f / (1.0f + exp(-shared_gate[t]));
    for (int r = 0; r < QMV_ROWS; r++) {
        if (lane == 0 && row0 + r < args.rows) {
            y[t * ulong(args.rows) + ulong(row0 + r)] = acc[r] + g * shared[r * QMV_ROWS_MAX_TOKENS];
        }
    }
}
