// qmv_rows.metal: MLX-affine quantized matrices times the few vectors of a
// batched step's decode rows (one token each, up to QMV_ROWS_MAX_TOKENS), so
// that a step of several rows reads each weight once, as one row's does.
//
//   qmv_rows:        y[t][r] = sum_c (scale[r][c/64] * q[r][c] + bias[r][c/64]) * x[t][c]
//                    for t < tokens
//   qmv_rows_swiglu: y[t][r] = silu(gate[r] · x[t]) * (up[r] · x[t]) (the
//                    shared expert of every row)
//   qmv_rows_experts_swiglu_routed: y[p][r] = silu(G[ids[p]][r] · x[p / x_div]) *
//                    (U[ids[p]][r] · x[p / x_div]) over the (row, choice) pairs
//                    p of the routed experts (pair p = row * top_k + choice),
//                    ids[p] the router's choice from row p / top_k's router
//                    logits (router.h), which every simd-group computes for
//                    itself; the first of each row's pairs also writes the
//                    row's ids and weights for moe_rows_down_combine
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
// (moe_rows_down_combine), whose routed experts differ per row; those
// kernels load two matrices' words per step (gate and up, or two experts'
// down projections) before using either.
// Threadgroup memory: none.
// CPU reference: engine/cpu matrix.mulQuant (the same dequantized values;
// fp32 sums in another order, within the self-test's bounds), silu and the
// MoE combine as qmv.metal's.
#include <metal_stdlib>
#include "args.h"
#include "router.h"
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

// qmv_rows_pair_dots computes rows row0 .. row0+QMV_ROWS-1 (clamped as
// qmv_rows_dots clamps them) of two 4-bit matrices of one shape, each
// times its own vector (the same one for a SwiGLU's gate and up), into
// da[r] and db[r] in every lane. Both matrices' words of a step are loaded
// before any arithmetic, so their loads are in flight together; the codes
// are dequantized as they are used (one vector each). Every lane of the
// simd-group must call it.
METAL_FUNC void qmv_rows_pair_dots(
    device const uint* acodes, device const bfloat* ascales, device const bfloat* abiases, device const float* xa,
    device const uint* bcodes, device const bfloat* bscales, device const bfloat* bbiases, device const float* xb,
    int rows, int k, int row0, uint lane, thread float* da, thread float* db)
{
    constexpr int per_word = 8;
    constexpr int values = QMV_WORDS_PER_LANE * per_word;
    constexpr uint mask = 0xfu;
    ulong row[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        row[r] = ulong(min(row0 + r, rows - 1));
    }
    float acca[QMV_ROWS];
    float accb[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        acca[r] = 0.0f;
        accb[r] = 0.0f;
    }
    for (int c = int(lane) * values; c < k; c += values * 32) {
        uint2 wa[QMV_ROWS];
        uint2 wb[QMV_ROWS];
        float sa[QMV_ROWS];
        float ba[QMV_ROWS];
        float sb[QMV_ROWS];
        float bb[QMV_ROWS];
        for (int r = 0; r < QMV_ROWS; r++) {
            const ulong wi = row[r] * ulong(k / per_word) + c / per_word;
            const ulong si = row[r] * ulong(k / QMV_GROUP_SIZE) + c / QMV_GROUP_SIZE;
            wa[r] = *(device const uint2*)(acodes + wi);
            wb[r] = *(device const uint2*)(bcodes + wi);
            sa[r] = float(ascales[si]);
            ba[r] = float(abiases[si]);
            sb[r] = float(bscales[si]);
            bb[r] = float(bbiases[si]);
        }
        float xsa[values];
        float xsb[values];
        for (int i = 0; i < values; i += 4) {
            const float4 va = *(device const float4*)(xa + c + i);
            const float4 vb = *(device const float4*)(xb + c + i);
            xsa[i] = va.x;
            xsa[i + 1] = va.y;
            xsa[i + 2] = va.z;
            xsa[i + 3] = va.w;
            xsb[i] = vb.x;
            xsb[i + 1] = vb.y;
            xsb[i + 2] = vb.z;
            xsb[i + 3] = vb.w;
        }
        for (int r = 0; r < QMV_ROWS; r++) {
            float a = 0.0f;
            float b = 0.0f;
            for (int i = 0; i < per_word; i++) {
                a = fma(sa[r] * float((wa[r].x >> (4 * i)) & mask) + ba[r], xsa[i], a);
                a = fma(sa[r] * float((wa[r].y >> (4 * i)) & mask) + ba[r], xsa[per_word + i], a);
                b = fma(sb[r] * float((wb[r].x >> (4 * i)) & mask) + bb[r], xsb[i], b);
                b = fma(sb[r] * float((wb[r].y >> (4 * i)) & mask) + bb[r], xsb[per_word + i], b);
            }
            acca[r] += a;
            accb[r] += b;
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        da[r] = simd_sum(acca[r]);
        db[r] = simd_sum(accb[r]);
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
kernel void qmv_rows_experts_swiglu_routed_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* gcodes [[buffer(1)]],
    device const bfloat* gscales [[buffer(2)]],
    device const bfloat* gbiases [[buffer(3)]],
    device const uint* ucodes [[buffer(4)]],
    device const bfloat* uscales [[buffer(5)]],
    device const bfloat* ubiases [[buffer(6)]],
    device const float* x [[buffer(7)]],
    device float* y [[buffer(8)]],
    device uint* ids [[buffer(9)]],
    constant MoEArgs& route [[buffer(10)]],
    device const float* logits [[buffer(11)]],
    device float* weights [[buffer(12)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int row0 = (int(group.x) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    const uint pair = group.y;
    const uint t = pair / uint(args.x_div);
    const uint choice = pair % uint(args.x_div);
    uint id;
    float w;
    router_topk_simd(route, logits + ulong(t) * ulong(route.n), lane, id, w);
    if (group.x == 0 && sg == 0 && choice == 0 && id != ROUTER_NONE) {
        ids[ulong(t) * ulong(route.k) + lane] = id;
        weights[ulong(t) * ulong(route.k) + lane] = w;
    }
    device float* yp = y + ulong(pair) * ulong(args.rows);
    const uint e = simd_shuffle(id, ushort(choice));
    if (e >= uint(args.experts)) {
        for (int r = int(lane); r < QMV_ROWS && row0 + r < args.rows; r += 32) {
            yp[row0 + r] = NAN;
        }
        return;
    }
    const ulong words = ulong(e) * ulong(args.rows) * ulong(args.k / 8);
    const ulong groups = ulong(e) * ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    device const float* xp = x + ulong(pair / uint(args.x_div)) * ulong(args.k);
    float g[QMV_ROWS];
    float u[QMV_ROWS];
    qmv_rows_pair_dots(gcodes + words, gscales + groups, gbiases + groups, xp,
                       ucodes + words, uscales + groups, ubiases + groups, xp, args.rows, args.k, row0, lane, g, u);
    for (int r = 0; r < QMV_ROWS; r++) {
        if (lane == 0 && row0 + r < args.rows) {
            yp[row0 + r] = qmv_rows_silu(g[r], u[r]);
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
    // Two experts at a time, their loads in flight together; an odd last
    // one pairs with itself. An id past the stack reads expert 0 and
    // yields NaN.
    for (int j = 0; j < args.top_k; j += 2) {
        const ulong pa = t * ulong(args.top_k) + ulong(j);
        const ulong pb = t * ulong(args.top_k) + ulong(min(j + 1, args.top_k - 1));
        const uint ea = ids[pa]; // one id for the whole simd-group
        const uint eb = ids[pb];
        const bool bad_a = ea >= uint(args.experts);
        const bool bad_b = eb >= uint(args.experts);
        const ulong oa = bad_a ? 0 : ulong(ea);
        const ulong ob = bad_b ? 0 : ulong(eb);
        float da[QMV_ROWS];
        float db[QMV_ROWS];
        qmv_rows_pair_dots(codes + oa * expert_words, scales + oa * expert_groups, biases + oa * expert_groups, h + pa * ulong(args.k),
                           codes + ob * expert_words, scales + ob * expert_groups, biases + ob * expert_groups, h + pb * ulong(args.k),
                           args.rows, args.k, row0, lane, da, db);
        for (int r = 0; r < QMV_ROWS; r++) {
            acc[r] += weights[pa] * (bad_a ? NAN : da[r]);
            if (j + 1 < args.top_k) {
                acc[r] += weights[pb] * (bad_b ? NAN : db[r]);
            }
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
