// One token through 4-bit MLX affine weights (q4, groups of 64, bf16 scales
// and biases, bf16 x, f32 y) with the weights streamed by the Hopper
// bulk-copy engine, outside the library: how much of the copy rate a
// matrix-vector product gets when the bytes in flight are held in shared
// memory stages instead of registers (the library's group-column engine
// reaches 0.51-0.64 of copy at the large decode shapes,
// bench/results/qmv-gc-h100-2026-11-26.md). Floor, prediction and results:
// bench/notes/qmv-bulk-2026-11-27.md.
//
// A persistent grid; a block takes tiles of ROWS rows in turn, and a tile's
// K in chunks of KC weights: a unit is (tile, chunk). Warp 0 loads each
// unit into one of S stages (per row: the chunk's codes, and the 16-byte
// aligned span of shared memory holding its scales and its biases), lane 0
// expecting the stage's bytes on its mbarrier; the stage of unit i is loaded
// again with unit i + S once the block is past unit i (one barrier a
// unit). x is in shared memory, loaded once a block, with its group sums.
// In a unit, lane l takes group l of the chunk (KC = 64 x 32) of the rows of
// its warp (ROWS / WARPS): codes as 2^23 + q floats by byte_perm, one fadd
// and one fma a weight; y += s dot(q, x) + b sum(x). TRIVIAL: the same
// pipeline folding the code words with xor instead (the access pattern's
// ceiling; its y is not checked).
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -o /tmp/qmv_bulk bench/qmv_bulk.cu && /tmp/qmv_bulk
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <vector>
#include <cuda_bf16.h>
#include "harness.cuh"

constexpr int GS = 64;         // weights a group
constexpr int KC = 2048;       // weights of a chunk (32 groups: one a lane)
constexpr int SPAN = 80;       // bytes a row's scales (or biases) of a chunk may span, 16-byte aligned

__device__ __forceinline__ float bf(unsigned short h) { return __uint_as_float(unsigned(h) << 16); }

template <int ROWS, int WARPS, int S, bool TRIVIAL>
__global__ void __launch_bounds__(WARPS * 32, 1) qmv_bulk(const unsigned char* w, const unsigned short* sc, const unsigned short* bi,
                                                       const unsigned short* x, float* y, int N, int K) {
  constexpr int STAGE = ROWS * (KC / 2 + 2 * SPAN);
  constexpr int RW = ROWS / WARPS;  // rows a warp
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bars[S];
  unsigned char* stages = smem;
  unsigned short* xs = reinterpret_cast<unsigned short*>(smem + S * STAGE);
  float* xsum = reinterpret_cast<float*>(xs + K);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int G = K / GS, nchunk = (K + KC - 1) / KC, tiles = N / ROWS;
  const size_t rowb = size_t(K) / 2, srow = size_t(G) * 2;  // bytes a row of codes, of scales
  // The block's units: tiles blockIdx.x + j gridDim.x, each nchunk chunks.
  const int mytiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int units = mytiles * nchunk;
  auto issue = [&](int i) {  // warp 0: unit i into stage i % S
    const int tile = blockIdx.x + (i / nchunk) * gridDim.x, c = i % nchunk;
    const int k0 = c * KC, len = min(KC, K - k0);
    unsigned char* st = stages + (i % S) * STAGE;
    unsigned bytes = 0;
    // every row alike: codes len / 2, and the spans of its scales and biases
    for (int r = 0; r < ROWS; ++r) {
      const size_t so = size_t(tile * ROWS + r) * srow + size_t(k0 / GS) * 2;
      const size_t a0 = so & ~size_t(15), a1 = (so + size_t(len / GS) * 2 + 15) & ~size_t(15);
      bytes += unsigned(len / 2) + 2u * unsigned(a1 - a0);
    }
    if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sm32(&bars[i % S])), "r"(bytes) : "memory");
    __syncwarp();
    if (lane < ROWS) {
      const int r = lane, row = tile * ROWS + r;
      const size_t so = size_t(row) * srow + size_t(k0 / GS) * 2;
      const size_t a0 = so & ~size_t(15), a1 = (so + size_t(len / GS) * 2 + 15) & ~size_t(15);
      unsigned char* dst = st + r * (KC / 2 + 2 * SPAN);
      const unsigned b = sm32(&bars[i % S]);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" :: "r"(sm32(dst)), "l"(w + size_t(row) * rowb + k0 / 2), "r"(unsigned(len / 2)), "r"(b) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" :: "r"(sm32(dst + KC / 2)), "l"(reinterpret_cast<const unsigned char*>(sc) + a0), "r"(unsigned(a1 - a0)), "r"(b) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" :: "r"(sm32(dst + KC / 2 + SPAN)), "l"(reinterpret_cast<const unsigned char*>(bi) + a0), "r"(unsigned(a1 - a0)), "r"(b) : "memory");
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) bar_init(&bars[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) for (int i = 0; i < S && i < units; ++i) issue(i);
  // x and its group sums (bf16 values as they are)
  for (int g = warp; g < G; g += WARPS) {
    const unsigned v = reinterpret_cast<const unsigned*>(x + g * GS)[lane];
    reinterpret_cast<unsigned*>(xs + g * GS)[lane] = v;
    float s = bf(v & 0xffffu) + bf(v >> 16);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    if (lane == 0) xsum[g] = s;
  }
  __syncthreads();
  float acc[RW];
  for (int r = 0; r < RW; ++r) acc[r] = 0.f;
  for (int i = 0; i < units; ++i) {
    const int tile = blockIdx.x + (i / nchunk) * gridDim.x, c = i % nchunk;
    const int k0 = c * KC, len = min(KC, K - k0);
    const unsigned char* st = stages + (i % S) * STAGE;
    bar_wait(&bars[i % S], unsigned(i / S) & 1u);
    const int g = k0 / GS + lane;  // this lane's group
    if (lane * GS < len) {
      if (TRIVIAL) {
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          const uint4* q = reinterpret_cast<const uint4*>(st + (warp * RW + r) * (KC / 2 + 2 * SPAN) + lane * 32);
          const uint4 a = q[0], b = q[1];
          acc[r] += float((a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w) & 1u);
        }
      } else {
        // x of the group, as f32 pairs: 64 values, held across the warp's rows
        float xf[GS];
        const uint4* xv = reinterpret_cast<const uint4*>(xs + g * GS);
#pragma unroll
        for (int j = 0; j < GS / 8; ++j) {
          const uint4 t = xv[j];
          xf[8 * j + 0] = bf(t.x & 0xffffu); xf[8 * j + 1] = bf(t.x >> 16); xf[8 * j + 2] = bf(t.y & 0xffffu); xf[8 * j + 3] = bf(t.y >> 16);
          xf[8 * j + 4] = bf(t.z & 0xffffu); xf[8 * j + 5] = bf(t.z >> 16); xf[8 * j + 6] = bf(t.w & 0xffffu); xf[8 * j + 7] = bf(t.w >> 16);
        }
        const float xg = xsum[g];
#pragma unroll
        for (int r = 0; r < RW; ++r) {
          const int rr = warp * RW + r, row = tile * ROWS + rr;
          const unsigned char* rb = st + rr * (KC / 2 + 2 * SPAN);
          const uint4* q = reinterpret_cast<const uint4*>(rb + lane * 32);
          const uint4 qa = q[0], qb = q[1];
          const unsigned qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
          float d = 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const unsigned lo = qw[j] & 0x0f0f0f0fu, hi = (qw[j] >> 4) & 0x0f0f0f0fu;
            // nibble e of word j is weight 8 j + e: lo bytes hold e = 0, 2, 4, 6, hi bytes e = 1, 3, 5, 7
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float q0 = __uint_as_float(__byte_perm(lo, 0x4b000000u, 0x7540u + e)) - 8388608.f;
              const float q1 = __uint_as_float(__byte_perm(hi, 0x4b000000u, 0x7540u + e)) - 8388608.f;
              d = fmaf(q0, xf[8 * j + 2 * e], d);
              d = fmaf(q1, xf[8 * j + 2 * e + 1], d);
            }
          }
          const size_t so = size_t(row) * srow + size_t(k0 / GS) * 2;
          const int off = int(so & 15u) + lane * 2;
          const float s = bf(*reinterpret_cast<const unsigned short*>(rb + KC / 2 + off));
          const float b = bf(*reinterpret_cast<const unsigned short*>(rb + KC / 2 + SPAN + off));
          acc[r] += s * d + b * xg;
        }
      }
    }
    if (c == nchunk - 1) {
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        float v = acc[r];
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
        if (lane == 0) y[tile * ROWS + warp * RW + r] = v;
        acc[r] = 0.f;
      }
    }
    __syncthreads();  // every warp is past stage i % S
    if (warp == 0 && i + S < units) issue(i + S);
  }
}

struct Shape { const char* name; int n, k; };

int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const Shape shapes[] = {
    {"Qwen3.6 up [17408, 5120]", 17408, 5120}, {"Qwen3.6 down [5120, 17408]", 5120, 17408}, {"Gemma 4 up [21504, 5376]", 21504, 5376},
    {"Qwen3.6-35B in_proj [12352, 2048]", 12352, 2048}, {"Qwen3.6-35B out_proj [2048, 4096]", 2048, 4096}, {"lm_head [248320, 2048]", 248320, 2048},
  };
  for (const Shape& sh : shapes) {
    const int N = sh.n, K = sh.k, G = K / GS;
    const size_t wb = size_t(N) * K / 2, sb = size_t(N) * G * 2;
    const double bytes = double(wb) + 2.0 * double(sb) + K * 2.0 + N * 4.0;
    std::vector<unsigned char> hw(wb); std::vector<unsigned short> hs(size_t(N) * G), hb(size_t(N) * G), hx(K);
    srand(7);
    for (auto& v : hw) v = (unsigned char)(rand() & 0xff);
    auto bfr = [](float f) { unsigned u; memcpy(&u, &f, 4); return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); };
    auto fbf = [](unsigned short h) { unsigned u = unsigned(h) << 16; float f; memcpy(&f, &u, 4); return f; };
    for (auto& v : hs) v = bfr(0.002f + 0.01f * (rand() / float(RAND_MAX)));
    for (auto& v : hb) v = bfr(-0.05f + 0.1f * (rand() / float(RAND_MAX)));
    for (auto& v : hx) v = bfr(-1.f + 2.f * (rand() / float(RAND_MAX)));
    unsigned char* dw; unsigned short *ds, *db, *dx; float* dy;
    CK(cudaMalloc(&dw, wb)); CK(cudaMalloc(&ds, sb)); CK(cudaMalloc(&db, sb)); CK(cudaMalloc(&dx, K * 2)); CK(cudaMalloc(&dy, N * 4));
    CK(cudaMemcpy(dw, hw.data(), wb, cudaMemcpyHostToDevice)); CK(cudaMemcpy(ds, hs.data(), sb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb.data(), sb, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dx, hx.data(), K * 2, cudaMemcpyHostToDevice));
    // reference rows (float64)
    std::vector<double> ref(N);
    for (int r = 0; r < N; r += 97) {
      double acc = 0;
      for (int g = 0; g < G; ++g) {
        const double s = fbf(hs[size_t(r) * G + g]), b = fbf(hb[size_t(r) * G + g]);
        for (int e = 0; e < GS; ++e) {
          const int kk = g * GS + e;
          const unsigned char byte = hw[size_t(r) * K / 2 + kk / 2];
          const int q = (kk & 1) ? byte >> 4 : byte & 15;
          acc += (s * q + b) * fbf(hx[kk]);
        }
      }
      ref[r] = acc;
    }
    // the copy of the same bytes (weights), device to device
    unsigned char *dc, *dsrc; CK(cudaMalloc(&dc, wb + 2 * sb)); CK(cudaMalloc(&dsrc, wb + 2 * sb)); CK(cudaMemset(dsrc, 1, wb + 2 * sb));
    const float ucopy = timeit([&]() { CK(cudaMemcpyAsync(dc, dsrc, wb + 2 * sb, cudaMemcpyDeviceToDevice)); }, 50);
    printf("%s: floor bytes %.1f MB; device copy of them %.2f us (%.0f GB/s read + written)\n", sh.name, bytes / 1e6, ucopy, 2.0 * double(wb + 2 * sb) / ucopy / 1e3);
    CK(cudaFree(dc)); CK(cudaFree(dsrc));
    struct Cfg { void (*k)(const unsigned char*, const unsigned short*, const unsigned short*, const unsigned short*, float*, int, int); int rows, warps, s; bool triv; };
    const Cfg cfgs[] = {
      {qmv_bulk<16, 8, 4, false>, 16, 8, 4, false}, {qmv_bulk<16, 8, 6, false>, 16, 8, 6, false}, {qmv_bulk<16, 4, 6, false>, 16, 4, 6, false},
      {qmv_bulk<8, 4, 8, false>, 8, 4, 8, false}, {qmv_bulk<8, 8, 8, false>, 8, 8, 8, false}, {qmv_bulk<32, 8, 3, false>, 32, 8, 3, false},
      {qmv_bulk<16, 8, 6, true>, 16, 8, 6, true}, {qmv_bulk<8, 4, 8, true>, 8, 4, 8, true},
    };
    for (const Cfg& cf : cfgs) {
      if (N % cf.rows) continue;
      const int stage = cf.rows * (KC / 2 + 2 * SPAN);
      const int smem = cf.s * stage + K * 2 + G * 4;
      if (smem > 227 * 1024 - 64) continue;
      CK(cudaFuncSetAttribute(cf.k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, cf.k, cf.warps * 32, smem));
      if (occ < 1) continue;
      for (int bps = 1; bps <= occ && bps <= 2; ++bps) {
        const int tiles = N / cf.rows, grid = std::min(tiles, sms * bps);
        auto gs = [&](cudaStream_t st) { cf.k<<<grid, cf.warps * 32, smem, st>>>(dw, ds, db, dx, dy, N, K); };
        CK(cudaMemset(dy, 0xff, N * 4)); gs(0); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        std::vector<float> hy(N); CK(cudaMemcpy(hy.data(), dy, N * 4, cudaMemcpyDeviceToHost));
        double worst = 0, scale = 0;
        for (int r = 0; r < N; r += 97) scale = fmax(scale, fabs(ref[r]));
        for (int r = 0; r < N; r += 97) worst = fmax(worst, fabs(hy[r] - ref[r]) / scale);
        const float us = timeit([&]() { gs(0); }, 50), ug = timeg(gs, 20);
        printf("  rows %2d warps %d stages %d grid %5d (%d/SM, occ %d, smem %6d)%s: %8.2f us  graph %8.2f us  %6.0f GB/s  err %.2e\n", cf.rows, cf.warps, cf.s, grid, bps, occ, smem,
               cf.triv ? " bytes only" : "           ", us, ug, bytes / ug / 1e3, cf.triv ? 0.0 : worst);
      }
    }
    CK(cudaFree(dw)); CK(cudaFree(ds)); CK(cudaFree(db)); CK(cudaFree(dx)); CK(cudaFree(dy));
  }
  return 0;
}
