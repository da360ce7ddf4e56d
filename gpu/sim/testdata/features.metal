// features.metal: kernels exercising the parts of metal_compat.h that the
// sim's tests check against Go (bfloat/half rounding, simd-group functions,
// vectors and swizzles, atomics, function constants, dynamic threadgroup
// memory, 2-D grids). Plain MSL, as Apple's compiler would take it.
#include <metal_stdlib>
using namespace metal;

constant int kScale [[function_constant(0)]];
constant bool kAddOne [[function_constant(1)]];
constant bool kAddOneDefined = is_function_constant_defined(kAddOne);

kernel void round_bf16(device const float* x [[buffer(0)]],
                       device bfloat* y [[buffer(1)]],
                       device float* back [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
    bfloat b = bfloat(x[i]);
    y[i] = b;
    back[i] = float(b);
}

kernel void round_half(device const float* x [[buffer(0)]],
                       device float* back [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    half h = half(x[i]);
    back[i] = float(h) + float(0.0h);
}

// Eleven results per thread, laid out [result][thread].
kernel void simd_ops(device uint* out [[buffer(0)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint threads [[threads_per_threadgroup]]) {
    uint v = lane * lane + 3;
    out[0 * threads + tid] = simd_shuffle(v, (lane + 5) % 32);
    out[1 * threads + tid] = simd_shuffle_down(v, 3);
    out[2 * threads + tid] = simd_shuffle_up(v, 2);
    out[3 * threads + tid] = simd_shuffle_xor(v, 7);
    out[4 * threads + tid] = simd_broadcast(v, 9);
    out[5 * threads + tid] = simd_prefix_inclusive_sum(v);
    out[6 * threads + tid] = simd_prefix_exclusive_sum(v);
    out[7 * threads + tid] = uint(simd_vote::vote_t(simd_ballot((v & 4) != 0)));
    out[8 * threads + tid] = simd_max(v) * 100000 + simd_min(v);
    out[9 * threads + tid] = simd_sum(v);
    out[10 * threads + tid] = uint(simd_all(v >= 3)) * 100 + uint(simd_any(v == 12)) * 10 + uint(simd_is_first());
}

kernel void vectors(device const float4* a [[buffer(0)]],
                    device const packed_float3* p [[buffer(1)]],
                    device float4* out [[buffer(2)]],
                    device uint4* bits [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
    float4 v = a[i];
    float4 w = v * 2.0f + float4(1.0f, 2.0f, 3.0f, 4.0f);
    w.xy = v.yx;
    float2 t = w.zw;
    float4 u = float4(0.0f);
    u.zw = v.zw;  // same swizzle on both sides
    u.xy += float2(1.0f, 2.0f);
    u.xy *= 3.0f;
    t += u.zw - v.zw + u.xy - float2(3.0f, 6.0f);
    float3 q = p[i];
    float d = dot(q, float3(1.0f));
    out[2 * i] = float4(t, d, clamp(v.x, 0.0f, 1.0f));
    out[2 * i + 1] = select(float4(0.0f), w, v > 0.5f);
    bits[i] = uint4(as_type<uint>(v.x), uint(sizeof(float3)), uint(sizeof(packed_float3)), uint(alignof(float4)));
}

kernel void atomics(device atomic_uint* counter [[buffer(0)]],
                    device atomic_float* fsum [[buffer(1)]],
                    device uint* per_group [[buffer(2)]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint group [[threadgroup_position_in_grid]]) {
    threadgroup atomic_uint local;
    if (tid == 0) {
        atomic_store_explicit(&local, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&local, tid, memory_order_relaxed);
    atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(fsum, 0.5f, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        per_group[group] = atomic_load_explicit(&local, memory_order_relaxed);
    }
}

kernel void constants(device const int* x [[buffer(0)]],
                      device int* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    int add = 0;
    if (kAddOneDefined && kAddOne) {
        add = 1;
    }
    y[i] = x[i] * kScale + add;
}

// Reverses each threadgroup's slice through dynamic threadgroup memory and
// writes a 2-D grid's coordinates.
kernel void reverse_2d(device const float* x [[buffer(0)]],
                       device float* y [[buffer(1)]],
                       device uint* coords [[buffer(2)]],
                       threadgroup float* sh [[threadgroup(0)]],
                       uint2 gid [[thread_position_in_grid]],
                       uint2 grid [[threads_per_grid]],
                       uint2 lid [[thread_position_in_threadgroup]],
                       uint2 tpg [[threads_per_threadgroup]]) {
    uint n = tpg.x * tpg.y;
    uint t = lid.y * tpg.x + lid.x;
    uint g = gid.y * grid.x + gid.x;
    sh[t] = x[g];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[g] = sh[n - 1 - t];
    coords[g] = gid.x * 1000 + gid.y;
}

// Divides by a value that may be zero: undefined on the GPU, a trap on the
// CPU that the sim must report rather than crash on.
kernel void divide(device const int* x [[buffer(0)]],
                   device int* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
    y[i] = 100 / x[i];
}

// Shifts by an amount the host gives: 32 or more is undefined, which the
// sim must report rather than answer as x86 does (the amount mod 32).
kernel void shift_left(device const uint* by [[buffer(0)]],
                       device uint* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    y[i] = 1u << by[i];
}

// Writes through a pointer the host bound to read-only memory.
kernel void store_one(device int* y [[buffer(0)]],
                      uint i [[thread_position_in_grid]]) {
    y[i] = 1;
}

// Every threadgroup writes its index to out[0]: the last one wins, which
// depends on the order threadgroups run in.
kernel void last_group_wins(device uint* out [[buffer(0)]],
                            uint group [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]]) {
    if (tid == 0) {
        out[0] = group;
    }
}

constant bool kHasBias [[function_constant(2)]];

// An optional buffer, bound only when the function constant says so.
kernel void optional_bias(device const float* x [[buffer(0)]],
                          device const float* bias [[buffer(1), function_constant(kHasBias)]],
                          device float* y [[buffer(2)]],
                          uint i [[thread_position_in_grid]]) {
    y[i] = x[i] + (kHasBias ? bias[i] : 0.0f);
}

// min, max, fmin and fmax with NaN and signed zero operands.
kernel void minmax(device const float* a [[buffer(0)]],
                   device const float* b [[buffer(1)]],
                   device float* out [[buffer(2)]],
                   uint i [[thread_position_in_grid]]) {
    out[4 * i + 0] = min(a[i], b[i]);
    out[4 * i + 1] = max(a[i], b[i]);
    out[4 * i + 2] = fmin(a[i], b[i]);
    out[4 * i + 3] = fmax(a[i], b[i]);
}

// A shuffle reduction that assumes 32 lanes: with a partial simd-group,
// lane 0 adds values from lanes that do not exist.
kernel void shuffle_sum(device const float* x [[buffer(0)]],
                        device float* out [[buffer(1)]],
                        uint tid [[thread_index_in_threadgroup]]) {
    float v = x[tid];
    for (ushort offset = 16; offset > 0; offset /= 2) {
        v += simd_shuffle_down(v, offset);
    }
    if (tid == 0) {
        out[0] = v;
    }
}

// Reads x[i + shift]; a negative shift reads before the buffer.
kernel void shifted_copy(device const float* x [[buffer(0)]],
                         device float* y [[buffer(1)]],
                         constant int& shift [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
    y[i] = x[int(i) + shift];
}

// Math through every spelling a kernel may use.
kernel void math_funcs(device const float* x [[buffer(0)]],
                       device float* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
    float v = x[i];
    device float* o = out + 10 * i;
    o[0] = exp(v);
    o[1] = fast::exp(v);
    o[2] = precise::exp(v);
    o[3] = metal::rsqrt(v);
    o[4] = fma(v, v, 1.0f);
    o[5] = metal::precise::sqrt(v);
    o[6] = tanh(v);
    o[7] = log(v);
    o[8] = pow(v, 1.5f);
    float4 e = exp(float4(v, 0.0f, 1.0f, -v));
    o[9] = e.x * e.w + e.y;
}
