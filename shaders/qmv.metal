// qmv.metal: MLX-affine quantized matrix times vector (4- and 8-bit), its
// forms for several matrices on one input and for SwiGLU pairs, its gathered
// forms for the routed experts, and the quantized embedding gather.
//
//   qmv:         y[r]    = sum_c (scale[r][c/64] * q[r][c] + bias[r][c/64]) * x[c]
//   qmv_multi:   y_i[r]  = the same for up to QMV_MULTI_MAX matrices i of one
//                          width that read one x
//   qmv_swiglu:  y[r]    = silu(gate[r] · x) * (up[r] · x), silu(g) = g / (1 + e^-g)
//   qmv_experts_swiglu: y[j][r] = qmv_swiglu with expert ids[j]'s gate and up
//                          and one shared x
//   qmv_experts_swiglu_routed (a _norm form only): the same with ids[j] the router's j-th choice
//                          from the router logits (router.h), which every
//                          simd-group computes for itself; the first one also
//                          writes ids and the weights for the kernels after
//   embed:       out[c]  = scale[id][c/64] * q[id][c] + bias[id][c/64], id = token[0]
//   qmv_add:     y[r]   += the qmv (the residual add after a mixer's output
//                          projection, folded into it)
//   *_norm:      the qmv_multi, qmv_swiglu and routed forms reading x as
//                          RMSNorm(x) * w (the norm before them folded in)
//   moe_down_combine: x[r] += sum_j weights[j] * (down[ids[j]] · h_j)[r]
//                          + sigmoid(sg[0]) * (shared_down · sh)[r]
//                          (the experts' down projections, the shared
//                          expert's and the MoE combine in one dispatch)
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
// A folded norm costs each simd-group one pass over x for its scale
// (qmv_norm_scale, in rmsnorm_f32's summation order, so the normalised
// values equal rmsnorm_f32's bit for bit) and a read of w beside each x
// load. moe_down_combine's simd-groups compute their rows of every chosen
// expert and of the shared expert and combine them in moe_combine's order;
// each output row is read and written by one lane only, so x is updated in
// place without a race.
// embed runs one thread per element of the row, grid.y rows (a prefill
// chunk's tokens: row r reads token[r] and writes out + r*k).
// Threadgroup memory: none.
// CPU reference: engine/cpu matrix.mulQuant (dot4/dot8; dequantize in fp32,
// fp32 accumulation, scale*dot + bias*sum(x) per group) and matrix.row;
// silu as engine/cpu's; rmsNorm and the MoE combine as rmsnorm.metal's.
#include <metal_stdlib>
#include "args.h"
#include "router.h"
using namespace metal;

// qmv_norm is a norm folded into a product: x is read as
// x * scale * (offset + w). Products without one ignore it.
struct qmv_norm {
    device const float* w;
    float scale;
    float offset;
};

// qmv_norm_of is the norm with gains w of the args.n values of x. Its
// scale rsqrt(mean(x^2) + eps) sums the squares as rmsnorm_f32 does with
// args.threads threads (each thread's elements in order, simd_sum per
// simd-group, then the simd-groups' sums in order), so the normalised
// values are rmsnorm_f32's bit for bit. Every lane of the simd-group must
// call it.
METAL_FUNC qmv_norm qmv_norm_of(constant RMSNormArgs& args, device const float* x, device const float* w, uint lane)
{
    float total = 0.0f;
    for (int s = 0; s < args.threads / 32; s++) {
        float ss = 0.0f;
        for (int i = s * 32 + int(lane); i < args.n; i += args.threads) {
            const float v = x[i];
            ss += v * v;
        }
        total += simd_sum(ss);
    }
    qmv_norm nm;
    nm.w = w;
    nm.scale = rsqrt(total / float(args.n) + args.eps);
    nm.offset = args.weight_offset;
    return nm;
}

// qmv_load_x fills xs with the values of x from column c that a lane uses
// in one step (normalised with NORM), prescaled so that codes can be
// masked in place, and returns their plain sum (the factor of the bias
// term).
template <int BITS, bool NORM>
METAL_FUNC float qmv_load_x(device const float* x, qmv_norm nm, int c, thread float* xs)
{
    constexpr int per_word = 32 / BITS;
    constexpr int values = QMV_WORDS_PER_LANE * per_word;
    float xsum = 0.0f;
    for (int i = 0; i < values; i += 4) {
        float4 v = *(device const float4*)(x + c + i);
        if (NORM) {
            // rmsnorm_f32's expression, element by element.
            v.x = v.x * nm.scale * (nm.offset + nm.w[c + i]);
            v.y = v.y * nm.scale * (nm.offset + nm.w[c + i + 1]);
            v.z = v.z * nm.scale * (nm.offset + nm.w[c + i + 2]);
            v.w = v.w * nm.scale * (nm.offset + nm.w[c + i + 3]);
        }
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

// qmv_dots computes rows row0 .. row0+QMV_ROWS-1 of one matrix into dot,
// in every lane (rows past rows repeat the last one); every lane of the
// simd-group must call it.
template <int BITS, bool NORM>
METAL_FUNC void qmv_dots(
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x, qmv_norm nm,
    int rows, int k, int row0, uint lane, thread float* dot)
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
        const float xsum = qmv_load_x<BITS, NORM>(x, nm, c, xs);
        for (int r = 0; r < QMV_ROWS; r++) {
            acc[r] += qmv_row_step<BITS>(codes, scales, biases, row[r], k, c, xs, xsum);
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        dot[r] = simd_sum(acc[r]);
    }
}

// qmv_rows computes rows row0 .. row0+QMV_ROWS-1 (those below rows) of one
// matrix into y (adding them to y with ADD); every lane of the simd-group
// must call it.
template <int BITS, bool NORM, bool ADD>
METAL_FUNC void qmv_rows(
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x, qmv_norm nm,
    device float* y,
    int rows, int k, int row0, uint lane)
{
    float dot[QMV_ROWS];
    qmv_dots<BITS, NORM>(codes, scales, biases, x, nm, rows, k, row0, lane, dot);
    for (int r = 0; r < QMV_ROWS; r++) {
        if (lane == 0 && row0 + r < rows) {
            y[row0 + r] = ADD ? y[row0 + r] + dot[r] : dot[r];
        }
    }
}

// qmv_swiglu_rows is qmv_rows for two matrices of one shape at once,
// writing silu(gate row · x) * (up row · x); x is loaded once for both.
template <int BITS, bool NORM>
METAL_FUNC void qmv_swiglu_rows(
    device const uint* gcodes,
    device const bfloat* gscales,
    device const bfloat* gbiases,
    device const uint* ucodes,
    device const bfloat* uscales,
    device const bfloat* ubiases,
    device const float* x, qmv_norm nm,
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
        const float xsum = qmv_load_x<BITS, NORM>(x, nm, c, xs);
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

// qmv_no_norm is the qmv_norm of the products that read x as it is.
METAL_FUNC qmv_norm qmv_no_norm()
{
    qmv_norm nm;
    nm.w = nullptr;
    nm.scale = 1.0f;
    nm.offset = 0.0f;
    return nm;
}

template <int BITS, bool ADD>
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
    qmv_rows<BITS, false, ADD>(codes, scales, biases, x, qmv_no_norm(), y, args.rows, args.k, row0, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
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
    qmv<4, false>(args, codes, scales, biases, x, y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
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
    qmv<8, false>(args, codes, scales, biases, x, y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_add_bf16_gs64_b4(
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
    qmv<4, true>(args, codes, scales, biases, x, y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_add_bf16_gs64_b8(
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
    qmv<8, true>(args, codes, scales, biases, x, y, group, sg, lane);
}

// qmv_multi finds the matrix whose block the simd-group computes (the same
// for all its lanes) and computes it.
template <int BITS, bool NORM>
METAL_FUNC void qmv_multi(
    constant QMVMultiArgs& args,
    device const float* x, qmv_norm nm,
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
    qmv_rows<BITS, NORM, false>(codes, scales, biases, x, nm, y, args.rows[m], args.k, row0, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
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
    qmv_multi<4, false>(args, x, qmv_no_norm(), c0, c1, c2, c3, s0, s1, s2, s3, b0, b1, b2, b3, y0, y1, y2, y3, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_multi_norm_bf16_gs64_b4(
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
    constant RMSNormArgs& norm [[buffer(18)]],
    device const float* w [[buffer(19)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const qmv_norm nm = qmv_norm_of(norm, x, w, lane);
    qmv_multi<4, true>(args, x, nm, c0, c1, c2, c3, s0, s1, s2, s3, b0, b1, b2, b3, y0, y1, y2, y3, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
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
    qmv_multi<8, false>(args, x, qmv_no_norm(), c0, c1, c2, c3, s0, s1, s2, s3, b0, b1, b2, b3, y0, y1, y2, y3, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_multi_norm_bf16_gs64_b8(
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
    constant RMSNormArgs& norm [[buffer(18)]],
    device const float* w [[buffer(19)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const qmv_norm nm = qmv_norm_of(norm, x, w, lane);
    qmv_multi<8, true>(args, x, nm, c0, c1, c2, c3, s0, s1, s2, s3, b0, b1, b2, b3, y0, y1, y2, y3, group, sg, lane);
}

template <bool NORM>
METAL_FUNC void qmv_swiglu(
    constant QMVArgs& args,
    device const uint* gcodes, device const bfloat* gscales, device const bfloat* gbiases,
    device const uint* ucodes, device const bfloat* uscales, device const bfloat* ubiases,
    device const float* x, qmv_norm nm, device float* y,
    uint group, uint sg, uint lane)
{
    const int row0 = (int(group) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    qmv_swiglu_rows<4, NORM>(gcodes, gscales, gbiases, ucodes, uscales, ubiases, x, nm, y, args.rows, args.k, row0, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
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
    qmv_swiglu<false>(args, gcodes, gscales, gbiases, ucodes, uscales, ubiases, x, qmv_no_norm(), y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_swiglu_norm_bf16_gs64_b4(
    constant QMVArgs& args [[buffer(0)]],
    device const uint* gcodes [[buffer(1)]],
    device const bfloat* gscales [[buffer(2)]],
    device const bfloat* gbiases [[buffer(3)]],
    device const uint* ucodes [[buffer(4)]],
    device const bfloat* uscales [[buffer(5)]],
    device const bfloat* ubiases [[buffer(6)]],
    device const float* x [[buffer(7)]],
    device float* y [[buffer(8)]],
    constant RMSNormArgs& norm [[buffer(9)]],
    device const float* w [[buffer(10)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const qmv_norm nm = qmv_norm_of(norm, x, w, lane);
    qmv_swiglu<true>(args, gcodes, gscales, gbiases, ucodes, uscales, ubiases, x, nm, y, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
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
    qmv_swiglu_rows<4, false>(gcodes + words, gscales + groups, gbiases + groups,
                              ucodes + words, uscales + groups, ubiases + groups,
                              x, qmv_no_norm(), yj, args.rows, args.k, row0, lane);
}

METAL_FUNC void qmv_experts_swiglu_routed(
    constant QMVArgs& args,
    device const uint* gcodes, device const bfloat* gscales, device const bfloat* gbiases,
    device const uint* ucodes, device const bfloat* uscales, device const bfloat* ubiases,
    device const float* x, qmv_norm nm, device float* y, device uint* ids,
    constant MoEArgs& route, device const float* logits, device float* weights,
    uint2 group, uint sg, uint lane)
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
    qmv_swiglu_rows<4, true>(gcodes + words, gscales + groups, gbiases + groups,
                             ucodes + words, uscales + groups, ubiases + groups,
                             x, nm, yj, args.rows, args.k, row0, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void qmv_experts_swiglu_routed_norm_bf16_gs64_b4(
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
    constant RMSNormArgs& norm [[buffer(13)]],
    device const float* w [[buffer(14)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const qmv_norm nm = qmv_norm_of(norm, x, w, lane);
    qmv_experts_swiglu_routed(args, gcodes, gscales, gbiases, ucodes, uscales, ubiases, x, nm, y, ids,
                              route, logits, weights, group, sg, lane);
}

[[max_total_threads_per_threadgroup(QMV_THREADS)]]
kernel void moe_down_combine_bf16_gs64_b4(
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
    device float* x [[buffer(12)]],
    uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]])
{
    const int row0 = (int(group) * QMV_SIMDGROUPS + int(sg)) * QMV_ROWS;
    if (row0 >= args.rows) {
        return;
    }
    const ulong expert_words = ulong(args.rows) * ulong(args.k / 8);
    const ulong expert_groups = ulong(args.rows) * ulong(args.k / QMV_GROUP_SIZE);
    float acc[QMV_ROWS];
    for (int r = 0; r < QMV_ROWS; r++) {
        acc[r] = 0.0f;
    }
    for (int j = 0; j < args.top_k; j++) {
        const uint e = ids[j]; // one id for the whole simd-group
        float y[QMV_ROWS];
        if (e >= uint(args.experts)) {
            for (int r = 0; r < QMV_ROWS; r++) {
                y[r] = NAN;
            }
        } else {
            qmv_dots<4, false>(codes + e * expert_words, scales + e * expert_groups, biases + e * expert_groups,
                               h + ulong(j) * ulong(args.k), qmv_no_norm(), args.rows, args.k, row0, lane, y);
        }
        for (int r = 0; r < QMV_ROWS; r++) {
            acc[r] += weights[j] * y[r];
        }
    }
    float shared[QMV_ROWS];
    qmv_dots<4, false>(scodes, sscales, sbiases, sh, qmv_no_norm(), args.rows, args.shared_k, row0, lane, shared);
    // moe_combine_add_rmsnorm_f32's expression, row by row.
    const float g = 1.0f / (1.0f + exp(-shared_gate[0]));
    for (int r = 0; r < QMV_ROWS; r++) {
        if (lane == 0 && row0 + r < args.rows) {
            x[row0 + r] = x[row0 + r] + (acc[r] + g * shared[r]);
        }
    }
}

[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]]
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
