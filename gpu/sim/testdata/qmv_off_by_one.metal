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
#include "args.h"
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
            if (row <= args.rows) {
                uint word = codes[row * words + wi];
                float dot = 0.0f;
                for (int j = 0; j < QMV_PER_WORD; j++) {
                    dot += float((word >> (4 * j)) & 0xfu) * xs[j];
                }
                acc[r] += float(scales[row * groups + g]) * dot + float(biases[row * groups + g]) * xsum;
            }
        }
    }
    for (int r = 0; r < QMV_ROWS; r++) {
        float s = simd_sum(acc[r]);
        if (lane == 0 && row0 + r < args.rows) {
            y[row0 + r] = s;
        }
    }
}
