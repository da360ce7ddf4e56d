// msl_math.h: the Metal Shading Language functions that the drivers which
// compile MSL themselves (petal/gpu/msl) write the same way over their own
// scalar math: the vector forms of min, max, clamp and fma, mix, select,
// the geometric functions, all and any, the fast:: and precise:: names,
// integer limits, mem_flags, the math constants and the address-space
// qualifiers. The sim's metal_compat.h and the cuda driver's cuda_compat.h
// include it after msl_types.h and after their scalar math (exp...fma,
// min and max, as_type, numeric_limits and its float specialisation):
// unqualified calls here bind to those at this point.

namespace metal {

template <class T, int N> inline petal::vec<T, N> min(const petal::vec<T, N>& a, const petal::vec<T, N>& b) {
	petal::vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = min(a.el()[i], b.el()[i]);
	return r;
}
template <class T, int N> inline petal::vec<T, N> max(const petal::vec<T, N>& a, const petal::vec<T, N>& b) {
	petal::vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = max(a.el()[i], b.el()[i]);
	return r;
}
template <class T, class = petal::enable_if_t<petal::is_scalar_v<T>>> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T, int N> inline petal::vec<T, N> clamp(const petal::vec<T, N>& x, const petal::vec<T, N>& lo, const petal::vec<T, N>& hi) {
	return min(max(x, lo), hi);
}
template <class T, int N> inline petal::vec<T, N> clamp(const petal::vec<T, N>& x, T lo, T hi) {
	return min(max(x, petal::vec<T, N>(lo)), petal::vec<T, N>(hi));
}
template <class T, int N> inline petal::vec<T, N> fma(const petal::vec<T, N>& a, const petal::vec<T, N>& b, const petal::vec<T, N>& c) {
	petal::vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = fma(a.el()[i], b.el()[i], c.el()[i]);
	return r;
}
template <class A, class B, class C> inline auto mad(A a, B b, C c) { return a * b + c; }
template <class T> inline T mix(T x, T y, T a) { return x + (y - x) * a; }
template <class T, int N> inline petal::vec<T, N> mix(const petal::vec<T, N>& x, const petal::vec<T, N>& y, T a) { return x + (y - x) * a; }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
template <class T, int N> inline petal::vec<T, N> select(const petal::vec<T, N>& a, const petal::vec<T, N>& b, const petal::vec<bool, N>& c) {
	petal::vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = c.el()[i] ? b.el()[i] : a.el()[i];
	return r;
}
template <class T, int N> inline T dot(const petal::vec<T, N>& a, const petal::vec<T, N>& b) {
	T s = T(0);
	for (int i = 0; i < N; i++) s += a.el()[i] * b.el()[i];
	return s;
}
template <class T, int N> inline T length(const petal::vec<T, N>& a) { return T(sqrt(dot(a, a))); }
template <class T, int N> inline petal::vec<T, N> normalize(const petal::vec<T, N>& a) { return a * rsqrt(dot(a, a)); }
template <int N> inline bool all(const petal::vec<bool, N>& a) {
	for (int i = 0; i < N; i++)
		if (!a.el()[i]) return false;
	return true;
}
template <int N> inline bool any(const petal::vec<bool, N>& a) {
	for (int i = 0; i < N; i++)
		if (a.el()[i]) return true;
	return false;
}
inline bool all(bool a) { return a; }
inline bool any(bool a) { return a; }

namespace precise {
using metal::abs;
using metal::clamp;
using metal::cos;
using metal::exp;
using metal::exp2;
using metal::fabs;
using metal::fmax;
using metal::fmin;
using metal::log;
using metal::log2;
using metal::max;
using metal::min;
using metal::pow;
using metal::powr;
using metal::rsqrt;
using metal::sin;
using metal::sqrt;
using metal::tanh;
}  // namespace precise

// fast:: is precise:: here: Petal asks every driver for IEEE math (petal/gpu's
// Math section), so Metal's fast-math variants compute the same.
namespace fast = precise;

template <> struct numeric_limits<uint> {
	static constexpr uint max() { return 0xffffffffu; }
	static constexpr uint min() { return 0u; }
	static constexpr uint lowest() { return 0u; }
};
template <> struct numeric_limits<int> {
	static constexpr int max() { return 0x7fffffff; }
	static constexpr int min() { return -0x7fffffff - 1; }
	static constexpr int lowest() { return -0x7fffffff - 1; }
};

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return (mem_flags)((int)a | (int)b); }

}  // namespace metal

#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_LN2_F 0.69314718055994530942f
#define M_LOG2E_F 1.44269504088896340736f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.70710678118654752440f

// Address spaces: one for both drivers (the host's memory; CUDA's generic
// addressing reaches global, shared and local memory through one pointer
// type). threadgroup is rewritten by the driver (storage vs qualifier),
// the others vanish here.
#define device
#define constant const
#define thread
