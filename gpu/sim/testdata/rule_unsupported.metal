// Snapshot of shaders/qmv.metal as of commit 9474c35, with args.h inlined, so
// the sim's hazard tests do not move when the real kernels evolve. The
// mutants beside it differ from it in one place each.
// qmv.metal: 4-bit MLX-affine quantized matrix times vector.
//
//   y[r] = sum_k (scale[r][k/64] * q[r][k] + bias[r][k/64]) * x[k]
//
// Layout: codes is uint32[rows][k/8], element k of row r in bits
// 4*(k%8)..4*(k%8)+3 of word k/8 (low nibble first); scales and biases are
// bfloat[rows][k/64]; x is float[k]; y is float[rows].
// Mapping: QMV_SIMDGROUPS simd-groups per threadgroup, QMV_ROWS rows per
// simd-group; lane l reads words l, l+32, ... of each row (coalesced), keeps
// fp32 partial sums and the simd-group reduces them with simd_sum.
// Threadgroup memory: none.
// CPU reference: the engine's quantized matvec (dequantize in fp32, fp32
// accumulation).
#include <metal_stdlib>
// args.h: the argument structs that host code passes to Petal's kernels at
// [[buffer(0)]] (inline, with setBytes), and the tiling constants both sides
// must agree on.
//
// Conventions (mirrored by the Go structs in args.go, whose layout a test
// checks against this file compiled by the sim):
//   - element counts and indices are int32_t (registers are 32-bit);
//   - byte offsets and strides are uint64_t;
//   - fields are ordered so that no padding is needed, and every struct is
//     a multiple of 16 bytes (explicit _pad fields).
//   - function-constant indices are FC_<OP> + n, each op spaced by 100.

#ifndef PETAL_ARGS_H
#define PETAL_ARGS_H

// ---- rmsnorm.metal
// Simd-groups per threadgroup are at most 1024/32.
#define RMSNORM_MAX_SIMDGROUPS 32

struct RMSNormArgs {
    int32_t n;              // elements per row
    float eps;              // added to the mean square
    float weight_offset;    // gain = weight_offset + w (1 for zero-centred norms)
    int32_t _pad;
    uint64_t row_stride;    // elements between rows of x and y
    uint64_t _pad2;
};

// ---- qmv.metal
// One simd-group computes QMV_ROWS rows; QMV_SIMDGROUPS simd-groups share a
// threadgroup. The host sizes the grid with the same numbers (qmv.go).
#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
// MLX affine quantization: 4-bit codes packed 8 per uint32, low nibble
// first, one bf16 scale and bias per QMV_GROUP_SIZE inputs of a row.
#define QMV_GROUP_SIZE 64
#define QMV_PER_WORD 8

struct QMVArgs {
    int32_t rows;           // output rows
    int32_t k;              // inputs per row; a multiple of QMV_GROUP_SIZE
    int32_t _pad[2];
};

// ---- argmax.metal
#define ARGMAX_MAX_SIMDGROUPS 32

struct ArgmaxArgs {
    int32_t n;              // number of values
    int32_t out_index;      // element of the output written (a token slot)
    int32_t _pad[2];
};

#endif
using namespace metal;

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
    const int words = args.k / QMV_PER_WORD;
    const int groups = args.k / QMV_GROUP_SIZE;
    const int row0 = int(group * QMV_SIMDGROUPS + sg) * QMV_ROWS;

    float acc[QMV_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int wi = int(lane); wi < words; wi += 32) {
        float xs[QMV_PER_WORD];
        float xsum = 0.0f;
        for (int j = 0; j < QMV_PER_WORD; j++) {
            xs[j] = x[wi * QMV_PER_WORD + j];
            xsum += xs[j];
        }
        const int g = wi / (QMV_GROUP_SIZE / QMV_PER_WORD);
        for (int r = 0; r < QMV_ROWS; r++) {
            const int row = row0 + r;
            if (row >= args.rows) {
                goto next;
            }
            {
                uint word = codes[row * words + wi];
                float dot = 0.0f;
                for (int j = 0; j < QMV_PER_WORD; j++) {
                    dot += float((word >> (4 * j)) & 0xfu) * xs[j];
                }
                acc[r] += float(scales[row * groups + g]) * dot + float(biases[row * groups + g]) * xsum;
            }
            next:;
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        float s = simd_sum(acc[r]);
        if (lane == 0 && row0 + r < args.rows) {
            y[row0 + r] = s;
        }
    }
}
