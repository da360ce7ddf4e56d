// qmm.metal: MLX-affine quantized matrix times a block of token rows (the
// prefill GEMM), dense and grouped by expert, with the dequantization fused
// in: weight tiles are expanded only into threadgroup memory.
//
//   qmm:         y[t][r] = sum_c x[t][c] * (scale[r][c/64] * q[r][c] + bias[r][c/64])
//                for t < tokens, r < rows
//   qmm_experts: for each block (e, m0, m_end) of the block map and each
//                slot m in [m0, m_end): y[m][r] = the same with expert e's
//                matrix and the input row map[m] / x_div (x_div 0: row m)
//
// Layout: codes, scales and biases as in qmv.metal (uint[rows][k*BITS/32],
// bfloat[rows][k/64]; experts stacked). x is float[.][k] with 16-byte
// aligned rows; y is float[.][rows]. blocks is uint4[capacity] = (expert,
// m0, m_end, 0); an entry with m_end <= m0 is a sentinel (padding up to a
// capacity the host sized without knowing the routing) and does nothing.
// map is uint[slots].
// Mapping: grid (ceil(rows / QMM_BN), token tiles or block-map entries);
// QMM_SIMDGROUPS simd-groups. Each K step of QMM_BK = one quantization
// group: all threads load the x tile (zeros past the last row) and
// dequantize the weight tile (one scale and bias per row) into threadgroup
// memory, barrier; then simd-group s multiplies the x tile by its
// QMM_BN/QMM_SIMDGROUPS output columns of the weight tile with 8x8
// simdgroup matrices (fp32 accumulators in registers: QMM_BM/8 by
// QMM_BN/QMM_SIMDGROUPS/8 of them), barrier. At the end the accumulators
// pass through threadgroup memory so the tile's edges are masked on the
// way to y (rows coalesced). The weights are read once per token tile,
// never written back expanded. The _small kernels tile QMM_BM_SMALL tokens
// (a pass of a few: see their comment).
// Threadgroup memory: x tile float[QMM_BM][QMM_BK] (8 KiB; 2 KiB small)
// and weight tile float[QMM_BK][QMM_BN] (16 KiB), which then holds the
// output tile float[QMM_BM][QMM_BN].
// CPU reference: engine/cpu matrix.mulQuant per token (dequantized weights,
// fp32 sums; the order of additions differs).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// qmm_tile computes the tile of slots [m0, min(m0 + BM, m_end)) by
// outputs [n0, n0 + QMM_BN) of one matrix (BM is QMM_BM or QMM_BM_SMALL;
// xs holds BM rows). With GATHER, slot m reads x row
// map[m] / x_div (or m when x_div is 0). Every thread of the threadgroup
// must call it.
template <int BITS, bool GATHER, int BM>
METAL_FUNC void qmm_tile(
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x,
    device const uint* map,
    device float* y,
    threadgroup float* xs,
    threadgroup float* ws,
    int rows, int k, int x_div, int m0, int m_end, int n0, uint tid, uint sg)
{
    constexpr int per_word = 32 / BITS;
    constexpr int words_per_group = QMM_BK / per_word;
    constexpr uint mask = (1u << BITS) - 1u;
    constexpr int row_blocks = BM / 8;
    constexpr int col_blocks = QMM_BN / QMM_SIMDGROUPS / 8;
    const int row_words = k / per_word;
    const int groups = k / QMM_BK;
    const int sg_col = int(sg) * (QMM_BN / QMM_SIMDGROUPS);

    simdgroup_float8x8 acc[row_blocks][col_blocks];
    for (int i = 0; i < row_blocks; i++) {
        for (int j = 0; j < col_blocks; j++) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    for (int g = 0; g < groups; g++) {
        const int kb = g * QMM_BK;
        for (int idx = int(tid); idx < BM * (QMM_BK / 4); idx += QMM_THREADS) {
            const int mi = idx / (QMM_BK / 4);
            const int c4 = idx % (QMM_BK / 4);
            const int m = m0 + mi;
            float4 v = float4(0.0f);
            if (m < m_end) {
                ulong xr = ulong(m);
                if (GATHER && x_div > 0) {
                    xr = ulong(map[m] / uint(x_div));
                }
                v = *(device const float4*)(x + xr * ulong(k) + kb + 4 * c4);
            }
            *(threadgroup float4*)(xs + mi * QMM_BK + 4 * c4) = v;
        }
        for (int idx = int(tid); idx < QMM_BN * words_per_group; idx += QMM_THREADS) {
            const int ni = idx / words_per_group;
            const int wi = idx % words_per_group;
            // Rows past the end repeat the last row: in bounds, never stored.
            const ulong r = ulong(min(n0 + ni, rows - 1));
            const uint w = codes[r * ulong(row_words) + ulong(g * words_per_group + wi)];
            const ulong si = r * ulong(groups) + ulong(g);
            const float s = float(scales[si]);
            const float b = float(biases[si]);
            for (int i = 0; i < per_word; i++) {
                ws[(wi * per_word + i) * QMM_BN + ni] = s * float((w >> (BITS * i)) & mask) + b;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int c = 0; c < QMM_BK; c += 8) {
            simdgroup_float8x8 a[row_blocks];
            simdgroup_float8x8 b[col_blocks];
            for (int i = 0; i < row_blocks; i++) {
                simdgroup_load(a[i], xs + (8 * i) * QMM_BK + c, QMM_BK);
            }
            for (int j = 0; j < col_blocks; j++) {
                simdgroup_load(b[j], ws + c * QMM_BN + sg_col + 8 * j, QMM_BN);
            }
            for (int i = 0; i < row_blocks; i++) {
                for (int j = 0; j < col_blocks; j++) {
                    simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // The accumulators go through threadgroup memory (the weight tile's) so
    // the edges of the tile can be masked on the way out.
    for (int i = 0; i < row_blocks; i++) {
        for (int j = 0; j < col_blocks; j++) {
            simdgroup_store(acc[i][j], ws + (8 * i) * QMM_BN + sg_col + 8 * j, QMM_BN);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int idx = int(tid); idx < BM * QMM_BN; idx += QMM_THREADS) {
        const int m = m0 + idx / QMM_BN;
        const int n = n0 + idx % QMM_BN;
        if (m < m_end && n < rows) {
            y[ulong(m) * ulong(rows) + ulong(n)] = ws[idx];
        }
    }
}

template <int BITS, int BM>
METAL_FUNC void qmm(
    constant QMMArgs& args,
    device const uint* codes,
    device const bfloat* scales,
    device const bfloat* biases,
    device const float* x,
    device float* y,
    threadgroup float* xs,
    threadgroup float* ws,
    uint2 group, uint tid, uint sg)
{
    const int m0 = int(group.y) * BM;
    qmm_tile<BITS, false, BM>(codes, scales, biases, x, (device const uint*)codes, y, xs, ws,
                          args.rows, args.k, 0, m0, args.tokens, int(group.x) * QMM_BN, tid, sg);
}

[[max_total_threads_per_threadgroup(QMM_THREADS)]]
kernel void qmm_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float xs[QMM_BK * QMM_BM];
    threadgroup float ws[QMM_BK * QMM_BN];
    qmm<4, QMM_BM>(args, codes, scales, biases, x, y, xs, ws, group, tid, sg);
}

[[max_total_threads_per_threadgroup(QMM_THREADS)]]
kernel void qmm_bf16_gs64_b8(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float xs[QMM_BK * QMM_BM];
    threadgroup float ws[QMM_BK * QMM_BN];
    qmm<8, QMM_BM>(args, codes, scales, biases, x, y, xs, ws, group, tid, sg);
}

[[max_total_threads_per_threadgroup(QMM_THREADS)]]
kernel void qmm_experts_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    device const uint4* blocks [[buffer(6)]],
    device const uint* map [[buffer(7)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float xs[QMM_BK * QMM_BM];
    threadgroup float ws[QMM_BK * QMM_BN];
    const uint4 blk = blocks[group.y];
    if (blk.z <= blk.y || blk.x >= uint(args.experts)) {
        return; // the whole threadgroup: a sentinel, or an id no expert has
    }
    const ulong expert_words = ulong(args.rows) * ulong(args.k / 8);
    const ulong expert_groups = ulong(args.rows) * ulong(args.k / QMM_BK);
    qmm_tile<4, true, QMM_BM>(codes + blk.x * expert_words, scales + blk.x * expert_groups,
                      biases + blk.x * expert_groups, x, map, y, xs, ws,
                      args.rows, args.k, args.x_div, int(blk.y), int(blk.z), int(group.x) * QMM_BN, tid, sg);
}

// The small-tile forms, for passes of a few tokens (batched decode rows):
// a QMM_BM_SMALL-row tile does a quarter of QMM_BM's simdgroup products,
// which a tile of a few live rows would spend on zeros. qmm_experts_small
// walks its block in QMM_BM_SMALL-slot tiles (one for the one or two slots
// an expert takes of a few tokens' pairs).

[[max_total_threads_per_threadgroup(QMM_THREADS)]]
kernel void qmm_small_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float xs[QMM_BK * QMM_BM_SMALL];
    threadgroup float ws[QMM_BK * QMM_BN];
    qmm<4, QMM_BM_SMALL>(args, codes, scales, biases, x, y, xs, ws, group, tid, sg);
}

[[max_total_threads_per_threadgroup(QMM_THREADS)]]
kernel void qmm_small_bf16_gs64_b8(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float xs[QMM_BK * QMM_BM_SMALL];
    threadgroup float ws[QMM_BK * QMM_BN];
    qmm<8, QMM_BM_SMALL>(args, codes, scales, biases, x, y, xs, ws, group, tid, sg);
}

[[max_total_threads_per_threadgroup(QMM_THREADS)]]
kernel void qmm_experts_small_bf16_gs64_b4(
    constant QMMArgs& args [[buffer(0)]],
    device const uint* codes [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const float* x [[buffer(4)]],
    device float* y [[buffer(5)]],
    device const uint4* blocks [[buffer(6)]],
    device const uint* map [[buffer(7)]],
    uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float xs[QMM_BK * QMM_BM_SMALL];
    threadgroup float ws[QMM_BK * QMM_BN];
    const uint4 blk = blocks[group.y];
    if (blk.z <= blk.y || blk.x >= uint(args.experts)) {
        return; // the whole threadgroup: a sentinel, or an id no expert has
    }
    const ulong expert_words = ulong(args.rows) * ulong(args.k / 8);
    const ulong expert_groups = ulong(args.rows) * ulong(args.k / QMM_BK);
    for (int m0 = int(blk.y); m0 < int(blk.z); m0 += QMM_BM_SMALL) {
        qmm_tile<4, true, QMM_BM_SMALL>(codes + blk.x * expert_words, scales + blk.x * expert_groups,
                                        biases + blk.x * expert_groups, x, map, y, xs, ws,
                                        args.rows, args.k, args.x_div, m0, int(blk.z), int(group.x) * QMM_BN, tid, sg);
        // The tile's output left through ws, which the next one refills.
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}
