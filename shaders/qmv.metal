// qmv.metal: MLX-affine quantized matrix times vector (4- and 8-bit), its
// forms for several matrices on one input and for SwiGLU pairs, its gathered
// forms for the routed experts, and the quantized embedding gather.
//
//   qmv:         y[r]    = sum_c (scale[r][c/64] * q[r][c] + bias[r][c/64]) * x[c]
//   qmv_multi:   y_i[r]  = the same for up to QMV_MULTI_MAX matrices i of one
//                          width that read one x
//   qmv_swiglu:  y[r]    = silu(gate[r] · x) * (up[r] · x), silu(g) = g / (1 + e^-g)
//   qmv_experts: y[j][r] = qmv with expert ids[j]'s matrix and the input
//                          x + j*x_stride (x_stride 0: one shared input)
//   qmv_experts_swiglu: y[j][r] = qmv_swiglu with expert ids[j]'s gate and up
//                          and one shared x
//   qmv_experts_swiglu_routed: the same with ids[j] the router's j-th choice
//                          from the router logits (router.h), which every
//                          simd-group computes for itself; the first one also
//                          writes ids and the weights for the kernels after
//   embed:       out[c]  = scale[id][c/64] * q[id][c] + bias[id][c/64], id = token[0]
//
// Layout: codes is uint[rows][k*BITS/32]; element c of a row sits in word
// c/(32/BITS) at bit BITS*(c%(32/BITS)), lowest bits first. scales and
// biases are bfloat[rows][k/64]. Stacked experts follow one another: expert
// e's codes start rows*k*BITS/32 words after expert e-1's, its scales and
// biases rows*k/64 values after. x is float[k] (16-byte aligned), y float;
// ids and the token are uint, read on the GPU. An expert id or token out of
// range yields NaN outputs instead of an out-of-bounds read.
// Mapping: the qmv kernels run QMV_SIMDGROUPS simd-groups per threadgroup,
// QMV_ROWS rows per simd-group; grid.y is the expert slot. qmv_multi's
// simd-groups index the matrices' row blocks laid end to end (the grid
// covers all of them; a block never spans two matrices); the swiglu forms
// compute the same rows of gate and up in one simd-group. Per step each
// lane loads QMV_WORDS_PER_LANE consecutive words of each of its rows (one
// uint2: 16 4-bit or 8 8-bit values, always inside one quantization group),
// so a simd-group reads 256 contiguous bytes per row per step; the x values
// are loaded once (float4) and reused by all the simd-group's rows. Codes are
// masked in place rather than shifted: x is prescaled by 2^-(BITS*i), so
// float(w & (mask << BITS*i)) * x' equals q*x exactly. The bias term uses
// the chunk's sum of x. fp32 partial sums; simd_sum per row at the end.
// embed runs one thread per element of the row, grid.y rows (a prefill
// chunk's tokens: row r reads token[r] and writes out + r*k).
// Threadgroup memory: none.
// CPU reference: engine/cpu matrix.mulQuant (dot4/dot8; dequantize in fp32,
// fp32 accumulation, scale*dot + bias*sum(x) per group) and matrix.row;
// silu as engine/cpu's.
#include <metal_stdlib>
#include "args.h"
#include "router.h"
using namespace metal;

// qmv_load_x fills xs with the values of x from column c that a lane uses
// in one step, prescaled so that codes can be masked in place, and returns
// their plain sum (the factor of the bias term).
template <int BITS>
METAL_FUNC float qmv_load_x(device const float* x, int c, thread float* xs)
{
    constexpr int per_word = 32 / BITS;
    constexpr int values = QMV_WORDS_PER_LANE * per_word;
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
    return xsum;
}

// qmv_row_step is one lane's step of row row from column c, with xs and
// xsum from qmv_load_x.
template <int BITS>
METAL_FUNC float qmv_row_step(
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    ulong row, int k, int c, thread const float* xs, float xsum)
{
    constexpr int per_word = 32 / BITS;
    constexpr uint mask = (1u << BITS) - 1u;
    const uint2 w = *(device const uint2*)(codes + row * ulong(k / per_word) + c / per_word);
    float dot = 0.0f;
    for (int i = 0; i < per_word; i++) {
        dot += float(w.x & (mask << (BITS * i))) * xs[i];
        dot += float(w.y & (mask << (BITS * i))) * xs[per_word + i];
    }
    const ulong si = row * ulong(k / QMV_GROUP_SIZE) + c / QMV_GROUP_SIZE;
    return float(scales[si]) * dot + float(biases[si]) * xsum;
}

// qmv_block_rows is the rows row0 .. row0+QMV_ROWS-1 clamped to the last
// one, so that reads past the end stay in bounds; their sums are not
// written.
METAL_FUNC void qmv_block_rows(int rows, int row0, thread ulong* row)
{
    for (int r = 0; r < QMV_ROWS; r++) {
        row[r] = ulong(min(row0 + r, rows - 1));
    }
}

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
    constexpr int values = QMV_WORDS_PER_LANE * (32 / BITS);
    ulong row[QMV_ROWS];
    qmv_block_rows(rows, row0, row);
    float acc[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        acc[r] = 0.0f;
    }
    for (int c = int(lane) * values; c < k; c += values * 32) {
        float xs[values];
        const float xsum = qmv_load_x<BITS>(x, c, xs);
        for (int r = 0; r < QMV_ROWS; r++) {
            acc[r] += qmv_row_step<BITS>(codes, scales, biases, row[r], k, c, xs, xsum);
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        const float s = simd_sum(acc[r]);
        if (lane == 0 && row0 + r < rows) {
            y[row0 + r] = s;
        }
    }
}

// qmv_swiglu_rows is qmv_rows for two matrices of one shape at once,
// writing silu(gate row · x) * (up row · x); x is loaded once for both.
template <int BITS>
METAL_FUNC void qmv_swiglu_rows(
    device const uint* gcodes,
    device const bfloat* gscales,
    device const bfloat* gbiases,
    device const uint* ucodes,
    device const bfloat* uscales,
    device const bfloat* ubiases,
    device const float* x,
    device float* y,
    int rows, int k, int row0, uint lane)
{
    constexpr int values = QMV_WORDS_PER_LANE * (32 / BITS);
    ulong row[QMV_ROWS];
    qmv_block_rows(rows, row0, row);
    float gacc[QMV_ROWS];
    float uacc[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        gacc[r] = 0.0f;
        uacc[r] = 0.0f;
    }
    for (int c = int(lane) * values; c < k; c += values * 32) {
        float xs[values];
        const float xsum = qmv_load_x<BITS>(x, c, xs);
        for (int r = 0; r < QMV_ROWS; r++) {
            gacc[r] += qmv_row_step<BITS>(gcodes, gscales, gbiases, row[r], k, c, xs, xsum);
            uacc[r] += qmv_row_step<BITS>(ucodes, uscales, ubiases, row[r], k, c, xs, xsum);
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        const float g = simd_sum(gacc[r]);
        const float u = simd_sum(uacc[r]);
        if (lane == 0 && row0 + r < rows) {
            y[row0 + r] = g / (1.0f + exp(-g)) * u;
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

// qmv_multi finds the matrix whose block the simd-group computes (the same
// for all its lanes) and computes it.
template <int BITS>
METAL_FUNC void qmv_multi(
    constant QMVMultiArgs& args,
    device const float* x,
    device const uint* c0, device const uint* c1, device const uint* c2, device const uint* c3,
    device const bfloat* s0, device const bfloat* s1, device const bfloat* s2, device const bfloat* s3,
    device const bfloat* b0, device const bfloat* b1, device const bfloat* b2, device const bfloat* b3,
    device float* y0, device float* y1, device float* y2, device float* y3,
    uint group, uint sg, uint lane)
{
    const int block = int(group) * QMV_SIMDGROUPS + int(sg);
    int m = 0;
    while (m < args.matrices && block >= args.block_end[m]) {
        m++;
    }
    if (m == args.matrices) {
        return; // the whole simd-group: past the last matrix's blocks
    }
    const int row0 = (block - (m == 0 ? 0 : args.block_end[m - 1])) * QMV_ROWS;
    device const uint* codes = m == 0 ? c0 : m == 1 ? c1 : m == 2 ? c2 : c3;
    device const bfloat* scales = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;
    device const bfloat* biases = m == 0 ? b0 : m == 1 ? b1 : m == 2 ? b2 : b3;
    device float* y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;
    qmv_rows<BITS>(codes, scales, biases, x, y, args.rows[m], args.k, row0, lane);
}

kernel void qmv_multi_bf16_gs64_b4(
    constant QMVMultiArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const uint* c0 [[buffer(2)]], device const uint* c1 [[buffer(3)]],
    device const uint* c2 [[buffer(4)]], device const uint* c3 [[buffer(5)]],
    device const bfloat* s0 [[buffer(6)]], device const bfloat* s1 [[buffer(7)]],
    device const bfloat* s2 [[buffer(8)]], device const bfloat* s3 [[buffer(9)]],
    device const bfloat* b0 [[buffer(10)]], device const bfloat* b1 [[buffer(11)]],
    device const bfloat* b2 [[buffer(12)]], device const bfloat* b3 [[buffer(13)]],
    device float* y0 [[buffer(14)]], device float* y1 [[buffer(15)]],
    device float* y2 [[buffer(16)]], device float* y3 [[buffer(17)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    qmv_multi<4>(args, x, c0, c1, c2, c3, s0, s1, s2, s3, b0, b1, b2, b3, y0, y1, y2, y3, group, sg, lane);
}

kernel void qmv_multi_bf16_gs64_b8(
    constant QMVMultiArgs& args [[buffer(0)]],
    device const float* x [[buffer(1)]],
    device const uint* c0 [[buffer(2)]], device const uint* c1 [[buffer(3)]],
    device const uint* c2 [[buffer(4)]], device const uint* c3 [[buffer(5)]],
    device const bfloat* s0 [[buffer(6)]], device const bfloat* s1 [[buffer(7)]],
    device const bfloat* s2 [[buffer(8)]], device const bfloat* s3 [[buffer(9)]],
    device const bfloat* b0 [[buffer(10)]], device const bfloat* b1 [[buffer(11)]],
    device const bfloat* b2 [[buffer(12)]], device const bfloat* b3 [[buffer(13)]],
    device float* y0 [[buffer(14)]], device float* y1 [[buffer(15)]],
    device float* y2 [[buffer(16)]], device float* y3 [[buffer(17)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    qmv_multi<8>(args, x, c0, c1, c2, c3, s0, s1, s2, s3, b0, b1, b2, b3, y0, y1, y2, y3, group, sg, lane);
}

kernel void qmv_swiglu_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
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
    qmv_swiglu_rows<4>(gcodes, gscales, gbiases, ucodes, uscales, ubiases, x, y, args.rows, args.k, row0, lane);
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

kernel void qmv_experts_swiglu_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
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
    const uint slot = group.y;
    device float* yj = y + ulong(slot) * ulong(args.rows);
    const uint e = ids[slot];
    if (e >= uint(args.experts)) {
        for (int r = int(lane); r < QMV_ROWS && row0 + r < args.rows; r += 32) {
            yj[row0 + r] = NAN;
        }
        return;
    }
    const ulong words = ulong(e) * ulong(args.rows) * ulong(args.k / 8);
    const ulong groups = ulong(e) * ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    qmv_swiglu_rows<4>(gcodes + words, gscales + groups, gbiases + groups,
                       ucodes + words, uscales + groups, ubiases + groups,
                       x, yj, args.rows, args.k, row0, lane);
}

kernel void qmv_experts_swiglu_routed_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
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
    uint id;
    float w;
    router_topk_simd(route, logits, lane, id, w);
    if (group.x == 0 && group.y == 0 && sg == 0 && id != ROUTER_NONE) {
        ids[lane] = id;
        weights[lane] = w;
    }
    const uint slot = group.y;
    const uint e = simd_shuffle(id, ushort(slot));
    device float* yj = y + ulong(slot) * ulong(args.rows);
    if (e >= uint(args.experts)) {
        for (int r = int(lane); r < QMV_ROWS && row0 + r < args.rows; r += 32) {
            yj[row0 + r] = NAN;
        }
        return;
    }
    const ulong words = ulong(e) * ulong(args.rows) * ulong(args.k / 8);
    const ulong groups = ulong(e) * ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    qmv_swiglu_rows<4>(gcodes + words, gscales + groups, gbiases + groups,
                       ucodes + words, uscales + groups, ubiases + groups,
                       x, yj, args.rows, args.k, row0, lane);
}

kernel void embed_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* token [[buffer(4)]],
    device float* out [[buffer(5)]],
    uint2 gid [[thread_position_in_grid]])
{
    // grid.y is the row (a prefill token): its id is token[row], its
    // output row follows the previous row's.
    const uint c = gid.x;
    if (int(c) >= args.k) {
        return;
    }
    out += ulong(gid.y) * ulong(args.k);
    const uint id = token[gid.y];
    if (id >= uint(args.rows)) {
        out[c] = NAN;
        return;
    }
    const ulong word = ulong(id) * ulong(args.k / 8) + c / 8;
    const ulong g = ulong(id) * ulong(args.k / QMV_GROUP_SIZE) + c / QMV_GROUP_SIZE;
    const float q = float((codes[word] >> (4 * (c % 8))) & 0xfu);
    out[c] = float(scales[g]) * q + float(biases[g]);
}
