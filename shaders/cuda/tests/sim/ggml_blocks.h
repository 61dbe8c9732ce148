// What the drivers of the GGUF families share (quantized_matmul_ggml_driver.cpp,
// quantized_matmul_id_ggml_driver.cpp): the formats' block sizes, random
// blocks, a float64 dequantization written from the layouts
// (ts/ops/quantized_matmul_ggml.ts), the report line. Included after
// sim_util.h.
#pragma once
#include <string>

enum Fmt { Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };
const char* fmt_name(int f) { return f == Q4_0 ? "Q4_0" : f == Q8_0 ? "Q8_0" : f == Q4_K ? "Q4_K" : f == Q5_K ? "Q5_K" : "Q6_K"; }
u32 qk_of(int f) { return f == Q4_0 || f == Q8_0 ? 32 : 256; }
u32 bytes_of(int f) { return f == Q4_0 ? 18 : f == Q8_0 ? 34 : f == Q4_K ? 144 : f == Q5_K ? 176 : 210; }

double h16(const unsigned char* p) {
  const __half h = __ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8)));
  return __half2float(h);
}
void put_f16(unsigned char* p, double v) {
  const unsigned short h = __half_as_ushort(__float2half_rn(float(v)));
  p[0] = h & 0xff;
  p[1] = h >> 8;
}

// Random blocks: random bytes, the f16 scale fields small and positive.
void random_blocks(int f, unsigned char* b, size_t nblocks) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<double> d(0.001, 0.02);
  for (size_t i = 0; i < nblocks * bytes_of(f); ++i) b[i] = (unsigned char)byte(gen);
  for (size_t i = 0; i < nblocks; ++i) {
    unsigned char* p = b + i * bytes_of(f);
    if (f == Q6_K) put_f16(p + 208, d(gen));
    else put_f16(p, d(gen));
    if (f == Q4_K || f == Q5_K) put_f16(p + 2, d(gen));
  }
}

void scale_min(const unsigned char* s, int j, int& sc, int& m) {
  if (j < 4) { sc = s[j] & 63; m = s[j + 4] & 63; }
  else { sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4); m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}

// Value v of block b, from the layouts.
double value(int f, const unsigned char* b, u32 v) {
  switch (f) {
    case Q4_0: return h16(b) * (((b[2 + v % 16] >> (4 * (v / 16))) & 15) - 8);
    case Q8_0: return h16(b) * double(static_cast<signed char>(b[2 + v]));
    case Q4_K:
    case Q5_K: {
      const u32 s = v / 32, l = v % 32;
      int sc, m;
      scale_min(b + 4, s, sc, m);
      const unsigned char* qs = b + (f == Q5_K ? 48 : 16);
      int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
      if (f == Q5_K) q |= ((b[16 + l] >> s) & 1) << 4;
      return h16(b) * sc * q - h16(b + 2) * m;
    }
    default: {
      const u32 h = v / 128, p = (v / 32) % 4, l = v % 32;
      const int lo = (b[64 * h + 32 * (p % 2) + l] >> (4 * (p / 2))) & 15;
      const int hi = (b[128 + 32 * h + l] >> (2 * p)) & 3;
      return h16(b + 208) * double(static_cast<signed char>(b[192 + v / 16])) * ((lo | (hi << 4)) - 32);
    }
  }
}
// Value k of row j of a tensor of rows rb bytes apart.
double wat(int f, const unsigned char* w, u64 rb, u32 j, u32 k) {
  return value(f, w + j * rb + (k / qk_of(f)) * bytes_of(f), k % qk_of(f));
}

void report(bool ok, const std::string& what, double err, double tol) {
  if (!ok) failures++;
  std::printf("%s %-66s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), err, tol);
}
