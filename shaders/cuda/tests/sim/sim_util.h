// What the drivers of the CPU simulation share: conversions between double
// and the kernels' element types, arrays with garbage around them, a seeded
// generator, the failure count, tolerances by dtype. Included after
// build.py's sim_kernels.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

inline int failures = 0;
inline std::mt19937 gen(12345);

template <class T> T cvt(double v);
template <> inline float cvt<float>(double v) { return float(v); }
template <> inline __half cvt<__half>(double v) { return __float2half_rn(float(v)); }
template <> inline __nv_bfloat16 cvt<__nv_bfloat16>(double v) { return __float2bfloat16_rn(float(v)); }
inline double back(float v) { return v; }
inline double back(__half v) { return __half2float(v); }
inline double back(__nv_bfloat16 v) { return __bfloat162float(v); }

// An aligned array of T with `pad` garbage elements before and after.
template <class T> struct Arr {
  std::vector<unsigned char> raw;
  T* p;
  size_t n;
  Arr(size_t n_, size_t pad = 8) : raw((n_ + 2 * pad) * sizeof(T) + 64), n(n_) {
    uintptr_t a = (reinterpret_cast<uintptr_t>(raw.data()) + 15) & ~uintptr_t(15);
    p = reinterpret_cast<T*>(a) + pad;
  }
  void random(double lo = -1, double hi = 1) { std::uniform_real_distribution<double> d(lo, hi); for (size_t i = 0; i < n; ++i) p[i] = cvt<T>(d(gen)); }
  void poison() { for (size_t i = 0; i < n; ++i) p[i] = cvt<T>(NAN); }
  double at(size_t i) const { return back(p[i]); }
};

// The tolerances of ts/testing.ts (TOL) by element type.
template <class T> double tol_of() { return sizeof(T) == 4 ? 1e-5 : std::is_same_v<T, __half> ? 1e-3 : 1e-2; }
inline u32 cdiv(u64 a, u64 b) { return u32((a + b - 1) / b); }
