// vision.h: the argument structs and constants of the vision tower's
// kernels (vision.metal) and the 3D-rotary attention prep
// (vision_mrope.metal), kept apart from args.h so the tower's family
// grows without touching the text model's; the same conventions as
// args.h, mirrored by shaders/vision.go (TestVisionArgsLayout).

#ifndef PETAL_VISION_H
#define PETAL_VISION_H

#include "args.h"

// Threads of a LayerNorm row, a rope or copy threadgroup (one element
// each).
#define VIS_THREADS 256
// The dense product's output tile: VIS_TILE tokens by VIS_TILE outputs,
// one thread each, the inputs staged VIS_TILE columns at a time.
#define VIS_TILE 16
#define VIS_DENSE_THREADS (VIS_TILE * VIS_TILE)
// One simd-group per (patch, head) in the tower's attention.
#define VIS_ATTN_THREADS 32
// The tower's attention keeps a head in registers, VIS_MAX_HEAD_DIM / 32
// floats a lane (Qwen3.6's tower: 72).
#define VIS_MAX_HEAD_DIM 128

// The dense product's activation (VisDenseArgs.act).
#define VIS_ACT_NONE 0
#define VIS_ACT_GELU_TANH 1 // gelu_pytorch_tanh: the blocks' MLP
#define VIS_ACT_GELU_ERF 2  // nn.GELU(): the merger's

struct VisNormArgs {
    int32_t n;              // values per row
    float eps;
    int32_t rows;
    int32_t _pad;
};

struct VisDenseArgs {
    int32_t rows;           // outputs per token (the weight's rows)
    int32_t cols;           // inputs per token (the weight's columns)
    int32_t tokens;
    int32_t act;            // VIS_ACT_*
    int32_t accumulate;     // 1: y += act(W x + b), else y = act(W x + b)
    int32_t _pad[3];
};

struct VisRopeArgs {
    int32_t tokens;         // patches, all frames
    int32_t heads;
    int32_t head_dim;
    int32_t frame;          // patches per frame: the tables' rows
};

struct VisAttnArgs {
    int32_t tokens;         // patches, all frames
    int32_t heads;
    int32_t head_dim;
    int32_t frame;          // patches per frame: a patch sees its frame's
    float scale;            // 1 / sqrt(head_dim)
    int32_t _pad[3];
};

struct VisCopyArgs {
    int32_t n;              // floats
    int32_t _pad[3];
};

// ---- vision_mrope.metal: attention prep with a 3D position per token.
struct MRopePrepArgs {
    int32_t heads;          // query heads
    int32_t kv_heads;
    int32_t head_dim;
    int32_t rotary_dim;     // leading dims of each head that RoPE rotates (even)
    int32_t pos;            // the first row's cache row
    float eps;              // of the q/k RMSNorms
    int32_t text;           // 1: every row is text at rotary position row + delta (pos3 unread)
    int32_t delta;          // with text: the rotary position's move against the cache row
    float inv_freq[ATTN_MAX_HEAD_DIM / 2];  // theta^(-2j/rotary_dim), fp32
    int32_t axis[ATTN_MAX_HEAD_DIM / 2];    // the position component (0 time, 1 height, 2 width) frequency j takes
};

#endif
