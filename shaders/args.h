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
// threadgroup. The host sizes the grid with the same numbers (dense.go).
#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
// MLX affine quantization: codes packed 32/bits per uint32, lowest bits
// first, one bf16 scale and bias per QMV_GROUP_SIZE inputs of a row.
#define QMV_GROUP_SIZE 64
// Words of a row each lane loads per step (one uint2); a lane's values
// never straddle a quantization group.
#define QMV_WORDS_PER_LANE 2

struct QMVArgs {
    int32_t rows;           // output rows (per expert); embed: rows of the table
    int32_t k;              // inputs per row; a multiple of QMV_GROUP_SIZE
    int32_t x_stride;       // qmv_experts: floats between the slots' inputs (0: shared)
    int32_t experts;        // qmv_experts: expert ids below this are valid
};

// ---- argmax.metal
#define ARGMAX_MAX_SIMDGROUPS 32
// Loads each thread issues before comparing them.
#define ARGMAX_UNROLL 4

struct ArgmaxArgs {
    int32_t n;              // number of values
    int32_t out_index;      // element of the output written (a token slot)
    int32_t _pad[2];
};

// ---- moe.metal
// router_topk_f32 keeps MOE_MAX_EXPERTS/32 logits per lane of one simd-group
// and the k choices one per lane.
#define MOE_MAX_EXPERTS 512
#define MOE_MAX_TOPK 16

struct MoEArgs {
    int32_t n;              // experts (router), elements (silu_mul), hidden size (combine)
    int32_t k;              // experts chosen per token
    int32_t normalize;      // router: 1 to renormalise the k weights to sum 1
    int32_t _pad;
};

#endif
