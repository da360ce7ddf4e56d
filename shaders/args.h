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

// Each kernel dispatched with a fixed threadgroup, or with one no larger
// than a fixed bound, declares it with
// [[max_total_threads_per_threadgroup(N)]], N one of the *_THREADS below,
// so Apple's compiler budgets registers for N threads rather than 1024 and
// the pipeline reports what the host dispatches; the host checks each
// pipeline takes its N when it is built (shaders/threads.go).

// ---- elementwise kernels (embed_bf16_gs64_b4, moe_combine_rows_f32,
// swiglu_f32): threads per threadgroup, one element each.
#define ELEMENTWISE_THREADS 256

// ---- rmsnorm.metal
// Simd-groups per threadgroup are at most 1024/32.
#define RMSNORM_MAX_SIMDGROUPS 32

struct RMSNormArgs {
    int32_t n;              // elements per row
    float eps;              // added to the mean square
    float weight_offset;    // gain = weight_offset + w (1 for zero-centred norms)
    int32_t threads;        // a norm folded into a product (qmv.metal): the
                            // rmsnorm_f32 threadgroup whose summation order it keeps
    uint64_t row_stride;    // elements between rows of x and y
    uint64_t _pad2;
};

// ---- qmv.metal
// One simd-group computes QMV_ROWS rows; QMV_SIMDGROUPS simd-groups share a
// threadgroup. The host sizes the grid with the same numbers (dense.go).
#define QMV_ROWS 4
#define QMV_SIMDGROUPS 2
#define QMV_THREADS (QMV_SIMDGROUPS * 32)
// MLX affine quantization: codes packed 32/bits per uint32, lowest bits
// first, one bf16 scale and bias per QMV_GROUP_SIZE inputs of a row.
#define QMV_GROUP_SIZE 64
// Words of a row each lane loads per step (one uint2); a lane's values
// never straddle a quantization group.
#define QMV_WORDS_PER_LANE 2
// qmv_rows.metal: the most vectors (decode rows) one dispatch multiplies;
// each lane keeps an accumulator per weight row and vector.
#define QMV_ROWS_MAX_TOKENS 8

struct QMVArgs {
    int32_t rows;           // output rows (per expert); embed: rows of the table
    int32_t k;              // inputs per row; a multiple of QMV_GROUP_SIZE
    int32_t experts;        // qmv_experts_swiglu: expert ids below this are valid
    int32_t _pad;
};

// moe_down_combine: the routed experts' down projections and the shared
// expert's, combined and added to the residual stream.
struct MoEDownArgs {
    int32_t rows;           // hidden size: output rows of every matrix
    int32_t k;              // inputs per row of a routed expert (its intermediate size)
    int32_t experts;        // expert ids below this are valid
    int32_t top_k;          // routed experts combined
    int32_t shared_k;       // inputs per row of the shared expert's down projection
    int32_t _pad[3];
};

// qmv_multi: up to QMV_MULTI_MAX matrices of one width and bit width that
// read the same x. The grid's simd-groups index the matrices' blocks of
// QMV_ROWS rows laid end to end: matrix i owns blocks
// block_end[i-1] .. block_end[i]-1 (block_end[-1] = 0).
#define QMV_MULTI_MAX 4

struct QMVMultiArgs {
    int32_t k;              // inputs per row of every matrix
    int32_t matrices;       // 1..QMV_MULTI_MAX
    int32_t _pad[2];
    int32_t rows[QMV_MULTI_MAX];      // each matrix's output rows
    int32_t block_end[QMV_MULTI_MAX]; // blocks of matrices 0..i together
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
// router_topk_f32 is one simd-group.
#define ROUTER_THREADS 32

struct MoEArgs {
    int32_t n;              // experts
    int32_t k;              // experts chosen per token
    int32_t normalize;      // 1 to renormalise the k weights to sum 1
    int32_t _pad;
};

// ---- attention.metal
// attn_decode_f16kv splits a context into blocks of ATTN_BLOCK positions,
// and while there are few of them each block into parts (a threadgroup
// each, then attn_merge_f32): up to ATTN_MAX_SPLIT parts of a block, so
// that a context's parts number about ATTN_SPLIT_PARTS.
#define ATTN_BLOCK 256
#define ATTN_MAX_SPLIT 16
#define ATTN_SPLIT_PARTS 128
// attn_decode_f16kv runs ATTN_SIMDGROUPS simd-groups (at most; a grid of
// head columns by position stripes), each holding ATTN_HEADS_PER_SIMDGROUP
// query heads of the GQA group in registers.
#define ATTN_SIMDGROUPS 8
#define ATTN_HEADS_PER_SIMDGROUP 2
#define ATTN_DECODE_THREADS (ATTN_SIMDGROUPS * 32)
// Register arrays hold ATTN_MAX_HEAD_DIM/32 dims per lane; a GQA group
// fills at most ATTN_SIMDGROUPS head columns.
#define ATTN_MAX_HEAD_DIM 256
#define ATTN_MAX_GROUP 16
// attn_prep_f16kv runs at most this many threads per head.
#define ATTN_PREP_MAX_THREADS 256
// Function constants: FC_ATTN + 0 = head_dim, FC_ATTN + 1 = GQA group.
#define FC_ATTN 600

struct AttnPrepArgs {
    int32_t heads;          // query heads
    int32_t kv_heads;
    int32_t head_dim;
    int32_t rotary_dim;     // leading dims of each head that RoPE rotates (even)
    int32_t pos;            // the token's position: RoPE angle and cache row
    float eps;              // of the q/k RMSNorms
    int32_t _pad[2];
    float inv_freq[ATTN_MAX_HEAD_DIM / 2]; // theta^(-2j/rotary_dim), rounded to fp32 by the host
};

struct AttnDecodeArgs {
    int32_t n;              // positions attended: 0..n-1
    int32_t parts;          // threadgroups per KV head (grid.y), partials per query head
    int32_t heads;          // query heads
    int32_t kv_heads;
    float scale;            // 1/sqrt(head_dim), rounded to fp32 by the host
    int32_t part_len;       // positions per part (ATTN_BLOCK / its split)
    int32_t _pad[2];
};

// ---- deltanet.metal
#define DELTA_CONV_THREADS 256
// delta_step_conv_f32: a thread holds this many key rows of one state column.
#define DELTA_ROWS_PER_THREAD 32
// delta_step_conv_f32 runs value_dim * key_dim/DELTA_ROWS_PER_THREAD threads,
// at most this many (the model's 128 * 128/32); each holds
// DELTA_ROWS_PER_THREAD floats of state in registers, which the compiler
// can grant 512 threads more readily than 1024.
#define DELTA_STEP_MAX_THREADS 512
#define DELTA_MAX_SIMDGROUPS 32
// Function constants: FC_DELTA + 0 = key head dim.
#define FC_DELTA 700

struct DeltaConvArgs {
    int32_t channels;
    int32_t taps;           // conv kernel size; the state keeps taps-1 inputs per channel
    int32_t _pad[2];
};

struct DeltaStepArgs {
    int32_t key_heads;
    int32_t value_heads;    // a multiple of key_heads
    int32_t value_dim;
    float q_scale;          // 1/sqrt(key_dim), rounded to fp32 by the host
    float eps;              // of the gated output RMSNorm
    int32_t taps;           // delta_step_conv_f32: the conv kernel size
    int32_t _pad[2];
};

// ---- qmm.metal
// A threadgroup computes a QMM_BM x QMM_BN tile of y (token rows by output
// columns) with QMM_SIMDGROUPS simd-groups of 8x8 simdgroup matrices; the
// K loop steps one quantization group (QMM_BK) at a time.
#define QMM_BM 32
#define QMM_BM_SMALL 8      // the _small kernels' token tile, for passes of a few tokens
#define QMM_BN 64
#define QMM_BK 64
#define QMM_SIMDGROUPS 4
#define QMM_THREADS (QMM_SIMDGROUPS * 32)

struct QMMArgs {
    int32_t rows;           // output columns: weight rows (per expert)
    int32_t k;              // inputs per row; a multiple of QMM_BK
    int32_t tokens;         // qmm, qmv_rows: rows of x and y
    int32_t x_div;          // qmm_experts: x row = map[slot] / x_div; 0: x row = slot;
                            // qmv_rows_experts_swiglu: x row = pair / x_div
    int32_t experts;        // qmm_experts: expert ids below this are valid
    int32_t _pad[3];
};

// ---- moe_grouped.metal
// moe_route_f32 runs one threadgroup of at most MOE_MAX_EXPERTS threads.
struct MoERouteArgs {
    int32_t experts;        // router experts; ids at or past it are dropped
    int32_t pairs;          // (token, choice) pairs: tokens * k
    int32_t capacity;       // block-map entries; the rest after the last block are sentinels
    int32_t _pad;
};

// ---- deltanet_chunk.metal
// delta_conv_rows_f32 keeps a channel's history in registers: at most this
// many taps.
#define DELTA_MAX_TAPS 8
// The chunked (WY) recurrence: tokens per block; key columns delta_chunk_prep
// stages at a time; its threads; the largest key dim delta_chunk_scan keeps
// in simdgroup matrices; and its simd-groups per threadgroup at most (each
// owns 8 value columns of a head's state).
#define DELTA_CHUNK 64
#define DELTA_CHUNK_STAGE 32
#define DELTA_CHUNK_PREP_THREADS 256
#define DELTA_CHUNK_MAX_KEY_DIM 128
#define DELTA_CHUNK_SCAN_SIMDGROUPS 4
#define DELTA_CHUNK_SCAN_THREADS (DELTA_CHUNK_SCAN_SIMDGROUPS * 32)

struct DeltaChunkArgs {
    int32_t channels;
    int32_t taps;           // conv kernel size; the state keeps taps-1 inputs per channel
    int32_t tokens;         // rows of the chunk, in order
    int32_t _pad;
};

struct DeltaScanArgs {
    int32_t key_heads;
    int32_t value_heads;    // a multiple of key_heads
    int32_t value_dim;
    float q_scale;          // 1/sqrt(key_dim), rounded to fp32 by the host
    float eps;              // of the gated output RMSNorm
    int32_t tokens;         // rows of the chunk, in order
    int32_t blocks;         // ceil(tokens / DELTA_CHUNK)
    int32_t _pad;
};

// ---- attention_prefill.metal
// Tokens of a chunk one attn_prefill_f16kv simd-group attends together, and
// the most such blocks one threadgroup takes.
#define ATTN_PREFILL_TOKENS 8
#define ATTN_PREFILL_BLOCKS 4
// Floats of threadgroup scratch per attn_prefill_f16kv simd-group: an 8x8
// matrix and three per-row values (max, sum, correction).
#define ATTN_PREFILL_SCRATCH 88
struct AttnPrefillArgs {
    int32_t tokens;         // query rows of the chunk
    int32_t pos0;           // positions cached before the chunk: row t attends 0 .. pos0+t
    int32_t heads;          // query heads
    int32_t kv_heads;
    float scale;            // 1/sqrt(head_dim), rounded to fp32 by the host
    int32_t _pad[3];
};

// ---- sample.metal
// sample_f32 runs one threadgroup of at most SAMPLE_MAX_THREADS threads.
// Each thread, then each simd-group, then the threadgroup keeps its
// SAMPLE_LIST best candidates: top-k up to that many, top_logprobs and any
// nucleus that fits are drawn from them without another pass. Threshold
// searches take SAMPLE_RADIX_BITS of a key per pass.
#define SAMPLE_MAX_THREADS 1024
#define SAMPLE_MAX_SIMDGROUPS 32
#define SAMPLE_LIST 32
#define SAMPLE_MAX_TOP_LOGPROBS 20
#define SAMPLE_RADIX_BITS 4
#define SAMPLE_NO_TOKEN 0xffffffffu
// The most logit_bias entries a request holds (OpenAI's bound,
// engine/sample.MaxLogitBiasTokens).
#define SAMPLE_MAX_BIAS 300
// What sample_f32 and argmax_f32 write instead of an id when a logit they
// may pick is NaN or the largest is +Inf: the model's output is broken
// (engine/sample.ErrBadLogits), which the host says with the token.
#define SAMPLE_BAD_LOGITS 0xfffffffeu

struct SampleArgs {
    int32_t n;              // logits (the vocabulary)
    int32_t top_logprobs;   // -1: write no record; else 0..SAMPLE_MAX_TOP_LOGPROBS alternatives
    int32_t _pad[2];
};

// The per-request block at the start of the sampler's state buffer; the
// host writes it before the first step, the kernel advances counter.
struct SampleHeader {
    float inv_temperature;  // 1/temperature rounded from float64; 0: greedy
    float top_p;            // (0, 1]; 1: off
    float min_p;            // [0, 1]; 0: off
    float presence;         // generated ids: logit -= presence + frequency * count
    float frequency;
    float repetition;       // prompt and generated ids: logit / r if > 0, else * r
    int32_t top_k;          // 0: no limit; 1: greedy
    uint32_t seed_lo;       // the Philox key
    uint32_t seed_hi;
    uint32_t counter;       // tokens picked so far: the Philox counter of the next draw
    uint32_t penalized;     // nonzero: apply penalties and count picked ids
    uint32_t biased;        // logit_bias entries, 0..SAMPLE_MAX_BIAS: ids ascending after the counts
    uint32_t _pad[4];
};

// What sample_f32 writes with top_logprobs >= 0: the picked id's log
// probability and the best ids' (log-softmax of the penalised logits).
struct SampleRecord {
    uint32_t id;
    float logprob;
    uint32_t top;           // alternatives written; the rest are SAMPLE_NO_TOKEN, -inf
    uint32_t _pad;
    uint32_t top_ids[SAMPLE_MAX_TOP_LOGPROBS];
    float top_logprobs[SAMPLE_MAX_TOP_LOGPROBS];
};

#endif
