// The library's 4-bit group-column engine (common.cuh qmv_gc, what
// quantized_mv_bf16_gc64_w<W> runs at one token) over the checkpoint's
// layout and over the weight repacked by (tile, round) units (qmv_gc's
// PACKED: the codes of a warp's round and its scale and bias pairs as 9
// contiguous 512-byte rows, bench/notes/qmv-pattern-2026-11-28.md), the same
// arithmetic on the same values: does the product gain what the bytes-only
// pattern gained (bench/qmv_pattern.cu's packed9)? MLX q4 g64, bf16 x,
// scales, biases and y, at the decode shapes; copies of the weight in turn
// so that none is in L2; both outputs against a float64 reference and
// against each other (the same bits expected).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -include shaders/cuda/common.cuh -include shaders/common.h \
//     -o /tmp/qmv_packed bench/qmv_packed.cu && /tmp/qmv_packed
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>
#include "harness.cuh"

namespace {
constexpr u32 GS = 64, V = GS / 16, UNIT = (2 * V + 1) * 32;  // 16-byte vectors a (tile, round) unit

template <u32 W, bool PACKED>
__global__ void __launch_bounds__(128, 4) gc64(const bf16* x, const unsigned char* w, const bf16* sc, const bf16* bi, bf16* y, u32 N, u32 K) {
  qmv_gc<bf16, bf16, bf16, GS, W, 0u, false, PACKED>(x, w, sc, bi, y, N, K, blockIdx.x);
}

uint16_t bf16_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
float bf16_float(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; memcpy(&f, &u, 4); return f; }

// The weight by (tile, round) units as qmv_gc's PACKED reads it: unit (tile,
// round rd) is UNIT vectors; vector v * 32 + lane (lane = 4 g + t, g0 = 8 rd
// + 2 t) holds, for v < V, bytes g0 * 32 + 16 v of row 16 tile + g's codes,
// for V <= v < 2 V those of row 16 tile + g + 8, and at v = 2 V the scale
// pairs of those two rows then their bias pairs (groups g0 low, g0 + 1
// high); zeros past the rows and groups.
std::vector<uint4> pack_units(const std::vector<uint8_t>& codes, const std::vector<uint16_t>& sc, const std::vector<uint16_t>& bi, u32 N, u32 K) {
  const u32 G = K / GS, R = (G + 7) / 8, tiles = (N + 15) / 16;
  std::vector<uint4> out(size_t(tiles) * R * UNIT, make_uint4(0, 0, 0, 0));
  auto pair = [&](const std::vector<uint16_t>& a, u32 row, u32 g0) {
    if (row >= N) return 0u;
    const u32 lo = g0 < G ? a[size_t(row) * G + g0] : 0u, hi = g0 + 1 < G ? a[size_t(row) * G + g0 + 1] : 0u;
    return lo | (hi << 16);
  };
  for (u32 tile = 0; tile < tiles; ++tile)
    for (u32 rd = 0; rd < R; ++rd) {
      uint4* u = out.data() + (size_t(tile) * R + rd) * UNIT;
      for (u32 lane = 0; lane < 32; ++lane) {
        const u32 g = lane >> 2, t = lane & 3, g0 = rd * 8 + 2 * t, ra = tile * 16 + g, rb = ra + 8;
        for (u32 v = 0; v < 2 * V; ++v) {
          const u32 row = v < V ? ra : rb, vv = v % V;
          if (row >= N || g0 + vv / (V / 2) >= G) continue;
          memcpy(&u[v * 32 + lane], codes.data() + size_t(row) * (K / 2) + g0 * (GS / 2) + vv * 16, 16);
        }
        u[2 * V * 32 + lane] = make_uint4(pair(sc, ra, g0), pair(sc, rb, g0), pair(bi, ra, g0), pair(bi, rb, g0));
      }
    }
  return out;
}
}  // namespace

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device %s, %d SMs\n", prop.name, sms);
  copy_ceiling_gbs();
  std::vector<DecodeShape> shapes(std::begin(DECODE_SHAPES), std::end(DECODE_SHAPES));
  shapes.push_back({"odd [1000, 5376]", 1000, 5376});
  // Whole waves at 4 blocks an SM on 132 SMs (W 2: 528 blocks, W 4: 1056),
  // against Qwen3.6 up's 544 / 1088 (1.03 / 2.06 waves).
  shapes.push_back({"Qwen3.6 up cut to whole waves [16896, 5120]", 16896, 5120});
  std::mt19937 rng(1234);
  for (const DecodeShape& s : shapes) {
    const u32 N = s.N, K = s.K, G = K / GS;
    std::vector<uint8_t> codes(size_t(N) * K / 2);
    std::vector<uint16_t> sc(size_t(N) * G), bi(size_t(N) * G), xb(K);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto& c : codes) c = uint8_t(byte(rng));
    for (auto& v : sc) v = bf16_bits(0.002f + 0.02f * std::fabs(uni(rng)));
    for (auto& v : bi) v = bf16_bits(0.1f * uni(rng));
    for (auto& v : xb) v = bf16_bits(uni(rng));
    const std::vector<uint4> packed = pack_units(codes, sc, bi, N, K);
    // float64 reference and the scale of its terms (the tests' tolerance: 1e-2 of sum |x w|).
    std::vector<double> ref(N), mag(N);
    for (u32 r = 0; r < N; ++r) {
      double acc = 0, m = 0;
      for (u32 k = 0; k < K; ++k) {
        const uint8_t b = codes[size_t(r) * (K / 2) + k / 2];
        const u32 q = (k & 1) ? (b >> 4) : (b & 15);
        const double wv = double(bf16_float(sc[size_t(r) * G + k / GS])) * q + bf16_float(bi[size_t(r) * G + k / GS]);
        acc += wv * bf16_float(xb[k]);
        m += std::fabs(wv * bf16_float(xb[k]));
      }
      ref[r] = acc;
      mag[r] = m;
    }
    const double bytes = double(codes.size()) + 4.0 * sc.size();
    const int copies = int(std::max<double>(2, (400.0 * (1 << 20)) / bytes + 1));
    std::vector<unsigned char*> Wc(copies), Wp(copies);
    std::vector<bf16*> S(copies), B(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&Wc[c], codes.size())); CK(cudaMalloc(&S[c], 2 * sc.size())); CK(cudaMalloc(&B[c], 2 * bi.size()));
      CK(cudaMalloc(&Wp[c], packed.size() * 16));
      CK(cudaMemcpy(Wc[c], codes.data(), codes.size(), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(S[c], sc.data(), 2 * sc.size(), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(B[c], bi.data(), 2 * bi.size(), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(Wp[c], packed.data(), packed.size() * 16, cudaMemcpyHostToDevice));
    }
    bf16 *x, *y;
    CK(cudaMalloc(&x, 2 * K)); CK(cudaMalloc(&y, 2 * N));
    CK(cudaMemcpy(x, xb.data(), 2 * K, cudaMemcpyHostToDevice));
    printf("\n%s: %.2f MB (codes, scales, biases; packed %.2f MB), %d copies\n", s.name, bytes / 1e6, packed.size() * 16 / 1e6, copies);
    // Each W's checkpoint-layout output, which the packed form must give bit for bit.
    std::vector<uint16_t> first[5];
    auto run = [&](auto kern, const char* form, u32 W, bool pk) {
      const u32 shared = [&] { const u32 r = (K / GS + 7) / 8; return r * 8 * GS * 2 + r * 8 * 4 + 1024; }();
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
      const u32 blocks = ((N + 15) / 16 * W + 3) / 4;
      int c = 0;
      std::vector<uint16_t> out(N);
      CK(cudaMemset(y, 0xff, 2 * N));  // NaN-poisoned
      kern<<<blocks, 128, shared>>>(x, pk ? Wp[0] : Wc[0], S[0], B[0], y, N, K);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(out.data(), y, 2 * N, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (u32 r = 0; r < N; ++r) {
        const double e = std::fabs(double(bf16_float(out[r])) - ref[r]) / (mag[r] + 1e-30);
        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
      }
      const bool same = first[W].empty() || first[W] == out;
      if (first[W].empty()) first[W] = out;
      const float us = timeit([&] {
        kern<<<blocks, 128, shared>>>(x, pk ? Wp[c] : Wc[c], S[c], B[c], y, N, K);
        c = (c + 1) % copies;
      }, 40);
      CK(cudaGetLastError());
      printf("  %-28s %8.2f us  %6.0f GB/s  err %.1e of sum|xw| %s  %s\n", form, us, bytes / us / 1e3, worst, worst < 1e-2 ? "ok" : "BAD",
             same ? "same bits" : "OTHER BITS");
    };
    run(gc64<2, false>, "checkpoint layout, W 2", 2, false);
    run(gc64<4, false>, "checkpoint layout, W 4", 4, false);
    run(gc64<2, true>, "packed, W 2", 2, true);
    run(gc64<4, true>, "packed, W 4", 4, true);
    for (int c = 0; c < copies; ++c) { CK(cudaFree(Wc[c])); CK(cudaFree(Wp[c])); CK(cudaFree(S[c])); CK(cudaFree(B[c])); }
    CK(cudaFree(x)); CK(cudaFree(y));
  }
  return 0;
}
