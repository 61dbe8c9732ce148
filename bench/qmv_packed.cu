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

// The engine's rounds as a stream (no waves of tiles): a persistent grid of
// 4-warp blocks, warp gw taking the packed weight's (tile, round) units gw,
// gw + nw, ... (nw warps in all), D in flight; each unit's 16 row sums go to
// partials[tile][round]; the warp that completes a tile's last round (a
// counter a tile, after a fence) adds the tile's R partials in round order,
// stores y and sets the counter back to 0 for the next launch.
template <u32 D>
__global__ void __launch_bounds__(128, 4) gc64_stream(const bf16* x, const uint4* w, bf16* y, float* partials, u32* counters, u32 N, u32 K) {
  const GcShared sh = gc_stage<bf16, bf16, GS>(x, K);
  const u32 G = K / GS, R = (G + 7) / 8, tiles = (N + 15) / 16, units = tiles * R;
  const u32 lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const u32 nw = gridDim.x * 4, gw = blockIdx.x * 4 + (threadIdx.x >> 5);
  const u32 count = gw < units ? (units - gw + nw - 1) / nw : 0;
  uint4 qa[D][V], qb[D][V];
  u32 sp[D][2], bp[D][2];
  auto issue = [&](u32 s, u32 j) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint4* r = w + u64(gw + j * nw) * UNIT + lane;
#pragma unroll
    for (u32 v = 0; v < V; ++v) {
      qa[s][v] = j < count ? __ldcs(r + v * 32) : zero;
      qb[s][v] = j < count ? __ldcs(r + (V + v) * 32) : zero;
    }
    const uint4 p = j < count ? __ldcs(r + 2 * V * 32) : zero;
    sp[s][0] = p.x; sp[s][1] = p.y; bp[s][0] = p.z; bp[s][1] = p.w;
  };
  qmv_ring<D>(count, issue, [&](u32 s, u32 j) {
    const u32 u = gw + j * nw, tile = u / R, rd = u - tile * R;
    float a = 0.0f, b = 0.0f;
    gc_round<bf16, GS>(sh, qa[s], qb[s], sp[s], bp[s], rd * 8 + 2 * t, a, b);
    a += __shfl_xor_sync(~0u, a, 1);
    a += __shfl_xor_sync(~0u, a, 2);
    b += __shfl_xor_sync(~0u, b, 1);
    b += __shfl_xor_sync(~0u, b, 2);
    float* pt = partials + (u64(tile) * R + rd) * 16;
    if (t == 0) { pt[g] = a; pt[g + 8] = b; }
    __threadfence();
    __syncwarp();
    u32 old = 0;
    if (lane == 0) old = atomicAdd(counters + tile, 1u);
    old = __shfl_sync(~0u, old, 0);
    if (old == R - 1) {
      __threadfence();
      if (lane < 16) {
        const float* pr = partials + u64(tile) * R * 16 + lane;
        float sum = 0.0f;
        for (u32 q = 0; q < R; ++q) sum += __ldcg(pr + q * 16);
        if (tile * 16 + lane < N) y[tile * 16 + lane] = __float2bfloat16(sum);
      }
      if (lane == 0) counters[tile] = 0;
    }
  });
}


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
  const int sms = print_device();
  copy_ceiling_gbs();
  std::vector<DecodeShape> shapes(std::begin(DECODE_SHAPES), std::end(DECODE_SHAPES));
  shapes.push_back({"odd [1000, 5376]", 1000, 5376});
  // Whole waves at 4 blocks an SM on 132 SMs (W 2: 528 blocks, W 4: 1056),
  // against Qwen3.6 up's 544 / 1088 (1.03 / 2.06 waves).
  shapes.push_back({"Qwen3.6 up cut to whole waves [16896, 5120]", 16896, 5120});
  std::mt19937 rng(1234);
  for (const DecodeShape& s : shapes) {
    const u32 N = s.N, K = s.K;
    const Q4Problem q = make_q4(N, K, rng);
    const std::vector<uint4> packed = pack_units(q.codes, q.sc, q.bi, N, K);
    const double bytes = q.bytes();
    const Q4Device<bf16> d(q);
    const int copies = d.copies;
    bf16 *x = d.x, *y = d.y;
    std::vector<unsigned char*> Wp(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&Wp[c], packed.size() * 16));
      CK(cudaMemcpy(Wp[c], packed.data(), packed.size() * 16, cudaMemcpyHostToDevice));
    }
    printf("\n%s: %.2f MB (codes, scales, biases; packed %.2f MB), %d copies\n", s.name, bytes / 1e6, packed.size() * 16 / 1e6, copies);
    // Each W's checkpoint-layout output, which the packed form must give bit for bit.
    std::vector<uint16_t> first[5];
    const u32 shared = gc_shared_bytes(K);
    auto run = [&](auto kern, const char* form, u32 W, bool pk) {
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
      const u32 blocks = ((N + 15) / 16 * W + 3) / 4;
      int c = 0;
      std::vector<uint16_t> out(N);
      CK(cudaMemset(y, 0xff, 2 * N));  // NaN-poisoned
      kern<<<blocks, 128, shared>>>(x, pk ? Wp[0] : d.w[0], d.s[0], d.b[0], y, N, K);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(out.data(), y, 2 * N, cudaMemcpyDeviceToHost));
      const double worst = q.worst_error(out);
      const bool same = first[W].empty() || first[W] == out;
      if (first[W].empty()) first[W] = out;
      const float us = timeit([&] {
        kern<<<blocks, 128, shared>>>(x, pk ? Wp[c] : d.w[c], d.s[c], d.b[c], y, N, K);
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
    {
      // The stream: one launch checked, then timed as run() does.
      const u32 G = K / GS, R = (G + 7) / 8, tiles = (N + 15) / 16, units = tiles * R;
      float* partials;
      u32* counters;
      CK(cudaMalloc(&partials, size_t(units) * 16 * 4));
      CK(cudaMalloc(&counters, size_t(tiles) * 4));
      CK(cudaMemset(counters, 0, size_t(tiles) * 4));
      CK(cudaFuncSetAttribute(gc64_stream<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
      const u32 blocks = std::min<u32>(4 * sms, (units + 3) / 4);
      std::vector<uint16_t> out(N);
      double worst = 0;
      int c = 0;
      for (int rep = 0; rep < 2; ++rep) {  // twice: the counters must come back to 0
        CK(cudaMemset(y, 0xff, 2 * N));
        gc64_stream<2><<<blocks, 128, shared>>>(x, reinterpret_cast<const uint4*>(Wp[rep]), y, partials, counters, N, K);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out.data(), y, 2 * N, cudaMemcpyDeviceToHost));
        worst = std::max(worst, q.worst_error(out));
      }
      const float us = timeit([&] {
        gc64_stream<2><<<blocks, 128, shared>>>(x, reinterpret_cast<const uint4*>(Wp[c]), y, partials, counters, N, K);
        c = (c + 1) % copies;
      }, 40);
      CK(cudaGetLastError());
      printf("  %-28s %8.2f us  %6.0f GB/s  err %.1e of sum|xw| %s  (%u blocks, %u units)\n", "packed, stream D 2", us, bytes / us / 1e3, worst,
             worst < 1e-2 ? "ok" : "BAD", blocks, units);
      CK(cudaFree(partials)); CK(cudaFree(counters));
    }
    for (int c = 0; c < copies; ++c) CK(cudaFree(Wp[c]));
  }
  return 0;
}
