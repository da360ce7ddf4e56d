// Snapshot of shaders/deltanet.metal as of issue 27's fix (threadgroup
// storage at kernel scope), with args.h inlined, so the sim's rule tests do
// not move when the real kernels evolve. The mutants beside it differ from
// it in one place each.
// deltanet.metal: one decode token of a Gated DeltaNet mixer.
//
//   delta_step_conv_f32: the conv, qkv[c] = silu(sum_{j<K-1} w[c][j] *
//                   state[c][j] + w[c][K-1] * u[c]) (the conv state left as
//                   it was), then per value head h (key head h /
//                   (value_heads/key_heads)):
//                   q = l2norm(q) / sqrt(KEY_DIM), k = l2norm(k),
//                   beta = sigmoid(b[h]), alpha = exp(neg_a[h] * softplus(a[h] + dt_bias[h])),
//                   S = alpha S; kv = S^T k; S += k (x) beta (v - kv); o = S^T q;
//                   out = RMSNorm(o) * norm * silu(z)
//   delta_conv_shift_f32: the conv state update: state[c] shifts left and
//                   takes u[c] last
//
// The conv folded into the step saves the decode step a level: the step's
// threadgroups read the conv state (a key head's q and k channels are
// read by every value head sharing it), so none of them may write it; the
// shift runs in the next level, beside the output projection.
// Layout: u: float[C]; state (conv): float[C][K-1], oldest first;
// w: float[C][K]. qkv (the conv's output): float[C] = [q: key_heads][KEY_DIM] | [k: key_heads][KEY_DIM]
// | [v: value_heads][value_dim]; z and out: float[value_heads][value_dim];
// b, a, neg_a (= -exp(A_log)), dt_bias: float[value_heads]; norm:
// float[value_dim]; state (recurrent): float[value_heads][KEY_DIM][value_dim],
// row = key dim, column = value dim; it stays fp32 in device memory.
//
// Mapping:
//   delta_conv_shift_f32: one thread per channel, DELTA_CONV_THREADS per
//   threadgroup.
//   delta_step_conv_f32: one threadgroup per value head; thread (r, j), tid =
//   r * value_dim + j, owns column j of S over the key rows r*rows ..
//   (r+1)*rows - 1, rows = min(KEY_DIM, DELTA_ROWS_PER_THREAD), in registers:
//   the state is read once and written once, a row by consecutive threads
//   (coalesced). kv_j and o_j are sums over the KEY_DIM / rows row slices of
//   column j, exchanged through threadgroup memory; the l2 norms and the
//   output RMSNorm reduce with simd_sum and one float per simd-group.
//   Splitting the rows keeps a thread's state to 32 registers and gives the
//   GPU value_heads * value_dim * KEY_DIM/32 threads (16K for the model).
//   The conv of a v channel is computed by each of its column's row
//   slices (four taps: cheaper than sharing it).
//
// Threadgroup memory: delta_step_conv_f32, the head's q and k (2 * KEY_DIM floats)
// and the kv and o slices (2 * KEY_DIM/rows * value_dim floats), plus three
// floats per simd-group for the reductions.
//
// CPU reference: engine/cpu/deltanet.go (conv, l2norm, the recurrence, the
// gated RMSNorm) and softplus in engine/cpu/model.go, fp32 throughout.
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
// MLX affine quantization: codes packed 32/bits per uint32, lowest bits
// first, one bf16 scale and bias per QMV_GROUP_SIZE inputs of a row.
#define QMV_GROUP_SIZE 64
// Words of a row each lane loads per step (one uint2); a lane's values
// never straddle a quantization group.
#define QMV_WORDS_PER_LANE 2

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

struct MoEArgs {
    int32_t n;              // experts
    int32_t k;              // experts chosen per token
    int32_t normalize;      // 1 to renormalise the k weights to sum 1
    int32_t _pad;
};

// ---- attention.metal
// Positions per threadgroup of attn_decode_f16kv; more than one block takes
// the split route (partials, then attn_merge_f32).
#define ATTN_BLOCK 256
// attn_decode_f16kv runs ATTN_SIMDGROUPS simd-groups (at most; a grid of
// head columns by position stripes), each holding ATTN_HEADS_PER_SIMDGROUP
// query heads of the GQA group in registers.
#define ATTN_SIMDGROUPS 8
#define ATTN_HEADS_PER_SIMDGROUP 2
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
    int32_t blocks;         // ceil(n / ATTN_BLOCK); 1: attn_decode_f16kv writes o
    int32_t heads;          // query heads
    int32_t kv_heads;
    float scale;            // 1/sqrt(head_dim), rounded to fp32 by the host
    int32_t _pad[3];
};

// ---- deltanet.metal
#define DELTA_CONV_THREADS 256
// delta_step_conv_f32: a thread holds this many key rows of one state column.
#define DELTA_ROWS_PER_THREAD 32
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
#define QMM_BN 64
#define QMM_BK 64
#define QMM_SIMDGROUPS 4
#define QMM_THREADS (QMM_SIMDGROUPS * 32)

struct QMMArgs {
    int32_t rows;           // output columns: weight rows (per expert)
    int32_t k;              // inputs per row; a multiple of QMM_BK
    int32_t tokens;         // qmm: rows of x and y
    int32_t x_div;          // qmm_experts: x row = map[slot] / x_div; 0: x row = slot
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
    uint32_t _pad[5];
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
using namespace metal;

constant int KEY_DIM [[function_constant(FC_DELTA + 0)]];

// Added to the sum of squares inside the l2 norms' square root.
constant float DELTA_L2_EPS = 1e-6f;
// softplus(x) is x above this, as torch computes it.
constant float DELTA_SOFTPLUS_THRESHOLD = 20.0f;

// delta_conv_out is the conv's output for channel c, from the state
// before this token.
METAL_FUNC float delta_conv_out(device const float* u, device const float* state, device const float* w, int taps, int c)
{
    device const float* hist = state + ulong(c) * (taps - 1);
    device const float* wc = w + ulong(c) * taps;
    const float cur = u[c];
    float acc = wc[taps - 1] * cur;
    for (int j = 0; j < taps - 1; j++) {
        acc += wc[j] * hist[j];
    }
    return acc / (1.0f + exp(-acc));
}

// delta_conv_shift shifts channel c's state left and appends u[c].
METAL_FUNC void delta_conv_shift(device const float* u, device float* state, int taps, int c)
{
    device float* hist = state + ulong(c) * (taps - 1);
    for (int j = 0; j + 1 < taps - 1; j++) {
        hist[j] = hist[j + 1];
    }
    hist[taps - 2] = u[c];
}

kernel void delta_conv_shift_f32(
    constant DeltaConvArgs& args [[buffer(0)]],
    device const float* u [[buffer(1)]],
    device float* state [[buffer(2)]],
    uint c [[thread_position_in_grid]])
{
    if (int(c) >= args.channels) {
        return;
    }
    delta_conv_shift(u, state, args.taps, int(c));
}

// delta_step reads qkv as the conv's input, whose output it computes with
// the conv state cs and taps cw.
METAL_FUNC void delta_step(
    constant DeltaStepArgs& args,
    device const float* qkv,
    device const float* z,
    device const float* b,
    device const float* a,
    device float* state,
    device const float* neg_a,
    device const float* dt_bias,
    device const float* norm,
    device float* o,
    device const float* cs,
    device const float* cw,
    threadgroup float* tg_mem,
    uint h, uint tid, uint threads, uint sg, uint lane, uint simdgroups)
{
    threadgroup float part_q[DELTA_MAX_SIMDGROUPS];
    threadgroup float part_k[DELTA_MAX_SIMDGROUPS];
    threadgroup float part_o[DELTA_MAX_SIMDGROUPS];
    const int rows = min(KEY_DIM, DELTA_ROWS_PER_THREAD);
    const int slices = KEY_DIM / rows;
    const int vd = args.value_dim;
    const int j = int(tid) % vd;
    const int r = int(tid) / vd;
    threadgroup float* qs = tg_mem;
    threadgroup float* ks = qs + KEY_DIM;
    threadgroup float* kv_part = ks + KEY_DIM;
    threadgroup float* o_part = kv_part + slices * vd;

    const int kh = int(h) / (args.value_heads / args.key_heads);
    const int q_at = kh * KEY_DIM;
    const int k_at = (args.key_heads + kh) * KEY_DIM;
    const int v_at = 2 * args.key_heads * KEY_DIM + int(h) * vd;

    float sq = 0.0f;
    float sk = 0.0f;
    for (int t = int(tid); t < KEY_DIM; t += int(threads)) {
        const float x = delta_conv_out(qkv, cs, cw, args.taps, q_at + t);
        const float y = delta_conv_out(qkv, cs, cw, args.taps, k_at + t);
        qs[t] = x;
        ks[t] = y;
        sq += x * x;
        sk += y * y;
    }
    sq = simd_sum(sq);
    sk = simd_sum(sk);
    if (lane == 0) {
        part_q[sg] = sq;
        part_k[sg] = sk;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float tq = 0.0f;
    float tk = 0.0f;
    for (uint s = 0; s < simdgroups; s++) {
        tq += part_q[s];
        tk += part_k[s];
    }
    const float inv_q = rsqrt(tq + DELTA_L2_EPS) * args.q_scale;
    const float inv_k = rsqrt(tk + DELTA_L2_EPS);

    const float beta = 1.0f / (1.0f + exp(-b[h]));
    const float x = a[h] + dt_bias[h];
    const float sp = x > DELTA_SOFTPLUS_THRESHOLD ? x : log(1.0f + exp(x));
    const float alpha = exp(neg_a[h] * sp);

    // kv_j = sum_a (alpha S[a][j]) k[a] over this thread's rows.
    device float* col = state + (ulong(h) * KEY_DIM + ulong(r) * rows) * vd + j;
    threadgroup const float* kr = ks + r * rows;
    threadgroup const float* qr = qs + r * rows;
    float s[DELTA_ROWS_PER_THREAD];
    float kv = 0.0f;
    for (int i = 0; i < rows; i++) {
        s[i] = col[ulong(i) * vd];
        kv += s[i] * (kr[i] * inv_k * alpha);
    }
    kv_part[r * vd + j] = kv;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    kv = 0.0f;
    for (int t = 0; t < slices; t++) {
        kv += kv_part[t * vd + j];
    }
    const float vj = delta_conv_out(qkv, cs, cw, args.taps, v_at + j);
    const float delta = beta * (vj - kv);
    float oj = 0.0f;
    for (int i = 0; i < rows; i++) {
        const float sv = alpha * s[i] + (kr[i] * inv_k) * delta;
        col[ulong(i) * vd] = sv;
        oj += sv * (qr[i] * inv_q);
    }
    o_part[r * vd + j] = oj;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    oj = 0.0f;
    for (int t = 0; t < slices; t++) {
        oj += o_part[t * vd + j];
    }

    // Gated RMSNorm over the head's value_dim outputs (slice 0 owns them).
    float so = simd_sum(r == 0 ? oj * oj : 0.0f);
    if (lane == 0) {
        part_o[sg] = so;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (r != 0) {
        return;
    }
    float to = 0.0f;
    for (uint t = 0; t < simdgroups; t++) {
        to += part_o[t];
    }
    const float inv = rsqrt(to / float(vd) + args.eps);
    const ulong at = ulong(h) * vd + j;
    const float zj = z[at];
    o[at] = oj * inv * norm[j] * (zj / (1.0f + exp(-zj)));
}

kernel void delta_step_conv_f32(
    constant DeltaStepArgs& args [[buffer(0)]],
    device const float* u [[buffer(1)]],
    device const float* z [[buffer(2)]],
    device const float* b [[buffer(3)]],
    device const float* a [[buffer(4)]],
    device float* state [[buffer(5)]],
    device const float* neg_a [[buffer(6)]],
    device const float* dt_bias [[buffer(7)]],
    device const float* norm [[buffer(8)]],
    device float* o [[buffer(9)]],
    device const float* conv_state [[buffer(10)]],
    device const float* conv_w [[buffer(11)]],
    threadgroup float* tg_mem [[threadgroup(0)]],
    uint h [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    delta_step(args, u, z, b, a, state, neg_a, dt_bias, norm, o, conv_state, conv_w, tg_mem,
               h, tid, threads, sg, lane, simdgroups);
}
