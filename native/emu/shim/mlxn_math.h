// The MSL math, integer, relational and geometric functions on the CPU, for
// scalars (float, half, bfloat, integers) and component-wise for vectors.
// half and bfloat functions compute in float and round the result once, the
// precision MSL specifies for them. precise:: and fast:: name the same
// functions (the emulator always computes the precise result).
//
// No C math header is included: its global float overloads would make
// unqualified calls under `using namespace metal` ambiguous. The functions
// use the compiler builtins instead.
#ifndef MLXN_MATH_H
#define MLXN_MATH_H

#include "mlxn_vec.h"

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#define HUGE_VALF (__builtin_huge_valf())
#define MAXFLOAT (__FLT_MAX__)
#define FLT_MAX (__FLT_MAX__)
#define FLT_MIN (__FLT_MIN__)
#define FLT_EPSILON (__FLT_EPSILON__)
#define FLT_DIG 6
#define FLT_MANT_DIG 24
#define FLT_MAX_EXP 128
#define FLT_MIN_EXP (-125)
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)6.103515625e-05f)
#define HALF_EPSILON ((half)0.0009765625f)
#define BFLOAT_MAX ((bfloat)3.38953139e38f)
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define CHAR_MAX SCHAR_MAX
#define CHAR_MIN SCHAR_MIN
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-9223372036854775807L - 1)
#define ULONG_MAX 18446744073709551615UL
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H ((half)M_E_F)
#define M_LOG2E_H ((half)M_LOG2E_F)
#define M_LN2_H ((half)M_LN2_F)
#define M_PI_H ((half)M_PI_F)
#define M_SQRT2_H ((half)M_SQRT2_F)

namespace metal {

// Value type of an operand: swizzle proxies become vectors.
template <class X>
using val_t = std::conditional_t<vecish<X>, vec<typename vinfo_t<X>::elem, ncomp<X>>,
                                 std::remove_cvref_t<X>>;

// Common scalar type of two scalar arguments: a floating argument wins over an
// integer one (max(x, 0) is a float max), otherwise C++'s usual rules.
template <class A, class B> struct scommon {
  using a = std::remove_cvref_t<A>;
  using b = std::remove_cvref_t<B>;
  using type = std::conditional_t<
      std::is_same_v<a, b>, a,
      std::conditional_t<mlxn::is_float_scalar<a> && !mlxn::is_float_scalar<b>, a,
                         std::conditional_t<mlxn::is_float_scalar<b> && !mlxn::is_float_scalar<a>, b,
                                            std::common_type_t<a, b>>>>;
};

// Element type and width for component-wise functions of several operands.
template <class... X> struct nres;
template <class A> struct nres<A> {
  static constexpr int n = ncomp<A>;
  static constexpr bool is_vec = vecish<A>;
  using elem = typename vinfo_t<A>::elem;
};
template <class A, class... R> struct nres<A, R...> {
  using rest = nres<R...>;
  static constexpr bool is_vec = vecish<A> || rest::is_vec;
  static constexpr int n = vecish<A> ? ncomp<A> : rest::n;
  using elem = std::conditional_t<
      vecish<A>, typename vinfo_t<A>::elem,
      std::conditional_t<rest::is_vec, typename rest::elem,
                         typename scommon<typename vinfo_t<A>::elem, typename rest::elem>::type>>;
};

namespace detail {
template <class T> inline T from_f(float f) { return T(f); }
inline float ff(float x) { return x; }

#define MLXN_F1(name, expr)                                                          \
  template <class T> requires mlxn::is_float_scalar<T>                               \
  inline T name##_s(T tx) {                                                          \
    float x = float(tx);                                                             \
    return T(expr);                                                                  \
  }
MLXN_F1(exp, __builtin_expf(x))
MLXN_F1(exp2, __builtin_exp2f(x))
MLXN_F1(exp10, __builtin_powf(10.0f, x))
MLXN_F1(expm1, __builtin_expm1f(x))
MLXN_F1(log, __builtin_logf(x))
MLXN_F1(log2, __builtin_log2f(x))
MLXN_F1(log10, __builtin_log10f(x))
MLXN_F1(log1p, __builtin_log1pf(x))
MLXN_F1(sqrt, __builtin_sqrtf(x))
MLXN_F1(rsqrt, 1.0f / __builtin_sqrtf(x))
MLXN_F1(cbrt, __builtin_cbrtf(x))
MLXN_F1(sin, __builtin_sinf(x))
MLXN_F1(cos, __builtin_cosf(x))
MLXN_F1(tan, __builtin_tanf(x))
MLXN_F1(asin, __builtin_asinf(x))
MLXN_F1(acos, __builtin_acosf(x))
MLXN_F1(atan, __builtin_atanf(x))
MLXN_F1(sinh, __builtin_sinhf(x))
MLXN_F1(cosh, __builtin_coshf(x))
MLXN_F1(tanh, __builtin_tanhf(x))
MLXN_F1(asinh, __builtin_asinhf(x))
MLXN_F1(acosh, __builtin_acoshf(x))
MLXN_F1(atanh, __builtin_atanhf(x))
MLXN_F1(sinpi, __builtin_sinf(x * M_PI_F))
MLXN_F1(cospi, __builtin_cosf(x * M_PI_F))
MLXN_F1(tanpi, __builtin_tanf(x * M_PI_F))
MLXN_F1(erf, __builtin_erff(x))
MLXN_F1(erfc, __builtin_erfcf(x))
MLXN_F1(floor, __builtin_floorf(x))
MLXN_F1(ceil, __builtin_ceilf(x))
MLXN_F1(round, __builtin_roundf(x))
MLXN_F1(rint, __builtin_rintf(x))
MLXN_F1(trunc, __builtin_truncf(x))
MLXN_F1(fabs, __builtin_fabsf(x))
MLXN_F1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f))
MLXN_F1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
MLXN_F1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : x)))
MLXN_F1(recip, 1.0f / x)
#undef MLXN_F1

#define MLXN_F2(name, expr)                                                          \
  template <class T> requires mlxn::is_float_scalar<T>                               \
  inline T name##_s(T tx, T ty) {                                                    \
    float x = float(tx), y = float(ty);                                              \
    return T(expr);                                                                  \
  }
MLXN_F2(pow, __builtin_powf(x, y))
MLXN_F2(powr, __builtin_powf(x, y))
MLXN_F2(atan2, __builtin_atan2f(x, y))
MLXN_F2(fmod, __builtin_fmodf(x, y))
MLXN_F2(fmin, __builtin_fminf(x, y))
MLXN_F2(fmax, __builtin_fmaxf(x, y))
MLXN_F2(fdim, __builtin_fdimf(x, y))
MLXN_F2(hypot, __builtin_hypotf(x, y))
MLXN_F2(copysign, __builtin_copysignf(x, y))
MLXN_F2(step, y < x ? 0.0f : 1.0f)
MLXN_F2(divide, x / y)
MLXN_F2(nextafter, __builtin_nextafterf(x, y))
#undef MLXN_F2

// fma rounds once; for half and bfloat the float fma of the widened operands
// is exact before the final rounding except in rare double-rounding cases.
template <class T> requires mlxn::is_float_scalar<T>
inline T fma_s(T a, T b, T c) { return T(__builtin_fmaf(float(a), float(b), float(c))); }
template <class T> requires mlxn::is_float_scalar<T>
inline T mix_s(T x, T y, T a) { return T(float(x) + (float(y) - float(x)) * float(a)); }
template <class T> requires mlxn::is_float_scalar<T>
inline T smoothstep_s(T e0, T e1, T x) {
  float t = __builtin_fminf(__builtin_fmaxf((float(x) - float(e0)) / (float(e1) - float(e0)), 0.0f), 1.0f);
  return T(t * t * (3.0f - 2.0f * t));
}

// Integer and generic scalar functions.
template <class T> inline T min_s(T a, T b) {
  if constexpr (mlxn::is_float_scalar<T>) return T(__builtin_fminf(float(a), float(b)));
  else return b < a ? b : a;
}
template <class T> inline T max_s(T a, T b) {
  if constexpr (mlxn::is_float_scalar<T>) return T(__builtin_fmaxf(float(a), float(b)));
  else return a < b ? b : a;
}
template <class T> inline T clamp_s(T x, T lo, T hi) { return min_s(max_s(x, lo), hi); }
template <class T> inline T abs_s(T x) {
  if constexpr (mlxn::is_float_scalar<T>) return T(__builtin_fabsf(float(x)));
  else if constexpr (std::is_signed_v<T>) return T(x < 0 ? -x : x);
  else return x;
}
template <class T> inline T absdiff_s(T a, T b) { return a > b ? T(a - b) : T(b - a); }
template <class T> inline T clz_s(T x) {
  using U = std::make_unsigned_t<T>;
  U u = U(x);
  if (u == 0) return T(sizeof(T) * 8);
  if constexpr (sizeof(T) == 8) return T(__builtin_clzll(u));
  else return T(__builtin_clz(uint32_t(u)) - (32 - int(sizeof(T)) * 8));
}
template <class T> inline T ctz_s(T x) {
  using U = std::make_unsigned_t<T>;
  U u = U(x);
  if (u == 0) return T(sizeof(T) * 8);
  if constexpr (sizeof(T) == 8) return T(__builtin_ctzll(u));
  else return T(__builtin_ctz(uint32_t(u)));
}
template <class T> inline T popcount_s(T x) {
  using U = std::make_unsigned_t<T>;
  if constexpr (sizeof(T) == 8) return T(__builtin_popcountll(U(x)));
  else return T(__builtin_popcount(uint32_t(U(x))));
}
template <class T> inline T reverse_bits_s(T x) {
  using U = std::make_unsigned_t<T>;
  U u = U(x), r = 0;
  for (unsigned i = 0; i < sizeof(T) * 8; ++i) r = U((r << 1) | ((u >> i) & 1u));
  return T(r);
}
template <class T> inline T mulhi_s(T a, T b) {
  if constexpr (sizeof(T) == 8) {
    if constexpr (std::is_signed_v<T>) return T((__int128(a) * __int128(b)) >> 64);
    else return T((unsigned __int128)(a) * (unsigned __int128)(b) >> 64);
  } else {
    constexpr int bits = int(sizeof(T)) * 8;
    if constexpr (std::is_signed_v<T>) return T((int64_t(a) * int64_t(b)) >> bits);
    else return T((uint64_t(a) * uint64_t(b)) >> bits);
  }
}
template <class T> inline T rotate_s(T v, T i) {
  using U = std::make_unsigned_t<T>;
  constexpr unsigned bits = sizeof(T) * 8;
  unsigned s = unsigned(U(i)) % bits;
  U u = U(v);
  return T(s == 0 ? u : U((u << s) | (u >> (bits - s))));
}
template <class T> inline T madhi_s(T a, T b, T c) { return T(mulhi_s(a, b) + c); }
template <class T> inline T hadd_s(T a, T b) { return T((int64_t(a) + int64_t(b)) >> 1); }
template <class T> inline T rhadd_s(T a, T b) { return T((int64_t(a) + int64_t(b) + 1) >> 1); }
}  // namespace detail

// Component-wise application of a scalar function to operands (scalars are
// broadcast, vectors must have one width).
#define MLXN_WRAP1(name, constraint)                                                 \
  template <class X> requires(operand<X> && constraint<typename vinfo_t<X>::elem>)   \
  inline auto name(const X& x) {                                                     \
    using E = typename vinfo_t<X>::elem;                                             \
    if constexpr (vecish<X>) {                                                       \
      vec<E, ncomp<X>> r;                                                            \
      for (int i = 0; i < ncomp<X>; ++i) r.data[i] = detail::name##_s<E>(x.get(i));  \
      return r;                                                                      \
    } else {                                                                         \
      return detail::name##_s<E>(x);                                                 \
    }                                                                                \
  }
#define MLXN_WRAP2(name, constraint)                                                 \
  template <class A, class B>                                                        \
    requires(operand<A> && operand<B> && constraint<typename nres<A, B>::elem>)      \
  inline auto name(const A& a, const B& b) {                                         \
    using R = nres<A, B>;                                                            \
    using E = typename R::elem;                                                      \
    if constexpr (R::is_vec) {                                                       \
      vec<E, R::n> r;                                                                \
      for (int i = 0; i < R::n; ++i) r.data[i] = detail::name##_s<E>(E(comp(a, i)), E(comp(b, i))); \
      return r;                                                                      \
    } else {                                                                         \
      return detail::name##_s<E>(E(a), E(b));                                        \
    }                                                                                \
  }
#define MLXN_WRAP3(name, constraint)                                                 \
  template <class A, class B, class C>                                               \
    requires(operand<A> && operand<B> && operand<C> &&                               \
             constraint<typename nres<A, B, C>::elem>)                               \
  inline auto name(const A& a, const B& b, const C& c) {                             \
    using R = nres<A, B, C>;                                                         \
    using E = typename R::elem;                                                      \
    if constexpr (R::is_vec) {                                                       \
      vec<E, R::n> r;                                                                \
      for (int i = 0; i < R::n; ++i)                                                 \
        r.data[i] = detail::name##_s<E>(E(comp(a, i)), E(comp(b, i)), E(comp(c, i))); \
      return r;                                                                      \
    } else {                                                                         \
      return detail::name##_s<E>(E(a), E(b), E(c));                                 \
    }                                                                                \
  }

template <class T> concept floating = mlxn::is_float_scalar<T>;
template <class T> concept integral = std::is_integral_v<T>;
template <class T> concept arith = mlxn::is_scalar<T>;

MLXN_WRAP1(exp, floating)
MLXN_WRAP1(exp2, floating)
MLXN_WRAP1(exp10, floating)
MLXN_WRAP1(expm1, floating)
MLXN_WRAP1(log, floating)
MLXN_WRAP1(log2, floating)
MLXN_WRAP1(log10, floating)
MLXN_WRAP1(log1p, floating)
MLXN_WRAP1(sqrt, floating)
MLXN_WRAP1(rsqrt, floating)
MLXN_WRAP1(cbrt, floating)
MLXN_WRAP1(sin, floating)
MLXN_WRAP1(cos, floating)
MLXN_WRAP1(tan, floating)
MLXN_WRAP1(asin, floating)
MLXN_WRAP1(acos, floating)
MLXN_WRAP1(atan, floating)
MLXN_WRAP1(sinh, floating)
MLXN_WRAP1(cosh, floating)
MLXN_WRAP1(tanh, floating)
MLXN_WRAP1(asinh, floating)
MLXN_WRAP1(acosh, floating)
MLXN_WRAP1(atanh, floating)
MLXN_WRAP1(sinpi, floating)
MLXN_WRAP1(cospi, floating)
MLXN_WRAP1(tanpi, floating)
MLXN_WRAP1(erf, floating)
MLXN_WRAP1(erfc, floating)
MLXN_WRAP1(floor, floating)
MLXN_WRAP1(ceil, floating)
MLXN_WRAP1(round, floating)
MLXN_WRAP1(rint, floating)
MLXN_WRAP1(trunc, floating)
MLXN_WRAP1(fabs, floating)
MLXN_WRAP1(fract, floating)
MLXN_WRAP1(saturate, floating)
MLXN_WRAP1(sign, floating)
MLXN_WRAP1(recip, floating)
MLXN_WRAP1(abs, arith)
MLXN_WRAP1(clz, integral)
MLXN_WRAP1(ctz, integral)
MLXN_WRAP1(popcount, integral)
MLXN_WRAP1(reverse_bits, integral)
MLXN_WRAP2(pow, floating)
MLXN_WRAP2(powr, floating)
MLXN_WRAP2(atan2, floating)
MLXN_WRAP2(fmod, floating)
MLXN_WRAP2(fmin, floating)
MLXN_WRAP2(fmax, floating)
MLXN_WRAP2(fdim, floating)
MLXN_WRAP2(hypot, floating)
MLXN_WRAP2(copysign, floating)
MLXN_WRAP2(step, floating)
MLXN_WRAP2(divide, floating)
MLXN_WRAP2(nextafter, floating)
MLXN_WRAP2(min, arith)
MLXN_WRAP2(max, arith)
MLXN_WRAP2(absdiff, integral)
MLXN_WRAP2(mulhi, integral)
MLXN_WRAP2(rotate, integral)
MLXN_WRAP2(hadd, integral)
MLXN_WRAP2(rhadd, integral)
MLXN_WRAP3(fma, floating)
MLXN_WRAP3(mix, floating)
MLXN_WRAP3(smoothstep, floating)
MLXN_WRAP3(clamp, arith)
MLXN_WRAP3(madhi, integral)
#undef MLXN_WRAP1
#undef MLXN_WRAP2
#undef MLXN_WRAP3

template <class A, class B, class C> inline auto mad(const A& a, const B& b, const C& c) { return fma(a, b, c); }
template <class A, class B> inline auto fmin3(const A& a, const B& b, const B& c) { return fmin(fmin(a, b), c); }
template <class A, class B, class C> inline auto min3(const A& a, const B& b, const C& c) { return min(min(a, b), c); }
template <class A, class B, class C> inline auto max3(const A& a, const B& b, const C& c) { return max(max(a, b), c); }
template <class A, class B, class C> inline auto median3(const A& a, const B& b, const C& c) {
  return max(min(a, b), min(max(a, b), c));
}
template <class X> requires operand<X>
inline auto sincos(const X& x, val_t<X>& cosval) {
  cosval = cos(x);
  return sin(x);
}

// Floating classification: bool for scalars, bool vectors for vectors.
#define MLXN_CLASSIFY(name, expr)                                                    \
  template <class X> requires(operand<X> && floating<typename vinfo_t<X>::elem>)     \
  inline auto name(const X& xx) {                                                    \
    if constexpr (vecish<X>) {                                                       \
      vec<bool, ncomp<X>> r;                                                         \
      for (int i = 0; i < ncomp<X>; ++i) {                                           \
        float x = float(xx.get(i));                                                  \
        r.data[i] = (expr);                                                          \
      }                                                                              \
      return r;                                                                      \
    } else {                                                                         \
      float x = float(xx);                                                           \
      return bool(expr);                                                             \
    }                                                                                \
  }
MLXN_CLASSIFY(isnan, __builtin_isnan(x))
MLXN_CLASSIFY(isinf, __builtin_isinf(x))
MLXN_CLASSIFY(isfinite, __builtin_isfinite(x))
MLXN_CLASSIFY(isnormal, __builtin_isnormal(x))
MLXN_CLASSIFY(signbit, __builtin_signbit(x))
#undef MLXN_CLASSIFY

template <class A, class B> inline auto isordered(const A& a, const B& b) { return !isnan(a) && !isnan(b); }
template <class A, class B> inline auto isunordered(const A& a, const B& b) { return isnan(a) || isnan(b); }

// Relational.
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <class X> requires vecish<X>
inline bool all(const X& x) {
  for (int i = 0; i < ncomp<X>; ++i)
    if (!x.get(i)) return false;
  return true;
}
template <class X> requires vecish<X>
inline bool any(const X& x) {
  for (int i = 0; i < ncomp<X>; ++i)
    if (x.get(i)) return true;
  return false;
}
// select(a, b, c): c ? b : a, per component.
template <class A, class B, class C> requires(operand<A> && operand<B> && operand<C>)
inline auto select(const A& a, const B& b, const C& c) {
  using R = nres<A, B>;
  using E = typename R::elem;
  if constexpr (R::is_vec || vecish<C>) {
    constexpr int n = R::is_vec ? R::n : ncomp<C>;
    vec<E, n> r;
    for (int i = 0; i < n; ++i) r.data[i] = comp(c, i) ? E(comp(b, i)) : E(comp(a, i));
    return r;
  } else {
    return c ? E(b) : E(a);
  }
}

// Geometric.
template <class A, class B> requires(vecish<A> && vecish<B>)
inline auto dot(const A& a, const B& b) {
  using E = typename nres<A, B>::elem;
  if constexpr (mlxn::is_float_scalar<E>) {
    float s = 0.0f;
    for (int i = 0; i < ncomp<A>; ++i) s += float(a.get(i)) * float(b.get(i));
    return E(s);
  } else {
    E s = 0;
    for (int i = 0; i < ncomp<A>; ++i) s += E(a.get(i) * b.get(i));
    return s;
  }
}
template <class A> requires vecish<A>
inline auto length_squared(const A& a) { return dot(a, a); }
template <class A> requires vecish<A>
inline auto length(const A& a) { return sqrt(dot(a, a)); }
template <class A> requires scalarish<A>
inline auto length(const A& a) { return abs(a); }
template <class A, class B> inline auto distance(const A& a, const B& b) { return length(a - b); }
template <class A> requires vecish<A>
inline auto normalize(const A& a) {
  using E = typename vinfo_t<A>::elem;
  return val_t<A>(a) * E(rsqrt(dot(a, a)));
}
template <class A, class B> requires(vecish<A> && vecish<B> && ncomp<A> == 3)
inline auto cross(const A& a, const B& b) {
  using E = typename vinfo_t<A>::elem;
  return vec<E, 3>(a.get(1) * b.get(2) - a.get(2) * b.get(1), a.get(2) * b.get(0) - a.get(0) * b.get(2),
                   a.get(0) * b.get(1) - a.get(1) * b.get(0));
}

// as_type: reinterpretation of the bits between types of one size.
template <class T, class X> inline T as_type(const X& x) {
  using V = val_t<X>;
  V v = x;
  static_assert(sizeof(T) == sizeof(V), "as_type between types of different sizes");
  T r;
  __builtin_memcpy((void*)&r, (const void*)&v, sizeof(T));
  return r;
}

// numeric_limits for the MSL scalar types.
template <class T> struct numeric_limits {
  static constexpr bool is_specialized = false;
};
#define MLXN_LIMITS(T, lo, hi, lowest_, eps, inf, qnan, dig)                         \
  template <> struct numeric_limits<T> {                                             \
    static constexpr bool is_specialized = true;                                     \
    static constexpr bool is_signed = T(-1) < T(0);                                  \
    static constexpr bool is_integer = std::is_integral_v<T>;                        \
    static constexpr int digits = dig;                                               \
    static T min() { return lo; }                                                    \
    static T max() { return hi; }                                                    \
    static T lowest() { return lowest_; }                                            \
    static T epsilon() { return eps; }                                               \
    static T infinity() { return inf; }                                              \
    static T quiet_NaN() { return qnan; }                                            \
  };
MLXN_LIMITS(float, __FLT_MIN__, __FLT_MAX__, -__FLT_MAX__, __FLT_EPSILON__, __builtin_inff(), __builtin_nanf(""), 24)
MLXN_LIMITS(half, half(6.103515625e-05f), half(65504.0f), half(-65504.0f), half(0.0009765625f), half(__builtin_inff()), half(__builtin_nanf("")), 11)
MLXN_LIMITS(bfloat, bfloat(1.17549435e-38f), bfloat(3.38953139e38f), bfloat(-3.38953139e38f), bfloat(0.0078125f), bfloat(__builtin_inff()), bfloat(__builtin_nanf("")), 8)
MLXN_LIMITS(bool, false, true, false, false, false, false, 1)
MLXN_LIMITS(char, char(-128), char(127), char(-128), 0, 0, 0, 7)
MLXN_LIMITS(uchar, 0, 255, 0, 0, 0, 0, 8)
MLXN_LIMITS(short, short(-32768), short(32767), short(-32768), 0, 0, 0, 15)
MLXN_LIMITS(ushort, 0, 65535, 0, 0, 0, 0, 16)
MLXN_LIMITS(int, int(-2147483647 - 1), 2147483647, int(-2147483647 - 1), 0, 0, 0, 31)
MLXN_LIMITS(uint, 0u, 4294967295u, 0u, 0u, 0u, 0u, 32)
MLXN_LIMITS(long, long(-9223372036854775807L - 1), 9223372036854775807L, long(-9223372036854775807L - 1), 0, 0, 0, 63)
MLXN_LIMITS(ulong, 0ul, 18446744073709551615ul, 0ul, 0ul, 0ul, 0ul, 64)
#undef MLXN_LIMITS

namespace precise {
using metal::acos;
using metal::acosh;
using metal::asin;
using metal::asinh;
using metal::atan;
using metal::atan2;
using metal::atanh;
using metal::ceil;
using metal::cos;
using metal::cosh;
using metal::cospi;
using metal::divide;
using metal::exp;
using metal::exp10;
using metal::exp2;
using metal::fabs;
using metal::floor;
using metal::fmax;
using metal::fmin;
using metal::fmod;
using metal::fract;
using metal::log;
using metal::log10;
using metal::log2;
using metal::normalize;
using metal::length;
using metal::distance;
using metal::pow;
using metal::powr;
using metal::rint;
using metal::round;
using metal::rsqrt;
using metal::sin;
using metal::sincos;
using metal::sinh;
using metal::sinpi;
using metal::sqrt;
using metal::tan;
using metal::tanh;
using metal::tanpi;
using metal::trunc;
using metal::max;
using metal::min;
using metal::clamp;
using metal::saturate;
using metal::step;
using metal::sign;
}  // namespace precise
namespace fast = precise;

}  // namespace metal

#endif
