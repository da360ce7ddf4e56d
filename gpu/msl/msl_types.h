// msl_types.h: the Metal Shading Language's scalar names and its vector and
// packed vector types (float4, packed_half3...: petal::vec, petal::packed_vec
// and the swizzle proxy), shared by the drivers that compile MSL themselves
// (petal/gpu/msl): the sim's metal_compat.h (host C++) and the cuda driver's
// cuda_compat.h (CUDA C++ for NVRTC, where every function is a device
// function, so nothing here needs a qualifier). Each includes it after
// defining what differs between them:
//   - half and bfloat (a host _Float16 and a struct; a struct over PTX
//     conversions and one over the bits);
//   - in namespace petal, enable_if_t, is_same, is_arithmetic and
//     remove_cvref (NVRTC has no standard library; the sim takes std's);
//   - petal::storage<T, N> and petal::packed_storage<T, N>: the members x, y
//     (z, w) and el(), the N contiguous elements (a union with an array on
//     the host; NVRTC has no anonymous structs, so plain members there).
// C++17 (both compile it as a system header or as C++17), no library.
// Everything after the drivers' scalar math is in msl_math.h.

#ifndef __METAL_VERSION__
#define __METAL_VERSION__ 310
#endif

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

namespace petal {

template <class T> struct is_scalar { static constexpr bool value = is_arithmetic<T>::value; };
template <> struct is_scalar<half> { static constexpr bool value = true; };
template <> struct is_scalar<bfloat> { static constexpr bool value = true; };
template <class T> constexpr bool is_scalar_v = is_scalar<typename remove_cvref<T>::type>::value;

// ---------------------------------------------------------------- vectors

template <class T, int N> struct vec;
template <class T> struct count_of { static constexpr int value = 1; };
template <class T, int N> struct count_of<vec<T, N>> { static constexpr int value = N; };

// swizzle is what v.xy turns into: a copy of the selected components that
// can also be assigned back (v.xy = ...).
template <class T, int N, int... I> struct swizzle : vec<T, sizeof...(I)> {
	vec<T, N>* src;
	swizzle(vec<T, N>* s) : src(s) {
		int k = 0;
		((this->el()[k++] = s->el()[I]), ...);
	}
	// Assigning one swizzle to another of the same shape (a.xy = b.xy) must
	// write through, not copy the proxy.
	swizzle& operator=(const swizzle& o) { return *this = static_cast<const vec<T, sizeof...(I)>&>(o); }
	swizzle& operator=(const vec<T, sizeof...(I)>& o) {
		int k = 0;
		((src->el()[I] = o.el()[k++]), ...);
		for (int j = 0; j < (int)sizeof...(I); j++) this->el()[j] = o.el()[j];
		return *this;
	}
	// v.xy += w and friends update v, not the proxy.
#define PETAL_SWASSIGN(op)                                                   \
	template <class U> swizzle& operator op##=(const U& o) {                 \
		return *this = static_cast<const vec<T, sizeof...(I)>&>(*this) op o; \
	}
	PETAL_SWASSIGN(+)
	PETAL_SWASSIGN(-)
	PETAL_SWASSIGN(*)
	PETAL_SWASSIGN(/)
#undef PETAL_SWASSIGN
};

template <class T, int N> struct vec : storage<T, N> {
	typedef T value_type;
	vec() = default;
	// A scalar broadcasts (implicitly, as in MSL).
	template <class S, class = enable_if_t<is_scalar_v<S>>> vec(S s) {
		for (int i = 0; i < N; i++) this->el()[i] = T(s);
	}
	// Element type conversion is explicit, as in MSL.
	template <class U, class = enable_if_t<!is_same<U, T>::value>> explicit vec(const vec<U, N>& o) {
		for (int i = 0; i < N; i++) this->el()[i] = T(o.el()[i]);
	}
	template <class A, class B, class... R> vec(const A& a, const B& b, const R&... r) {
		static_assert(count_of<A>::value + count_of<B>::value + (0 + ... + count_of<R>::value) == N,
		              "wrong number of vector components");
		int i = 0;
		put(i, a);
		put(i, b);
		(put(i, r), ...);
	}
	T& operator[](int i) { return this->el()[i]; }
	const T& operator[](int i) const { return this->el()[i]; }
	template <int... I> swizzle<T, N, I...> petal_swz() { return swizzle<T, N, I...>(this); }
	template <int... I> vec<T, sizeof...(I)> petal_swz() const { return vec<T, sizeof...(I)>(this->el()[I]...); }

  private:
	template <class S> void put(int& i, const S& s) {
		if constexpr (count_of<S>::value == 1) {
			this->el()[i++] = T(s);
		} else {
			for (int k = 0; k < count_of<S>::value; k++) this->el()[i++] = T(s.el()[k]);
		}
	}
	template <class U, int M> void put(int& i, const vec<U, M>& s) {
		for (int k = 0; k < M; k++) this->el()[i++] = T(s.el()[k]);
	}

  public:
#define PETAL_VASSIGN(op)                                                              \
	vec& operator op##=(const vec& o) {                                                \
		for (int i = 0; i < N; i++) this->el()[i] = T(this->el()[i] op o.el()[i]);     \
		return *this;                                                                  \
	}                                                                                  \
	template <class S, class = enable_if_t<is_scalar_v<S>>> vec& operator op##=(S s) { \
		for (int i = 0; i < N; i++) this->el()[i] = T(this->el()[i] op s);             \
		return *this;                                                                  \
	}
	PETAL_VASSIGN(+)
	PETAL_VASSIGN(-)
	PETAL_VASSIGN(*)
	PETAL_VASSIGN(/)
	PETAL_VASSIGN(%)
	PETAL_VASSIGN(&)
	PETAL_VASSIGN(|)
	PETAL_VASSIGN(^)
	PETAL_VASSIGN(<<)
	PETAL_VASSIGN(>>)
#undef PETAL_VASSIGN
};

#define PETAL_VBIN(op)                                                                        \
	template <class T, int N> vec<T, N> operator op(const vec<T, N>& a, const vec<T, N>& b) { \
		vec<T, N> r;                                                                          \
		for (int i = 0; i < N; i++) r.el()[i] = T(a.el()[i] op b.el()[i]);                    \
		return r;                                                                             \
	}                                                                                         \
	template <class T, int N, class S, class = enable_if_t<is_scalar_v<S>>>                   \
	vec<T, N> operator op(const vec<T, N>& a, S s) {                                          \
		vec<T, N> r;                                                                          \
		for (int i = 0; i < N; i++) r.el()[i] = T(a.el()[i] op T(s));                         \
		return r;                                                                             \
	}                                                                                         \
	template <class T, int N, class S, class = enable_if_t<is_scalar_v<S>>>                   \
	vec<T, N> operator op(S s, const vec<T, N>& a) {                                          \
		vec<T, N> r;                                                                          \
		for (int i = 0; i < N; i++) r.el()[i] = T(T(s) op a.el()[i]);                         \
		return r;                                                                             \
	}
PETAL_VBIN(+)
PETAL_VBIN(-)
PETAL_VBIN(*)
PETAL_VBIN(/)
PETAL_VBIN(%)
PETAL_VBIN(&)
PETAL_VBIN(|)
PETAL_VBIN(^)
PETAL_VBIN(<<)
PETAL_VBIN(>>)
#undef PETAL_VBIN

#define PETAL_VCMP(op)                                                                           \
	template <class T, int N> vec<bool, N> operator op(const vec<T, N>& a, const vec<T, N>& b) { \
		vec<bool, N> r;                                                                          \
		for (int i = 0; i < N; i++) r.el()[i] = a.el()[i] op b.el()[i];                          \
		return r;                                                                                \
	}                                                                                            \
	template <class T, int N, class S, class = enable_if_t<is_scalar_v<S>>>                      \
	vec<bool, N> operator op(const vec<T, N>& a, S s) {                                          \
		vec<bool, N> r;                                                                          \
		for (int i = 0; i < N; i++) r.el()[i] = a.el()[i] op T(s);                               \
		return r;                                                                                \
	}
PETAL_VCMP(==)
PETAL_VCMP(!=)
PETAL_VCMP(<)
PETAL_VCMP(<=)
PETAL_VCMP(>)
PETAL_VCMP(>=)
PETAL_VCMP(&&)
PETAL_VCMP(||)
#undef PETAL_VCMP

template <class T, int N> vec<T, N> operator-(const vec<T, N>& a) {
	vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = T(-a.el()[i]);
	return r;
}
template <class T, int N> vec<T, N> operator~(const vec<T, N>& a) {
	vec<T, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = T(~a.el()[i]);
	return r;
}
template <class T, int N> vec<bool, N> operator!(const vec<T, N>& a) {
	vec<bool, N> r;
	for (int i = 0; i < N; i++) r.el()[i] = !a.el()[i];
	return r;
}

// packed_vec is MSL's packed_floatN and friends: element alignment, no
// padding.
template <class T, int N> struct packed_vec : packed_storage<T, N> {
	packed_vec() = default;
	packed_vec(const vec<T, N>& o) {
		for (int i = 0; i < N; i++) this->el()[i] = o.el()[i];
	}
	template <class S, class = enable_if_t<is_scalar_v<S>>> packed_vec(S s) {
		for (int i = 0; i < N; i++) this->el()[i] = T(s);
	}
	template <class A, class B, class... R> packed_vec(const A& a, const B& b, const R&... r) : packed_vec(vec<T, N>(a, b, r...)) {}
	operator vec<T, N>() const {
		vec<T, N> o;
		for (int i = 0; i < N; i++) o.el()[i] = this->el()[i];
		return o;
	}
	T& operator[](int i) { return this->el()[i]; }
	const T& operator[](int i) const { return this->el()[i]; }
};

}  // namespace petal

// ---------------------------------------------------------------- MSL types

// PETAL_VEC_NAME(float2) is the name the type float2 is declared under: a
// driver whose compiler has its own float2 defines it to another name and
// maps the MSL names onto those.
#ifndef PETAL_VEC_NAME
#define PETAL_VEC_NAME(n) n
#endif
#define PETAL_VECS(T)                              \
	typedef petal::vec<T, 2> PETAL_VEC_NAME(T##2); \
	typedef petal::vec<T, 3> PETAL_VEC_NAME(T##3); \
	typedef petal::vec<T, 4> PETAL_VEC_NAME(T##4); \
	typedef petal::packed_vec<T, 2> packed_##T##2; \
	typedef petal::packed_vec<T, 3> packed_##T##3; \
	typedef petal::packed_vec<T, 4> packed_##T##4;
PETAL_VECS(float)
PETAL_VECS(half)
PETAL_VECS(bfloat)
PETAL_VECS(int)
PETAL_VECS(uint)
PETAL_VECS(short)
PETAL_VECS(ushort)
PETAL_VECS(char)
PETAL_VECS(uchar)
PETAL_VECS(bool)
PETAL_VECS(long)
PETAL_VECS(ulong)
#undef PETAL_VECS
