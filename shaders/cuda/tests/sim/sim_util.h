// What the drivers of the CPU simulation share: conversions between double
// and the kernels' element types, arrays with garbage around them, a seeded
// generator, the failure count, tolerances by dtype, MLX's affine packing.
// Included after build.py's sim_kernels.h.
#pragma once
#include <cmath>
#include <cstring>
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

// Bytes of a row of K values `bits` wide, as MLX packs them (6 bits: 3 bytes per 4 values).
inline u64 row_bytes(u32 K, u32 bits) { return bits == 6 ? 3ull * ((K + 3) / 4) : 4ull * ((u64(K) * bits + 31) / 32); }
// Random q [rows, K] below 2^bits, packed into w (rows of rb bytes) as MLX packs them: value k of a row at bit k * bits.
inline void random_packed(std::vector<u32>& q, unsigned char* w, u32 rows, u32 K, u32 bits, u64 rb) {
  q.resize(size_t(rows) * K);
  std::uniform_int_distribution<u32> qd(0, (1u << bits) - 1);
  std::memset(w, 0, rows * rb);
  for (u32 j = 0; j < rows; ++j)
    for (u32 k = 0; k < K; ++k) {
      const u32 v = q[size_t(j) * K + k] = qd(gen);
      for (u32 b = 0; b < bits; ++b)
        if ((v >> b) & 1u) w[j * rb + (u64(k) * bits + b) / 8] |= (unsigned char)(1u << ((u64(k) * bits + b) % 8));
    }
}
