// cuda_compat.h: the part of the Metal Shading Language that Petal's kernels
// use, as CUDA C++ for NVRTC (C++17, every function a device function:
// --device-as-default-execution-space). The driver prepends it to a kernel
// source after petal/gpu/msl's rewrite (kernel signatures become a
// __global__ entry point, threadgroup storage becomes __shared__, function
// constants constexpr, swizzles petal_swz calls, 1.0h literals half casts).
// The vector types and what is written the same over either driver's scalar
// math come from petal/gpu/msl's msl_types.h and msl_math.h, which the sim's
// metal_compat.h includes too. When a kernel needs something missing, extend
// these headers (and the sim's); never change the kernel for one driver.
//
// Mapping: a threadgroup is a thread block, a simd-group is a warp (both 32
// lanes, numbered in the same x-fastest order), threadgroup memory is shared
// memory. Simd-group functions run over the lanes active at the call
// (__activemask), as Metal's do; reductions and scans take a butterfly when
// the whole warp is there and go lane by lane otherwise. 8x8 simdgroup
// matrices are spread over the warp, two elements a lane, and their products
// are fp32 fused multiply-adds in k order (the sim's order).
//
// Arithmetic is IEEE binary32: no fast math and no contraction (the driver
// passes --fmad=false), as petal/gpu's Math section asks of every driver.

#define PETAL_CUDA 1

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;

// NVRTC has no offsetof builtin; Metal's compiler (clang) and the sim's do.
#define __builtin_offsetof(s, f) ((unsigned long)&(((s*)0)->f))

#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F

namespace petal {

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <class T> struct remove_cvref { typedef T type; };
template <class T> struct remove_cvref<const T> { typedef T type; };
template <class T> struct remove_cvref<T&> { typedef typename remove_cvref<T>::type type; };
template <class T> struct remove_cvref<const T&> { typedef T type; };
template <class T> struct is_arithmetic { static constexpr bool value = false; };
#define PETAL_ARITH(T) \
	template <> struct is_arithmetic<T> { static constexpr bool value = true; };
PETAL_ARITH(bool)
PETAL_ARITH(char)
PETAL_ARITH(signed char)
PETAL_ARITH(unsigned char)
PETAL_ARITH(short)
PETAL_ARITH(unsigned short)
PETAL_ARITH(int)
PETAL_ARITH(unsigned int)
PETAL_ARITH(long)
PETAL_ARITH(unsigned long)
PETAL_ARITH(long long)
PETAL_ARITH(unsigned long long)
PETAL_ARITH(float)
PETAL_ARITH(double)
#undef PETAL_ARITH

}  // namespace petal

// ---------------------------------------------------------------- half, bfloat

// half is IEEE binary16, converted with the hardware's round-to-nearest;
// arithmetic between halves rounds each result to half, as in MSL, and a
// half meeting a float becomes a float.
struct half {
	unsigned short bits;
	half() = default;
	half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
	template <class U, class = petal::enable_if_t<petal::is_arithmetic<U>::value && !petal::is_same<U, float>::value>>
	half(U u) : half((float)u) {}
	operator float() const {
		float f;
		asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
		return f;
	}
	template <class U> half& operator+=(U o) { return *this = half((float)*this + (float)o); }
	template <class U> half& operator-=(U o) { return *this = half((float)*this - (float)o); }
	template <class U> half& operator*=(U o) { return *this = half((float)*this * (float)o); }
	template <class U> half& operator/=(U o) { return *this = half((float)*this / (float)o); }
};
#define PETAL_HBIN(op)                                                                                         \
	template <class A, class B, class = petal::enable_if_t<petal::is_same<A, half>::value && petal::is_same<B, half>::value>> \
	inline half operator op(A a, B b) { return half((float)a op (float)b); }
PETAL_HBIN(+)
PETAL_HBIN(-)
PETAL_HBIN(*)
PETAL_HBIN(/)
#undef PETAL_HBIN
template <class A, class = petal::enable_if_t<petal::is_same<A, half>::value>> inline half operator-(A a) {
	half r;
	r.bits = a.bits ^ 0x8000u;
	return r;
}

// bfloat is IEEE binary32's top 16 bits. Conversion from float rounds to
// nearest, ties to even; NaN stays NaN. Arithmetic happens in float (the
// sim's bfloat, bit for bit).
struct bfloat {
	unsigned short bits;
	bfloat() = default;
	bfloat(float f) {
		unsigned u = __float_as_uint(f);
		if ((u & 0x7fffffffu) > 0x7f800000u) {
			bits = (unsigned short)((u >> 16) | 0x40u);
		} else {
			u += 0x7fffu + ((u >> 16) & 1u);
			bits = (unsigned short)(u >> 16);
		}
	}
	template <class U, class = petal::enable_if_t<petal::is_arithmetic<U>::value && !petal::is_same<U, float>::value>>
	bfloat(U u) : bfloat((float)u) {}
	bfloat(half h) : bfloat((float)h) {}
	operator float() const { return __uint_as_float((unsigned)bits << 16); }
	template <class U> bfloat& operator+=(U o) { return *this = bfloat((float)*this + (float)o); }
	template <class U> bfloat& operator-=(U o) { return *this = bfloat((float)*this - (float)o); }
	template <class U> bfloat& operator*=(U o) { return *this = bfloat((float)*this * (float)o); }
	template <class U> bfloat& operator/=(U o) { return *this = bfloat((float)*this / (float)o); }
};

namespace petal {

template <class T, int N> struct storage;
// Metal's alignment: 2-vectors align to their size, 3- and 4-vectors to
// four elements (so float3 is 16 bytes).
// NVRTC has no anonymous structs, so the components are plain members and
// el() indexes them (they are contiguous: one type, no padding between).
template <class T> struct alignas(2 * sizeof(T)) storage<T, 2> {
	T x, y;
	T* el() { return &x; }
	const T* el() const { return &x; }
};
template <class T> struct alignas(4 * sizeof(T)) storage<T, 3> {
	T x, y, z;
	T* el() { return &x; }
	const T* el() const { return &x; }
};
template <class T> struct alignas(4 * sizeof(T)) storage<T, 4> {
	T x, y, z, w;
	T* el() { return &x; }
	const T* el() const { return &x; }
};

template <class T, int N> struct packed_storage;
template <class T> struct packed_storage<T, 2> {
	T x, y;
	T* el() { return &x; }
	const T* el() const { return &x; }
};
template <class T> struct packed_storage<T, 3> {
	T x, y, z;
	T* el() { return &x; }
	const T* el() const { return &x; }
};
template <class T> struct packed_storage<T, 4> {
	T x, y, z, w;
	T* el() { return &x; }
	const T* el() const { return &x; }
};

}  // namespace petal

#define PETAL_VEC_NAME(n) msl_##n
#include "msl_types.h"

namespace petal {

// ---------------------------------------------------------------- launch

// Params is the one kernel parameter: each [[buffer(n)]]'s device address
// (inline bytes are copied to device memory at commit) and the offsets of
// the [[threadgroup(n)]] slots in the dynamic shared memory. Mirrored by
// params in exec.go.
struct Params {
	unsigned long long buffers[31];
	unsigned int tgoff[8];
};
static_assert(sizeof(Params) == 280, "Params layout");

template <class T> struct arg_cast;
template <class T> struct arg_cast<T*> {
	static T* get(void* p) { return (T*)p; }
};
template <class T> struct arg_cast<T&> {
	static T& get(void* p) { return *(T*)p; }
};

// builtin3 converts a kernel's [[attribute]] value to the parameter's type
// (uint, ushort, uint2, uint3, ...), as Metal allows.
struct builtin3 {
	uint32_t x, y, z;
	template <class T, class = enable_if_t<is_arithmetic<T>::value>> operator T() const { return T(x); }
	template <class T> operator vec<T, 2>() const { return vec<T, 2>(T(x), T(y)); }
	template <class T> operator vec<T, 3>() const { return vec<T, 3>(T(x), T(y), T(z)); }
};
inline builtin3 b3(uint32_t x, uint32_t y, uint32_t z) { return builtin3{x, y, z}; }

// tindex is thread_index_in_threadgroup: x fastest, as warps are formed.
inline uint32_t tindex() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline uint32_t tcount() { return blockDim.x * blockDim.y * blockDim.z; }
inline uint32_t lane() { return tindex() & 31u; }

}  // namespace petal

extern __shared__ __align__(16) unsigned char petal_dyn[];

// ---------------------------------------------------------------- MSL types

// CUDA's own float2, uint4... are other types: msl_types.h names the MSL
// vectors msl_float2... (PETAL_VEC_NAME) and these macros give kernels those.
#define float2 msl_float2
#define float3 msl_float3
#define float4 msl_float4
#define half2 msl_half2
#define half3 msl_half3
#define half4 msl_half4
#define bfloat2 msl_bfloat2
#define bfloat3 msl_bfloat3
#define bfloat4 msl_bfloat4
#define int2 msl_int2
#define int3 msl_int3
#define int4 msl_int4
#define uint2 msl_uint2
#define uint3 msl_uint3
#define uint4 msl_uint4
#define short2 msl_short2
#define short3 msl_short3
#define short4 msl_short4
#define ushort2 msl_ushort2
#define ushort3 msl_ushort3
#define ushort4 msl_ushort4
#define char2 msl_char2
#define char3 msl_char3
#define char4 msl_char4
#define uchar2 msl_uchar2
#define uchar3 msl_uchar3
#define uchar4 msl_uchar4
#define bool2 msl_bool2
#define bool3 msl_bool3
#define bool4 msl_bool4
#define long2 msl_long2
#define long3 msl_long3
#define long4 msl_long4
#define ulong2 msl_ulong2
#define ulong3 msl_ulong3
#define ulong4 msl_ulong4

namespace metal {

// ---------------------------------------------------------------- math

// Templates over the scalar so that a call from `using namespace metal`
// code never ties with CUDA's own overloads of the same names in the
// global namespace (those are IEEE too; for half and vectors only these
// apply).
#define PETAL_F1(name, expr)                                                                     \
	template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T name(T tx) { \
		float x = (float)tx;                                                                     \
		return T(expr);                                                                          \
	}                                                                                            \
	template <class T, int N> inline petal::vec<T, N> name(const petal::vec<T, N>& a) {          \
		petal::vec<T, N> r;                                                                      \
		for (int i = 0; i < N; i++) r.el()[i] = T(name(a.el()[i]));                                    \
		return r;                                                                                \
	}
PETAL_F1(exp, ::expf(x))
PETAL_F1(exp2, ::exp2f(x))
PETAL_F1(exp10, ::exp10f(x))
PETAL_F1(log, ::logf(x))
PETAL_F1(log2, ::log2f(x))
PETAL_F1(log10, ::log10f(x))
PETAL_F1(sqrt, ::sqrtf(x))
PETAL_F1(rsqrt, 1.0f / ::sqrtf(x))
PETAL_F1(sin, ::sinf(x))
PETAL_F1(cos, ::cosf(x))
PETAL_F1(tan, ::tanf(x))
PETAL_F1(tanh, ::tanhf(x))
PETAL_F1(sinh, ::sinhf(x))
PETAL_F1(cosh, ::coshf(x))
PETAL_F1(asin, ::asinf(x))
PETAL_F1(acos, ::acosf(x))
PETAL_F1(atan, ::atanf(x))
PETAL_F1(floor, ::floorf(x))
PETAL_F1(ceil, ::ceilf(x))
PETAL_F1(round, ::roundf(x))
PETAL_F1(rint, ::rintf(x))
PETAL_F1(trunc, ::truncf(x))
PETAL_F1(fabs, ::fabsf(x))
PETAL_F1(fract, x - ::floorf(x))
PETAL_F1(saturate, ::fminf(::fmaxf(x, 0.0f), 1.0f))
PETAL_F1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f))
PETAL_F1(erf, ::erff(x))
#undef PETAL_F1

template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T abs(T x) { return x < T(0) ? T(-x) : x; }
template <> inline float abs<float>(float x) { return ::fabsf(x); }
template <class T, int N> inline petal::vec<T, N> abs(const petal::vec<T, N>& a) {
	petal::vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = abs(a.el()[i]);
	return r;
}

#define PETAL_F2(name, expr)                                                                                      \
	template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T name(T tx, T ty) {             \
		float x = (float)tx, y = (float)ty;                                                                       \
		return T(expr);                                                                                           \
	}                                                                                                             \
	template <class T, int N> inline petal::vec<T, N> name(const petal::vec<T, N>& a, const petal::vec<T, N>& b) { \
		petal::vec<T, N> r;                                                                                       \
		for (int i = 0; i < N; i++) r.el()[i] = T(name(a.el()[i], b.el()[i]));                                            \
		return r;                                                                                                 \
	}
PETAL_F2(pow, ::powf(x, y))
PETAL_F2(powr, ::powf(x, y))
PETAL_F2(fmin, ::fminf(x, y))
PETAL_F2(fmax, ::fmaxf(x, y))
PETAL_F2(fmod, ::fmodf(x, y))
PETAL_F2(atan2, ::atan2f(x, y))
PETAL_F2(copysign, ::copysignf(x, y))
PETAL_F2(step, y < x ? 0.0f : 1.0f)
#undef PETAL_F2

template <class T> struct is_float_like { static constexpr bool value = false; };
template <> struct is_float_like<float> { static constexpr bool value = true; };
template <> struct is_float_like<half> { static constexpr bool value = true; };
template <> struct is_float_like<bfloat> { static constexpr bool value = true; };

// min and max follow fmin/fmax for floats (a NaN operand yields the other).
template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T min(T a, T b) {
	if constexpr (is_float_like<T>::value) return (T)::fminf((float)a, (float)b);
	else return b < a ? b : a;
}
template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T max(T a, T b) {
	if constexpr (is_float_like<T>::value) return (T)::fmaxf((float)a, (float)b);
	else return a < b ? b : a;
}
template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T fma(T a, T b, T c) { return T(::fmaf((float)a, (float)b, (float)c)); }
template <class T, class = petal::enable_if_t<is_float_like<T>::value>> inline bool isnan(T x) { return (float)x != (float)x; }
template <class T, class = petal::enable_if_t<is_float_like<T>::value>> inline bool isinf(T x) { return ::fabsf((float)x) == __uint_as_float(0x7f800000u); }
template <class T, class = petal::enable_if_t<is_float_like<T>::value>> inline bool isfinite(T x) { return ::fabsf((float)x) < __uint_as_float(0x7f800000u); }
template <class T, class = petal::enable_if_t<is_float_like<T>::value>> inline bool signbit(T x) { return (__float_as_uint((float)x) >> 31) != 0; }
template <class T> inline T clz(T x) { return T(sizeof(T) == 8 ? __clzll((long long)x) : __clz((int)x) - (32 - (int)sizeof(T) * 8)); }
template <class T> inline T ctz(T x) {
	if (x == 0) return T(sizeof(T) * 8);
	return T(sizeof(T) == 8 ? __ffsll((long long)x) - 1 : __ffs((int)x) - 1);
}
template <class T> inline T popcount(T x) { return T(sizeof(T) == 8 ? __popcll((unsigned long long)x) : __popc((unsigned)x & (0xffffffffu >> (32 - (sizeof(T) < 4 ? sizeof(T) : 4) * 8)))); }
template <class T, class = petal::enable_if_t<petal::is_same<T, uint>::value || petal::is_same<T, int>::value>> inline T mulhi(T a, T b) {
	if constexpr (petal::is_same<T, uint>::value) return __umulhi(a, b);
	else return __mulhi(a, b);
}

template <class T, class U> inline T as_type(const U& x) {
	static_assert(sizeof(T) == sizeof(U), "as_type between types of different sizes");
	T r;
	memcpy(&r, &x, sizeof(T));
	return r;
}

template <class T> struct numeric_limits;
template <> struct numeric_limits<float> {
	static constexpr float max() { return FLT_MAX; }
	static constexpr float min() { return FLT_MIN; }
	static constexpr float lowest() { return -FLT_MAX; }
	static float infinity() { return __int_as_float(0x7f800000); }
	static constexpr float epsilon() { return FLT_EPSILON; }
};

}  // namespace metal

#include "msl_math.h"

namespace metal {

// ---------------------------------------------------------------- sync

// __syncthreads orders shared and global memory within the block, which is
// what Metal's barrier gives for either flag.
inline void threadgroup_barrier(mem_flags) { __syncthreads(); }
inline void simdgroup_barrier(mem_flags) { __syncwarp(__activemask()); }

// ---------------------------------------------------------------- simd-group

// petal_words applies a 32-bit shuffle f to each word of any trivially
// copyable value (vectors, half, bfloat), as Metal's simd functions take any
// scalar or vector type.
template <class T, class F> inline T petal_words(const T& v, F f) {
	constexpr int W = (sizeof(T) + 3) / 4;
	unsigned w[W] = {};
	memcpy(w, &v, sizeof(T));
	for (int i = 0; i < W; i++) w[i] = f(w[i]);
	T r;
	memcpy(&r, w, sizeof(T));
	return r;
}
template <class T> inline T petal_shfl(unsigned m, const T& v, int src) {
	return petal_words(v, [=](unsigned x) { return __shfl_sync(m, x, src); });
}
template <class T> inline T petal_shfl_xor(unsigned m, const T& v, int mask) {
	return petal_words(v, [=](unsigned x) { return __shfl_xor_sync(m, x, mask); });
}
template <class T> inline T petal_shfl_down(unsigned m, const T& v, unsigned d) {
	return petal_words(v, [=](unsigned x) { return __shfl_down_sync(m, x, d); });
}
template <class T> inline T petal_shfl_up(unsigned m, const T& v, unsigned d) {
	return petal_words(v, [=](unsigned x) { return __shfl_up_sync(m, x, d); });
}

// A reduction over the active lanes: a butterfly over a full warp (every
// lane ends with the same value, since each step is commutative), else in
// lane order.
#define PETAL_REDUCE(name, op)                                                      \
	template <class T> inline T name(T v) {                                         \
		unsigned m = __activemask();                                                \
		if (m == 0xffffffffu) {                                                     \
			for (int o = 16; o > 0; o >>= 1) {                                      \
				T acc = v, x = petal_shfl_xor(m, v, o);                             \
				v = op;                                                             \
			}                                                                       \
			return v;                                                               \
		}                                                                           \
		T acc = petal_shfl(m, v, __ffs(m) - 1);                                     \
		for (unsigned k = m & (m - 1); k; k &= k - 1) {                             \
			T x = petal_shfl(m, v, __ffs(k) - 1);                                   \
			acc = op;                                                               \
		}                                                                           \
		return acc;                                                                 \
	}
PETAL_REDUCE(simd_sum, acc + x)
PETAL_REDUCE(simd_product, acc * x)
PETAL_REDUCE(simd_max, max(acc, x))
PETAL_REDUCE(simd_min, min(acc, x))
PETAL_REDUCE(simd_and, acc & x)
PETAL_REDUCE(simd_or, acc | x)
PETAL_REDUCE(simd_xor, acc ^ x)
#undef PETAL_REDUCE

template <class T> inline T simd_shuffle(T v, ushort lane) { return petal_shfl(__activemask(), v, lane); }
template <class T> inline T simd_broadcast(T v, ushort lane) { return petal_shfl(__activemask(), v, lane); }
template <class T> inline T simd_shuffle_down(T v, ushort delta) { return petal_shfl_down(__activemask(), v, delta); }
template <class T> inline T simd_shuffle_up(T v, ushort delta) { return petal_shfl_up(__activemask(), v, delta); }
template <class T> inline T simd_shuffle_xor(T v, ushort mask) { return petal_shfl_xor(__activemask(), v, mask); }
template <class T> inline T simd_broadcast_first(T v) {
	unsigned m = __activemask();
	return petal_shfl(m, v, __ffs(m) - 1);
}
template <class T> inline T petal_prefix(T v, bool inclusive) {
	unsigned m = __activemask();
	unsigned me = petal::lane();
	T acc = T(0);
	for (unsigned k = m; k; k &= k - 1) {
		unsigned src = __ffs(k) - 1;
		T x = petal_shfl(m, v, src);
		if (src < me || (inclusive && src == me)) acc += x;
	}
	return acc;
}
template <class T> inline T simd_prefix_inclusive_sum(T v) { return petal_prefix(v, true); }
template <class T> inline T simd_prefix_exclusive_sum(T v) { return petal_prefix(v, false); }

struct simd_vote {
	typedef uint64_t vote_t;
	vote_t bits;
	explicit constexpr simd_vote(vote_t v = 0) : bits(v) {}
	explicit operator vote_t() const { return bits; }
	bool all() const { return bits == 0xffffffffull; }
	bool any() const { return bits != 0; }
};
inline simd_vote simd_ballot(bool c) { return simd_vote(__ballot_sync(__activemask(), c)); }
inline bool simd_all(bool c) {
	unsigned m = __activemask();
	return __ballot_sync(m, c) == m;
}
inline bool simd_any(bool c) { return __ballot_sync(__activemask(), c) != 0; }
inline bool simd_is_first() { return (unsigned)(__ffs(__activemask()) - 1) == petal::lane(); }

// ---------------------------------------------------------------- simdgroup matrices

// simdgroup_matrix<T, 8, 8>: lane l holds row l/4, columns 2(l%4) and
// 2(l%4)+1. Every lane of the warp must take part, as in Metal.
template <class T, int Cols, int Rows> struct simdgroup_matrix {
	static_assert(Cols == 8 && Rows == 8, "only 8x8 simdgroup matrices");
	T e[2];
	simdgroup_matrix() = default;
	explicit simdgroup_matrix(T diag) {
		unsigned l = petal::lane(), r = l >> 2, c = (l & 3) * 2;
		e[0] = r == c ? diag : T(0);
		e[1] = r == c + 1 ? diag : T(0);
	}
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
	simdgroup_matrix<T, Cols, Rows> m;
	m.e[0] = v;
	m.e[1] = v;
	return m;
}

// simdgroup_load reads element (r, c) from src[(origin.y + r) * stride +
// origin.x + c], or the transpose of that block.
template <class T, int Cols, int Rows, class P>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const P* src, ulong stride = Cols, ulong2 origin = ulong2(0), bool transpose = false) {
	__syncwarp();
	unsigned l = petal::lane(), r = l >> 2, c = (l & 3) * 2;
	for (int j = 0; j < 2; j++)
		d.e[j] = transpose ? T(src[(origin.y + c + j) * stride + origin.x + r]) : T(src[(origin.y + r) * stride + origin.x + c + j]);
}

template <class T, int Cols, int Rows, class P>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, P* dst, ulong stride = Cols, ulong2 origin = ulong2(0), bool transpose = false) {
	unsigned l = petal::lane(), r = l >> 2, c = (l & 3) * 2;
	for (int j = 0; j < 2; j++) {
		if (transpose) dst[(origin.y + c + j) * stride + origin.x + r] = P(a.e[j]);
		else dst[(origin.y + r) * stride + origin.x + c + j] = P(a.e[j]);
	}
	__syncwarp();
}

template <class T, int N, int K, int M>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<T, K, M>& a, const simdgroup_matrix<T, N, K>& b, const simdgroup_matrix<T, N, M>& c) {
	unsigned l = petal::lane(), r = l >> 2;
	float arow[8], bcol0[8], bcol1[8];
	for (int j = 0; j < 4; j++) {
		arow[2 * j] = float(petal_shfl(0xffffffffu, a.e[0], (int)(4 * r + j)));
		arow[2 * j + 1] = float(petal_shfl(0xffffffffu, a.e[1], (int)(4 * r + j)));
	}
	for (int k = 0; k < 8; k++) {
		bcol0[k] = float(petal_shfl(0xffffffffu, b.e[0], (int)(4 * k + (l & 3))));
		bcol1[k] = float(petal_shfl(0xffffffffu, b.e[1], (int)(4 * k + (l & 3))));
	}
	float acc0 = float(c.e[0]), acc1 = float(c.e[1]);
	for (int k = 0; k < 8; k++) {
		acc0 = ::fmaf(arow[k], bcol0[k], acc0);
		acc1 = ::fmaf(arow[k], bcol1[k], acc1);
	}
	d.e[0] = T(acc0);
	d.e[1] = T(acc1);
}

template <class T, int N, int K, int M>
inline void simdgroup_multiply(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<T, K, M>& a, const simdgroup_matrix<T, N, K>& b) {
	simdgroup_multiply_accumulate(d, a, b, simdgroup_matrix<T, N, M>(T(0)));
}

// ---------------------------------------------------------------- atomics

enum memory_order { memory_order_relaxed = 0, memory_order_seq_cst = 5 };

template <class T> struct atomic {
	T value;
};

template <class T> inline void atomic_store_explicit(atomic<T>* o, T v, memory_order) { atomicExch(&o->value, v); }
template <class T> inline T atomic_load_explicit(const atomic<T>* o, memory_order) { return *(volatile const T*)&o->value; }
template <class T> inline T atomic_exchange_explicit(atomic<T>* o, T v, memory_order) { return atomicExch(&o->value, v); }
template <class T> inline bool atomic_compare_exchange_weak_explicit(atomic<T>* o, T* expected, T desired, memory_order, memory_order) {
	T old = atomicCAS(&o->value, *expected, desired);
	bool ok = old == *expected;
	*expected = old;
	return ok;
}
template <class T, class U> inline T atomic_fetch_add_explicit(atomic<T>* o, U v, memory_order) { return atomicAdd(&o->value, T(v)); }
template <class T, class U> inline T atomic_fetch_sub_explicit(atomic<T>* o, U v, memory_order) { return atomicSub(&o->value, T(v)); }
template <class T, class U> inline T atomic_fetch_min_explicit(atomic<T>* o, U v, memory_order) { return atomicMin(&o->value, T(v)); }
template <class T, class U> inline T atomic_fetch_max_explicit(atomic<T>* o, U v, memory_order) { return atomicMax(&o->value, T(v)); }
template <class T, class U> inline T atomic_fetch_and_explicit(atomic<T>* o, U v, memory_order) { return atomicAnd(&o->value, T(v)); }
template <class T, class U> inline T atomic_fetch_or_explicit(atomic<T>* o, U v, memory_order) { return atomicOr(&o->value, T(v)); }
template <class T, class U> inline T atomic_fetch_xor_explicit(atomic<T>* o, U v, memory_order) { return atomicXor(&o->value, T(v)); }

}  // namespace metal

typedef metal::atomic<int> atomic_int;
typedef metal::atomic<uint> atomic_uint;
typedef metal::atomic<float> atomic_float;

#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fc00000))
#define HUGE_VALF INFINITY
#define MAXFLOAT FLT_MAX
#define METAL_FUNC __forceinline__
