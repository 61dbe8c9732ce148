// One token through MLX 4-bit weights (q4, group 64, bf16 x, scales, biases
// and y) by the dense one-token walk (dense.cu mv_lanes: a warp a row, whole,
// 16-byte vectors of codes, U of them in flight a lane, no barrier in the
// walk), on CUDA cores, against the library's group-column engine (qmv_gc,
// tensor cores) in one run, the weights in turn out of L2. The question
// (bench/notes/qmv-lanes-2026-11-28.md): does the walk that reads a bf16
// weight at 0.93-0.97 of copy carry over to 4-bit codes, whose
// dequantization costs about 2.4 instructions a weight?
//
// A 16-byte vector is 32 codes of one half group (k = 32 c .. 32 c + 31).
// x is staged once a block in shared memory as 256 x (exact) with each half
// group's sum; a code q becomes the float 0.5 + q / 256 by one byte_perm
// (its byte under the exponent of 0.5), so fma(f, 256 x, a) adds 128 x +
// q x and the half group's 128 sum x comes off once: a = sum q x, then
// y += s a + b sum x. bytes-only: the same loads, the code words xor'ed.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -include shaders/cuda/common.cuh -include shaders/common.h \
//     -o /tmp/qmv_lanes bench/qmv_lanes.cu && /tmp/qmv_lanes
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>
#include "harness.cuh"

namespace {
constexpr u32 GS = 64;

// The library's engine at its launch bounds (4 blocks of 4 warps an SM), and
// at 5 and 6 (fewer registers a thread: ptxas spills there).
template <u32 W, u32 MINB = 4>
__global__ void __launch_bounds__(128, MINB) gc64(const bf16* x, const unsigned char* w, const bf16* sc, const bf16* bi, bf16* y, u32 N, u32 K) {
  qmv_gc<bf16, bf16, bf16, GS, W, 0u, false, false>(x, w, sc, bi, y, N, K, blockIdx.x);
}

// a[r] += sum over half group c of (0.5 + q / 256) 256 x for row r's 32
// codes in wv[r] (x staged swizzled: chunk j of half group c at j ^ sw).
// Code 2b of a word is byte b's low nibble, 2b + 1 its high one, each made
// the float 0.5 + q / 256 by one byte_perm under 0.5's exponent.
template <u32 RW>
__device__ __forceinline__ void half_group(const float* xs, u32 c, u32 sw, const uint4 (&wv)[RW], float (&a)[RW]) {
  const float4* xp = reinterpret_cast<const float4*>(xs + 32u * c);
#pragma unroll
  for (u32 wi = 0; wi < 4; ++wi) {
    const float4 x0 = xp[(2 * wi) ^ sw], x1 = xp[(2 * wi + 1) ^ sw];
    const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (u32 r = 0; r < RW; ++r) {
      const u32 word = wi == 0 ? wv[r].x : wi == 1 ? wv[r].y : wi == 2 ? wv[r].z : wv[r].w;
      const u32 lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (u32 b = 0; b < 4; ++b) {
        a[r] = fmaf(__uint_as_float(__byte_perm(lo, 0x3F000000u, 0x7044u | (b << 8))), xv[2 * b], a[r]);
        a[r] = fmaf(__uint_as_float(__byte_perm(hi, 0x3F000000u, 0x7044u | (b << 8))), xv[2 * b + 1], a[r]);
      }
    }
  }
}

// Rows a block: 8 warps x RW rows each (a row group); a grid of resident
// blocks, block b taking row groups b, b + gridDim.x, ..., x staged once a
// block. K a multiple of 64. A lane's loads for a row group (U vectors of
// codes a row and their half groups' scale and bias) all go out together,
// the next group's before the warp sums of this one.
//
// Shared x without bank conflicts: a lane reads half group c = lane + 32 u,
// 32 floats as eight 16-byte chunks; stored plainly, the eight lanes of a
// quarter warp would all read banks 0-3 (half groups 128 bytes apart), eight
// ways conflicted. Chunk j of half group c is stored at chunk j ^ (c & 7),
// and c & 7 = lane & 7 for every u, so a lane's swizzle is one constant.
// SB (bytes-only twin only): 1, a vector's scale and bias with it (the
// product's loads); 0, no scales or biases; 2, each row's scales and biases
// whole at the row group's start, 64 contiguous bytes a warp load.
template <u32 RW, u32 U, u32 MINB, bool BYTES, u32 SB = 1>
__global__ void __launch_bounds__(256, MINB) lanes(const bf16* x, const uint4* w, const unsigned short* sc, const unsigned short* bi,
                                                   bf16* y, u32 N, u32 K, const u32* ids, u32 per) {
  extern __shared__ float smem[];
  float* xs = smem;         // 256 x[k], swizzled by 16-byte chunks
  float* hs = smem + K;     // sum of x over half group c
  const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, V = K / 32, G = K / GS, sw = lane & 7u;
  const u32 groups = (N + 8u * RW - 1) / (8u * RW);
  // Output row r's weight row: r itself, or with ids (the per-expert form)
  // row r % per of expert ids[r / per].
  auto phys = [&](u32 r) { r = min(r, N - 1); return ids ? ids[r / per] * per + r % per : r; };
  u64 wrow[RW], grow[RW];
  uint4 wv[U][RW];
  u32 sb[U][RW];  // bf16 scale | bf16 bias << 16
  auto rows = [&](u32 rg) {
#pragma unroll
    for (u32 r = 0; r < RW; ++r) {
      const u32 p = phys((rg * 8u + warp) * RW + r);
      wrow[r] = u64(p) * V, grow[r] = u64(p) * G;
    }
  };
  u32 whole[RW];  // SB 2: the xor of a lane's share of each row's scales and biases
  auto load = [&](u32 c0) {
    if (SB == 2 && c0 == lane) {
#pragma unroll
      for (u32 r = 0; r < RW; ++r) {
        whole[r] = 0u;
        for (u32 g = lane; g < G; g += 32u) whole[r] ^= u32(__ldcs(sc + grow[r] + g)) ^ u32(__ldcs(bi + grow[r] + g)) << 16;
      }
    }
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
      const u32 c = c0 + 32u * u;
#pragma unroll
      for (u32 r = 0; r < RW; ++r) {
        if (c < V) {
          wv[u][r] = __ldcs(w + wrow[r] + c);
          if (SB == 1) sb[u][r] = u32(__ldg(sc + grow[r] + c / 2)) | u32(__ldg(bi + grow[r] + c / 2)) << 16;
          else sb[u][r] = 0u;
        }
      }
    }
  };
  // The first loads go out before x's staging and its barrier.
  u32 rg = blockIdx.x;
  if (rg < groups) rows(rg), load(lane);
  for (u32 c = warp; c < V; c += 8u) {
    const float v = 256.0f * __bfloat162float(x[32u * c + lane]);
    xs[32u * c + ((((lane >> 2) ^ c) & 7u) << 2) + (lane & 3u)] = v;
    const float s = warp_sum(v);
    if (lane == 0) hs[c] = s * (1.0f / 256.0f);
  }
  __syncthreads();
  for (; rg < groups; rg += gridDim.x) {
    const u32 row0 = (rg * 8u + warp) * RW;
    float acc[RW];
    u32 bits[RW];
#pragma unroll
    for (u32 r = 0; r < RW; ++r) acc[r] = 0.0f, bits[r] = 0u;
    for (u32 c0 = lane; c0 < V; c0 += 32u * U) {
#pragma unroll
      for (u32 u = 0; u < U; ++u) {
        const u32 c = c0 + 32u * u;
        if (c >= V) break;
        if constexpr (BYTES) {
#pragma unroll
          for (u32 r = 0; r < RW; ++r) bits[r] ^= wv[u][r].x ^ wv[u][r].y ^ wv[u][r].z ^ wv[u][r].w ^ sb[u][r] ^ (SB == 2 && u == 0 ? whole[r] : 0u);
        } else {
          const float hsum = hs[c];
          float a[RW];
#pragma unroll
          for (u32 r = 0; r < RW; ++r) a[r] = -128.0f * hsum;
          half_group<RW>(xs, c, sw, wv[u], a);
#pragma unroll
          for (u32 r = 0; r < RW; ++r)
            acc[r] = fmaf(__uint_as_float(sb[u][r] << 16), a[r], fmaf(__uint_as_float(sb[u][r] & 0xFFFF0000u), hsum, acc[r]));
        }
      }
      if (c0 + 32u * U < V) load(c0 + 32u * U);
    }
    // The next row group's first loads, then this one's sums.
    if (rg + gridDim.x < groups) rows(rg + gridDim.x), load(lane);
#pragma unroll
    for (u32 r = 0; r < RW; ++r) {
      const float t = warp_sum(BYTES ? float(__popc(bits[r])) : acc[r]);
      if (lane == 0 && row0 + r < N) y[row0 + r] = __float2bfloat16_rn(t);
    }
  }
}

// The walk fed through shared memory instead of registers: a lane's 16-byte
// vectors go in by cp.async (nothing held in registers while in flight), so
// bytes in flight are bounded by shared memory, not by the register file
// (the register-fed walk above holds 4 KB a warp at 85-100 registers, two
// blocks an SM: about 64 KB an SM in flight, and reads 0.5-0.6 of copy even
// without arithmetic). Each warp runs its own ring of S units; a unit is
// one vector a lane of each of its RW rows (32 half groups: 512 bytes of
// codes a row) with the unit's 16 scales and 16 biases a row (32 bytes
// each, 4-byte copies by lanes 0-15: needs K / 64 even). The stream of
// units runs across the warp's row groups without draining; S - 1 are in
// flight while one is read.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(live ? 4 : 0) : "memory");
}
constexpr u32 UNIT_ROW = 576;  // bytes of a unit a row: 512 of codes, 32 of scales, 32 of biases
inline u32 ring_shared_bytes(u32 K, u32 warps, u32 S, u32 RW) { return (K + K / 32 + 3) / 4 * 16 + warps * S * RW * UNIT_ROW; }

template <u32 RW, u32 S, u32 WARPS, bool BYTES>
__global__ void __launch_bounds__(WARPS * 32) ring(const bf16* x, const uint4* w, const unsigned short* sc, const unsigned short* bi,
                                                   bf16* y, u32 N, u32 K, const u32* ids, u32 per) {
  extern __shared__ float smem[];
  float* xs = smem;      // 256 x[k], swizzled by 16-byte chunks (as lanes)
  float* hs = smem + K;  // sum of x over half group c
  const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, V = K / 32, G = K / GS, sw = lane & 7u;
  unsigned char* ring = reinterpret_cast<unsigned char*>(smem) + (K + K / 32 + 3) / 4 * 16 + warp * S * RW * UNIT_ROW;
  const u32 groups = (N + WARPS * RW - 1) / (WARPS * RW), units = (V + 31) / 32;
  auto phys = [&](u32 r) { r = min(r, N - 1); return ids ? ids[r / per] * per + r % per : r; };
  u32 irg = blockIdx.x, ich = 0;  // the next unit to issue
  auto issue = [&](u32 slot) {
    if (irg < groups) {
      const u32 c = ich * 32u + lane, g = ich * 16u + 2u * (lane & 7u);
#pragma unroll
      for (u32 r = 0; r < RW; ++r) {
        const u32 p = phys((irg * WARPS + warp) * RW + r);
        unsigned char* dst = ring + (slot * RW + r) * UNIT_ROW;
        cp_async16(dst + 16u * lane, w + u64(p) * V + min(c, V - 1), c < V);
        if (lane < 16) {
          const unsigned short* src = (lane < 8 ? sc : bi) + u64(p) * G + min(g, G - 2);
          cp_async4(dst + 512u + 32u * (lane >> 3) + 4u * (lane & 7u), src, g < G);
        }
      }
      if (++ich == units) ich = 0, irg += gridDim.x;
    }
    cp_async_commit();
  };
#pragma unroll
  for (u32 s = 0; s + 1 < S; ++s) issue(s);
  for (u32 c = warp; c < V; c += WARPS) {
    const float v = 256.0f * __bfloat162float(x[32u * c + lane]);
    xs[32u * c + ((((lane >> 2) ^ c) & 7u) << 2) + (lane & 3u)] = v;
    const float s = warp_sum(v);
    if (lane == 0) hs[c] = s * (1.0f / 256.0f);
  }
  __syncthreads();
  u32 slot = 0;
  for (u32 rg = blockIdx.x; rg < groups; rg += gridDim.x) {
    const u32 row0 = (rg * WARPS + warp) * RW;
    float acc[RW];
    u32 bits[RW];
#pragma unroll
    for (u32 r = 0; r < RW; ++r) acc[r] = 0.0f, bits[r] = 0u;
    for (u32 ch = 0; ch < units; ++ch) {
      cp_async_wait<S - 2>();
      __syncwarp();
      // Every lane is past the unit before this one: its slot takes the unit S - 1 on.
      issue(slot == 0 ? S - 1 : slot - 1);
      const u32 c = ch * 32u + lane;
      if (c < V) {
        const unsigned char* st = ring + slot * RW * UNIT_ROW;
        if constexpr (BYTES) {
#pragma unroll
          for (u32 r = 0; r < RW; ++r) {
            const uint4 v = *reinterpret_cast<const uint4*>(st + r * UNIT_ROW + 16u * lane);
            const unsigned short* sbp = reinterpret_cast<const unsigned short*>(st + r * UNIT_ROW + 512u);
            bits[r] ^= v.x ^ v.y ^ v.z ^ v.w ^ sbp[lane >> 1] ^ sbp[16 + (lane >> 1)];
          }
        } else {
          const float hsum = hs[c];
          uint4 wv[RW];
          float a[RW];
#pragma unroll
          for (u32 r = 0; r < RW; ++r) wv[r] = *reinterpret_cast<const uint4*>(st + r * UNIT_ROW + 16u * lane), a[r] = -128.0f * hsum;
          half_group<RW>(xs, c, sw, wv, a);
#pragma unroll
          for (u32 r = 0; r < RW; ++r) {
            const unsigned short* sbp = reinterpret_cast<const unsigned short*>(st + r * UNIT_ROW + 512u);
            const float sv = __uint_as_float(u32(sbp[lane >> 1]) << 16), bv = __uint_as_float(u32(sbp[16 + (lane >> 1)]) << 16);
            acc[r] = fmaf(sv, a[r], fmaf(bv, hsum, acc[r]));
          }
        }
      }
      slot = slot + 1 == S ? 0 : slot + 1;
    }
#pragma unroll
    for (u32 r = 0; r < RW; ++r) {
      const float t = warp_sum(BYTES ? float(__popc(bits[r])) : acc[r]);
      if (lane == 0 && row0 + r < N) y[row0 + r] = __float2bfloat16_rn(t);
    }
  }
  cp_async_wait<0>();
}
// The walk's grid: its shared memory allowed, as many 256-thread blocks as
// are resident at once, at most one a row group.
template <typename Kern>
u32 resident_grid(Kern kern, u32 shared, u32 groups, int sms) {
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  int per = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, 256, shared));
  return std::min<u32>(groups, u32(per) * u32(sms));
}
}  // namespace

int main() {
  const int sms = print_device();
  const double copy = copy_ceiling_gbs();
  std::vector<DecodeShape> shapes(std::begin(DECODE_SHAPES), std::end(DECODE_SHAPES));
  shapes.push_back({"odd [1000, 5376]", 1000, 5376});
  std::mt19937 rng(4321);
  for (const DecodeShape& s : shapes) {
    const u32 N = s.N, K = s.K;
    const Q4Problem q = make_q4(N, K, rng);
    const double bytes = q.bytes();
    const Q4Device<bf16> d(q);
    const int copies = d.copies;
    bf16 *x = d.x, *y = d.y;
    printf("\n%s: %.2f MB (codes, scales, biases), %d copies\n", s.name, bytes / 1e6, copies);
    // launch(c): one product over copy c; check: whether the output is a product (not the bytes-only twin).
    auto run = [&](const char* form, bool check, auto launch) {
      CK(cudaMemset(y, 0xff, 2 * N));  // NaN-poisoned
      launch(0);
      CK(cudaDeviceSynchronize());
      std::vector<uint16_t> out(N);
      CK(cudaMemcpy(out.data(), y, 2 * N, cudaMemcpyDeviceToHost));
      const double worst = q.worst_error(out);
      int c = 0;
      const float us = timeit([&] { launch(c); c = (c + 1) % copies; }, 40);
      CK(cudaGetLastError());
      printf("  %-34s %8.2f us  %6.0f GB/s  %.2f of copy", form, us, bytes / us / 1e3, bytes / us / 1e3 / copy);
      if (check) printf("  err %.1e of sum|xw| %s", worst, worst < 1e-2 ? "ok" : "BAD");
      printf("\n");
    };
    const u32 gshared = gc_shared_bytes(K);
    auto gc = [&](const char* form, auto kern, u32 W) {
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, gshared));
      const u32 blocks = ((N + 15) / 16 * W + 3) / 4;
      run(form, true, [&](int c) { kern<<<blocks, 128, gshared>>>(x, d.w[c], d.s[c], d.b[c], y, N, K); });
    };
    gc("library qmv_gc W 2", gc64<2>, 2);
    gc("library qmv_gc W 4", gc64<4>, 4);
    gc("qmv_gc W 2, 5 an SM (spilling)", gc64<2, 5>, 2);
    gc("qmv_gc W 2, 6 an SM (spilling)", gc64<2, 6>, 2);
    const u32 lshared = (K + K / 32) * 4;
    auto ln = [&](const char* form, auto kern, u32 RW, bool check) {
      const u32 blocks = resident_grid(kern, lshared, (N + 8 * RW - 1) / (8 * RW), sms);
      run(form, check, [&](int c) {
        kern<<<blocks, 256, lshared>>>(x, reinterpret_cast<const uint4*>(d.w[c]), reinterpret_cast<const unsigned short*>(d.s[c]),
                                       reinterpret_cast<const unsigned short*>(d.b[c]), y, N, K, nullptr, 1u);
      });
    };
    ln("lanes RW 2 U 4", lanes<2, 4, 1, false>, 2, true);
    ln("lanes RW 2 U 4, 3 blocks an SM", lanes<2, 4, 3, false>, 2, true);
    ln("lanes RW 2 U 2", lanes<2, 2, 1, false>, 2, true);
    ln("lanes RW 2 U 2, 4 blocks an SM", lanes<2, 2, 4, false>, 2, true);
    ln("lanes RW 4 U 2", lanes<4, 2, 1, false>, 4, true);
    ln("lanes RW 4 U 2, 2 blocks an SM", lanes<4, 2, 2, false>, 4, true);
    ln("lanes RW 1 U 8", lanes<1, 8, 1, false>, 1, true);
    ln("bytes only, RW 2 U 4", lanes<2, 4, 1, true>, 2, false);
    ln("bytes only, RW 4 U 2", lanes<4, 2, 1, true>, 4, false);
    ln("bytes only, RW 4 U 2, codes alone", lanes<4, 2, 1, true, 0>, 4, false);
    ln("bytes only, RW 4 U 2, scales by row", lanes<4, 2, 1, true, 2>, 4, false);
    ln("bytes only, RW 2 U 4, codes alone", lanes<2, 4, 1, true, 0>, 2, false);
    ln("bytes only, RW 2 U 4, scales by row", lanes<2, 4, 1, true, 2>, 2, false);
    // rg(form, kernel, RW, S, warps, check): the ring, as many blocks as are resident.
    auto rg = [&](const char* form, auto kern, u32 RW, u32 S, u32 W, bool check) {
      const u32 sh = ring_shared_bytes(K, W, S, RW);
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, sh));
      int per = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, 32 * W, sh));
      if (per == 0) { printf("  %-34s (does not fit: %u B of shared memory)\n", form, sh); return; }
      const u32 blocks = std::min<u32>((N + W * RW - 1) / (W * RW), u32(per) * u32(sms));
      char name[96];
      snprintf(name, sizeof name, "%s, %d an SM", form, per);
      run(name, check, [&](int c) {
        kern<<<blocks, 32 * W, sh>>>(x, reinterpret_cast<const uint4*>(d.w[c]), reinterpret_cast<const unsigned short*>(d.s[c]),
                                     reinterpret_cast<const unsigned short*>(d.b[c]), y, N, K, nullptr, 1u);
      });
    };
    rg("ring RW 2 S 8 W 8", ring<2, 8, 8, false>, 2, 8, 8, true);
    rg("ring RW 2 S 6 W 8", ring<2, 6, 8, false>, 2, 6, 8, true);
    rg("ring RW 1 S 12 W 8", ring<1, 12, 8, false>, 1, 12, 8, true);
    rg("ring RW 2 S 6 W 16", ring<2, 6, 16, false>, 2, 6, 16, true);
    rg("ring RW 4 S 4 W 8", ring<4, 4, 8, false>, 4, 4, 8, true);
    rg("ring RW 2 S 4 W 8", ring<2, 4, 8, false>, 2, 4, 8, true);
    rg("bytes only, ring RW 2 S 8 W 8", ring<2, 8, 8, true>, 2, 8, 8, false);
    rg("bytes only, ring RW 2 S 6 W 16", ring<2, 6, 16, true>, 2, 6, 16, false);
  }

  // The per-expert form at one token (decode_products.ts's expert rows: the
  // library's per-expert engine times them): 8 distinct experts of E a
  // launch, `per` rows each (gate and up stacked, or down), one x for all
  // (the bytes and the walk as the library's; its down form reads one x a
  // pair), new ids each launch from 16 sets, copies of the experts' weights
  // in turn. Checked on the first set against float64 rows.
  struct ExpertShape { const char* name; u32 E, per, K; };
  const ExpertShape experts[] = {
      {"35B experts gate_up 8 of 256 [2 x 512, 2048]", 256, 1024, 2048},
      {"35B experts down 8 of 256 [2048, 512]", 256, 2048, 512},
      {"Gemma 4 experts gate_up 8 of 128 [2 x 704, 2816]", 128, 1408, 2816},
      {"Gemma 4 experts down 8 of 128 [2816, 704]", 128, 2816, 704},
  };
  for (const ExpertShape& e : experts) {
    const u32 N = 8 * e.per, K = e.K;
    const Q4Problem q = make_q4(e.E * e.per, K, rng, false);
    const Q4Device<bf16> d(q);
    std::vector<u32> sets(16 * 8);
    for (u32 i = 0; i < 16; ++i) {
      std::vector<u32> all(e.E);
      for (u32 j = 0; j < e.E; ++j) all[j] = j;
      std::shuffle(all.begin(), all.end(), rng);
      std::copy(all.begin(), all.begin() + 8, sets.begin() + 8 * i);
    }
    u32* ids;
    CK(cudaMalloc(&ids, 4 * sets.size()));
    CK(cudaMemcpy(ids, sets.data(), 4 * sets.size(), cudaMemcpyHostToDevice));
    const double bytes = double(N) * K * 0.5625;
    printf("\n%s: %.2f MB a launch (codes, scales, biases), experts %.1f MB, %d copies\n", e.name, bytes / 1e6, q.bytes() / 1e6, d.copies);
    const u32 lshared = (K + K / 32) * 4;
    auto ln = [&](const char* form, auto kern, u32 RW, bool check) {
      const u32 blocks = resident_grid(kern, lshared, (N + 8 * RW - 1) / (8 * RW), sms);
      auto launch = [&](int c, int i) {
        kern<<<blocks, 256, lshared>>>(d.x, reinterpret_cast<const uint4*>(d.w[c]), reinterpret_cast<const unsigned short*>(d.s[c]),
                                       reinterpret_cast<const unsigned short*>(d.b[c]), d.y, N, K, ids + 8 * i, e.per);
      };
      CK(cudaMemset(d.y, 0xff, 2 * N));  // NaN-poisoned
      launch(0, 0);
      CK(cudaDeviceSynchronize());
      std::vector<uint16_t> out(N);
      CK(cudaMemcpy(out.data(), d.y, 2 * N, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (u32 r = 0; check && r < N; r += 7) {  // every 7th row
        double ref, mag;
        q.reference_row(sets[r / e.per] * e.per + r % e.per, ref, mag);
        const double err = std::fabs(double(bf16_float(out[r])) - ref) / (mag + 1e-30);
        worst = std::isnan(err) ? INFINITY : std::max(worst, err);
      }
      int c = 0, i = 0;
      const float us = timeit([&] { launch(c, i); c = (c + 1) % d.copies; i = (i + 1) % 16; }, 40);
      CK(cudaGetLastError());
      printf("  %-34s %8.2f us  %6.0f GB/s  %.2f of copy", form, us, bytes / us / 1e3, bytes / us / 1e3 / copy);
      if (check) printf("  err %.1e of sum|xw| %s", worst, worst < 1e-2 ? "ok" : "BAD");
      printf("\n");
    };
    ln("lanes RW 2 U 4", lanes<2, 4, 1, false>, 2, true);
    ln("lanes RW 2 U 2", lanes<2, 2, 1, false>, 2, true);
    ln("lanes RW 4 U 2", lanes<4, 2, 1, false>, 4, true);
    ln("bytes only, RW 2 U 4", lanes<2, 4, 1, true>, 2, false);
    CK(cudaFree(ids));
  }
  return 0;
}
