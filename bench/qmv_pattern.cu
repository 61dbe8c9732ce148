// How fast the 4-bit vector products' access pattern alone can read a
// weight matrix (no arithmetic: the loaded words folded by xor), outside the
// library: does the group-column engine's pattern (common.cuh qmv_gc: a warp
// reads 16 rows x 256 bytes a round, lane (g, t) rows g and g + 8, 16-byte
// loads at 64 t + 16 v, so each load instruction uses half of each 32-byte
// sector it touches, plus 2-byte scale and bias pairs) cap it below the copy
// rate, and does the number of warps an SM decide it? Floor, prediction and
// results: bench/notes/qmv-pattern-2026-11-28.md.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/qmv_pattern bench/qmv_pattern.cu && /tmp/qmv_pattern
//
// Matrices of MLX q4 g64 at the decode shapes (codes [N, K / 2] bytes, bf16
// scales and biases [N, K / 64]), COPIES of them in turn so that L2 (50 MB
// on an H200) holds none of the one being read. Forms:
//   seq      the codes as one flat array, 4 16-byte loads a thread in flight,
//            grid-stride (a copy's read side; scales and biases not read)
//   gc       qmv_gc's pattern (W warps a tile split its rounds, D rounds in
//            flight, 128 threads a block)
//   gcs      gc with a lane's 4 loads of a row placed at 16 t + 64 v (every
//            load instruction uses whole sectors; not the mma's layout)
//   tile     gc with a block of W warps a tile, all its rounds in flight
//   packed   gc's grid over codes repacked so a warp's round is contiguous
//            and each load instruction reads 512 contiguous bytes
//   packed9  the codes with their scales and biases beside them (a round
//            9 x 512 bytes), walked as the engine does or streamed by a
//            persistent grid
//   row      a warp reads R rows whole, a lane 16 bytes of a row a load
//            (a plain SIMT vector product's pattern), 4 loads in flight
// Each at B blocks an SM (shared memory requested to cap the occupancy; the
// blocks an SM printed are what the registers and that allow).
#include <cstdio>
#include <cstdint>
#include <algorithm>
#include <vector>
#include "harness.cuh"

typedef unsigned int u32;
typedef unsigned long long u64;

__global__ void seq_read(const uint4* w, u64 n, u32* out) {
  u32 acc = 0;
  const u64 stride = u64(gridDim.x) * blockDim.x;
  u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(w + i), b = __ldcs(w + i + stride), c = __ldcs(w + i + 2 * stride), d = __ldcs(w + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) { uint4 a = __ldcs(w + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  if (acc == 0x12345678u) out[0] = acc;
}

// A 16-byte load: L 0 evict-first through L1 (__ldcs, the engine's), 1 L2
// only (__ldcg), 2 non-coherent without an L1 line (L1::no_allocate).
template <u32 L>
__device__ __forceinline__ uint4 ld16(const void* p) {
  if constexpr (L == 0) return __ldcs(reinterpret_cast<const uint4*>(p));
  else if constexpr (L == 1) return __ldcg(reinterpret_cast<const uint4*>(p));
  else {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
  }
}

// A warp's walk over its `count` rounds, D in flight: issue(u, j) loads
// round j into slot u (zeros past count), fold(u, acc) folds slot u's words
// into the warp's xor once the round is in, and the slot is loaded again D rounds
// on. The xor is stored only if it hits a constant, so nothing is dropped.
template <u32 D, typename C, typename Issue, typename Fold>
__device__ __forceinline__ void walk(C count, Issue&& issue, Fold&& fold, u32* out) {
  u32 acc = 0;
#pragma unroll
  for (u32 u = 0; u < D; ++u) issue(u, C(u));
  for (C j = 0; j < count; j += D) {
#pragma unroll
    for (u32 u = 0; u < D; ++u) {
      if (j + u < count) fold(u, acc);
      issue(u, j + u + D);
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// The words of a gc-style slot (rows a and b, then the scale and bias pairs) folded into acc by xor.
template <u32 D, u32 V>
__device__ __forceinline__ void fold_slot(const uint4 (&qa)[D][V], const uint4 (&qb)[D][V], const u32 (&sp)[D][2], const u32 (&bp)[D][2], u32 u,
                                          u32& acc) {
#pragma unroll
  for (u32 v = 0; v < V; ++v) acc ^= qa[u][v].x ^ qa[u][v].y ^ qa[u][v].z ^ qa[u][v].w ^ qb[u][v].x ^ qb[u][v].y ^ qb[u][v].z ^ qb[u][v].w;
  acc ^= sp[u][0] ^ sp[u][1] ^ bp[u][0] ^ bp[u][1];
}

// SPREAD: gcs (a lane's loads at 16 t + 64 v) instead of gc's 64 t + 16 v.
// BW: warps a block (4, the engine's; more: a block of W warps a tile).
template <u32 W, u32 D, bool SPREAD, u32 L = 0, u32 BW = 4>
__global__ void __launch_bounds__(32 * BW) gc_read(const unsigned char* w, const unsigned short* sc, const unsigned short* bi, u32 N, u32 K, u32* out) {
  constexpr u32 V = 4, TPB = BW / W;
  const u32 G = K / 64, R = (G + 7) / 8;
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const u32 tile = blockIdx.x * TPB + warp / W, part = warp % W, row0 = tile * 16;
  const u32 mine = row0 < N && part < R ? (R - part + W - 1) / W : 0;
  const u32 ra = min(row0 + g, N - 1), rb = min(row0 + g + 8, N - 1);
  const unsigned char* wa = w + u64(ra) * (K / 2);
  const unsigned char* wb = w + u64(rb) * (K / 2);
  uint4 qa[D][V], qb[D][V];
  u32 sp[D][2], bp[D][2];
  auto pair = [&](const unsigned short* p, u32 r, u32 i, bool ok) { return ok ? u32(p[u64(r) * G + i]) | (u32(p[u64(r) * G + i + 1]) << 16) : 0u; };
  auto issue = [&](u32 u, u32 j) {
    const u32 rd = part + j * W, g0 = rd * 8 + 2 * t;
#pragma unroll
    for (u32 v = 0; v < V; ++v) {
      const u32 off = SPREAD ? rd * 256 + 16 * t + 64 * v : g0 * 32 + v * 16;
      const bool ok = j < mine && (SPREAD ? rd * 8 + 2 * v < G : g0 + v / 2 < G);
      qa[u][v] = ok ? ld16<L>(wa + off) : make_uint4(0, 0, 0, 0);
      qb[u][v] = ok ? ld16<L>(wb + off) : make_uint4(0, 0, 0, 0);
    }
    const bool ok = j < mine && g0 + 1 < G;
    sp[u][0] = pair(sc, ra, g0, ok); sp[u][1] = pair(sc, rb, g0, ok);
    bp[u][0] = pair(bi, ra, g0, ok); bp[u][1] = pair(bi, rb, g0, ok);
  };
  walk<D>(mine, issue, [&](u32 u, u32& acc) { fold_slot<D, V>(qa, qb, sp, bp, u, acc); }, out);
}

// The engine's rounds with the codes repacked so that a warp's round is 4
// KB contiguous and each of its 8 load instructions reads 512 contiguous
// bytes (layout [tile][round][load][lane] of 16 bytes: what a lane needs
// for its mma, in the order it loads it), the scale and bias pairs as gc.
template <u32 W, u32 D>
__global__ void __launch_bounds__(128) packed_read(const unsigned char* w, const unsigned short* sc, const unsigned short* bi, u32 N, u32 K, u32* out) {
  constexpr u32 V = 4, TPB = 4 / W;
  const u32 G = K / 64, R = (G + 7) / 8;
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const u32 tile = blockIdx.x * TPB + warp / W, part = warp % W, row0 = tile * 16;
  const u32 mine = row0 < N && part < R ? (R - part + W - 1) / W : 0;
  const u32 ra = min(row0 + g, N - 1), rb = min(row0 + g + 8, N - 1);
  const uint4* base = reinterpret_cast<const uint4*>(w) + u64(min(tile, (N - 1) / 16)) * R * 256;
  uint4 qa[D][V], qb[D][V];
  u32 sp[D][2], bp[D][2];
  auto pair = [&](const unsigned short* p, u32 r, u32 i, bool ok) { return ok ? u32(p[u64(r) * G + i]) | (u32(p[u64(r) * G + i + 1]) << 16) : 0u; };
  auto issue = [&](u32 u, u32 j) {
    const u32 rd = part + j * W, g0 = rd * 8 + 2 * t;
    const uint4* r = base + u64(rd) * 256 + lane;
#pragma unroll
    for (u32 v = 0; v < V; ++v) {
      const bool ok = j < mine;
      qa[u][v] = ok ? __ldcs(r + v * 32) : make_uint4(0, 0, 0, 0);
      qb[u][v] = ok ? __ldcs(r + (V + v) * 32) : make_uint4(0, 0, 0, 0);
    }
    const bool ok = j < mine && g0 + 1 < G;
    sp[u][0] = pair(sc, ra, g0, ok); sp[u][1] = pair(sc, rb, g0, ok);
    bp[u][0] = pair(bi, ra, g0, ok); bp[u][1] = pair(bi, rb, g0, ok);
  };
  walk<D>(mine, issue, [&](u32 u, u32& acc) { fold_slot<D, V>(qa, qb, sp, bp, u, acc); }, out);
}

// Codes with their scales and biases repacked beside them (packed9): a
// unit is a (tile, round), 9 x 512 contiguous bytes, lane l's 16 bytes of
// each 512 being what it loads for its mma (8 code loads, then its rows'
// scale and bias pairs). Folded by xor, D units a warp in flight. STREAM 0:
// the engine's walk (W warps a tile, a warp its tile's rounds part, part +
// W, ...); 1: a persistent grid, each warp a contiguous run of the units in
// tile-major order; 2: a persistent grid, units grid-strided over the
// warps (what all warps read at a time is contiguous).
template <u32 STREAM, u32 W, u32 D>
__global__ void __launch_bounds__(128) packed9_read(const uint4* w, u32 N, u32 K, u32* out) {
  const u32 G = K / 64, R = (G + 7) / 8, tiles = (N + 15) / 16;
  const u64 units = u64(tiles) * R;
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u64 nw = u64(gridDim.x) * 4, gw = u64(blockIdx.x) * 4 + warp;
  u64 first, count, step;
  if (STREAM == 0) {
    const u32 tile = blockIdx.x * (4 / W) + warp / W, part = warp % W;
    first = u64(tile) * R + part;
    count = tile < tiles && part < R ? (R - part + W - 1) / W : 0;
    step = W;
  } else if (STREAM == 1) {
    first = gw * units / nw;
    count = (gw + 1) * units / nw - first;
    step = 1;
  } else {
    first = gw;
    count = gw < units ? (units - gw + nw - 1) / nw : 0;
    step = nw;
  }
  uint4 q[D][9];
  auto issue = [&](u32 u, u64 j) {
    const uint4* r = w + (first + j * step) * 288 + lane;
#pragma unroll
    for (u32 v = 0; v < 9; ++v) q[u][v] = j < count ? __ldcs(r + v * 32) : make_uint4(0, 0, 0, 0);
  };
  walk<D>(count, issue, [&](u32 u, u32& acc) {
#pragma unroll
    for (u32 v = 0; v < 9; ++v) acc ^= q[u][v].x ^ q[u][v].y ^ q[u][v].z ^ q[u][v].w;
  }, out);
}

// A warp reads R rows whole: lane l a 16-byte chunk l + 32 i of the row,
// 4 loads in flight, and the row's scales and biases (lane l group l).
template <u32 R>
__global__ void __launch_bounds__(128) row_read(const unsigned char* w, const unsigned short* sc, const unsigned short* bi, u32 N, u32 K, u32* out) {
  const u32 lane = threadIdx.x & 31, warp = blockIdx.x * 4 + (threadIdx.x >> 5);
  const u32 row0 = warp * R;
  if (row0 >= N) return;
  const u32 G = K / 64, chunks = K / 32;  // 16-byte chunks a row
  u32 acc = 0;
#pragma unroll
  for (u32 r = 0; r < R; ++r) {
    const u32 row = min(row0 + r, N - 1);
    const uint4* wr = reinterpret_cast<const uint4*>(w + u64(row) * (K / 2));
    u32 c = lane;
    for (; c + 96 < chunks; c += 128) {
      uint4 a = __ldcs(wr + c), b = __ldcs(wr + c + 32), d = __ldcs(wr + c + 64), e = __ldcs(wr + c + 96);
      acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ d.x ^ d.y ^ d.z ^ d.w ^ e.x ^ e.y ^ e.z ^ e.w;
    }
    for (; c < chunks; c += 32) { uint4 a = __ldcs(wr + c); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
    for (u32 i = lane; i < G; i += 32) acc ^= sc[u64(row) * G + i] ^ (u32(bi[u64(row) * G + i]) << 16);
  }
  if (acc == 0x12345678u) out[0] = acc;
}

int main() {
  int dev = 0, sms = 0, smem_sm = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, dev));
  printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  u32* out; CK(cudaMalloc(&out, 4));
  copy_ceiling_gbs();
  for (const DecodeShape& s : DECODE_SHAPES) {
    const u64 cb = u64(s.N) * s.K / 2, sb = u64(s.N) * (s.K / 64) * 2;
    const double bytes = double(cb + 2 * sb);
    const int copies = copies_out_of_l2(bytes);
    std::vector<unsigned char*> W(copies);
    std::vector<unsigned short*> S(copies), B(copies);
    for (int c = 0; c < copies; ++c) {
      // The packed forms' rounds are whole (8 groups) and packed9 holds the scales and biases too:
      // the buffer is that large (at K 5376 the tiles run past the codes' bytes).
      const u64 cpad = std::max<u64>(cb, u64((s.N + 15) / 16) * ((s.K / 64 + 7) / 8) * 4608);
      CK(cudaMalloc(&W[c], cpad)); CK(cudaMalloc(&S[c], sb)); CK(cudaMalloc(&B[c], sb));
      CK(cudaMemset(W[c], c + 1, cpad)); CK(cudaMemset(S[c], 3, sb)); CK(cudaMemset(B[c], 5, sb));
    }
    printf("\n%s: %.2f MB (codes %.2f), %d copies\n", s.name, bytes / 1e6, cb / 1e6, copies);
    int c = 0;
    auto report = [&](const char* form, int bps, float us) {
      printf("  %-34s %2d/SM  %8.2f us  %6.0f GB/s\n", form, bps, us, bytes / us / 1e3);
    };
    // The blocks an SM a kernel gets at smem bytes of dynamic shared memory.
    auto occ = [&](auto kern, int threads, int smem) {
      int n = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, threads, smem));
      return n;
    };
    // seq: 4 blocks of 256 an SM, and 8.
    for (int bps : {4, 8}) {
      const u64 n = cb / 16;
      const float us = timeit([&] { seq_read<<<sms * bps, 256>>>(reinterpret_cast<const uint4*>(W[c]), n, out); c = (c + 1) % copies; }, 40);
      CK(cudaGetLastError());
      report("seq (codes only)", bps, us);
    }
    auto occ_smem = [&](int bps) { return bps >= 16 ? 0 : (smem_sm / bps) - 1024 - 64; };
    auto gc = [&](auto kern, const char* form, u32 Wp) {
      for (int bps : {4, 8, 16}) {
        const int smem = occ_smem(bps);
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        const u32 tiles = (s.N + 15) / 16, blocks = (tiles * Wp + 3) / 4;
        const float us = timeit([&] { kern<<<blocks, 128, smem>>>(W[c], S[c], B[c], s.N, s.K, out); c = (c + 1) % copies; }, 40);
        CK(cudaGetLastError());
        report(form, occ(kern, 128, smem), us);
      }
    };
    gc(gc_read<1, 2, false>, "gc W 1 D 2", 1);
    gc(gc_read<2, 2, false>, "gc W 2 D 2", 2);
    gc(gc_read<4, 2, false>, "gc W 4 D 2", 4);
    gc(gc_read<2, 3, false>, "gc W 2 D 3", 2);
    gc(gc_read<2, 1, false>, "gc W 2 D 1", 2);
    gc(gc_read<4, 1, false>, "gc W 4 D 1", 4);
    gc(gc_read<2, 2, true>, "gcs W 2 D 2", 2);
    gc(gc_read<4, 2, true>, "gcs W 4 D 2", 4);
    // The engine's own dynamic shared memory (x as bf16 pairs, its group sums,
    // zeros, the reduction: about K * 2 + 1 KB), which takes that much of the
    // SM's L1 for shared memory, against none; load kinds cs / cg / na.
    auto gck = [&](auto kern, const char* form, u32 Wp) {
      for (int smem : {0, int(s.K) * 2 + 1024}) {
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        const u32 tiles = (s.N + 15) / 16, blocks = (tiles * Wp + 3) / 4;
        const float us = timeit([&] { kern<<<blocks, 128, smem>>>(W[c], S[c], B[c], s.N, s.K, out); c = (c + 1) % copies; }, 40);
        CK(cudaGetLastError());
        char name[96];
        snprintf(name, sizeof name, "%s, smem %d", form, smem);
        report(name, occ(kern, 128, smem), us);
      }
    };
    gck(gc_read<2, 2, false, 0>, "gc W 2 D 2 cs", 2);
    gck(gc_read<2, 2, false, 1>, "gc W 2 D 2 cg", 2);
    gck(gc_read<2, 2, false, 2>, "gc W 2 D 2 na", 2);
    gck(gc_read<4, 2, false, 0>, "gc W 4 D 2 cs", 4);
    gck(gc_read<4, 2, false, 1>, "gc W 4 D 2 cg", 4);
    gck(gc_read<4, 2, false, 2>, "gc W 4 D 2 na", 4);
    gck(gc_read<2, 1, false, 1>, "gc W 2 D 1 cg", 2);
    gck(gc_read<2, 2, true, 1>, "gcs W 2 D 2 cg", 2);
    // A tile's rounds all in flight at once (W warps a tile, a block a tile,
    // W x D >= the rounds of a row at K 5120), so what the grid reads at a
    // time is whole tiles (16 consecutive rows, contiguous) instead of a
    // 256-byte window of every row.
    auto tile = [&](auto kern, const char* form, u32 Wp) {
      const u32 blocks = (s.N + 15) / 16;
      const float us = timeit([&] { kern<<<blocks, 32 * Wp, 0>>>(W[c], S[c], B[c], s.N, s.K, out); c = (c + 1) % copies; }, 40);
      CK(cudaGetLastError());
      report(form, occ(kern, 32 * Wp, 0), us);
    };
    tile(gc_read<4, 2, false, 0, 4>, "tile W 4 D 2 (block of 4)", 4);
    // Repacked codes (each tile's rounds contiguous): the engine's grids.
    auto packed = [&](auto kern, const char* form, u32 Wp) {
      const u32 tiles = (s.N + 15) / 16, blocks = (tiles * Wp + 3) / 4;
      const float us = timeit([&] { kern<<<blocks, 128, 0>>>(W[c], S[c], B[c], s.N, s.K, out); c = (c + 1) % copies; }, 40);
      CK(cudaGetLastError());
      report(form, occ(kern, 128, 0), us);
    };
    packed(packed_read<1, 2>, "packed W 1 D 2", 1);
    packed(packed_read<2, 2>, "packed W 2 D 2", 2);
    packed(packed_read<4, 2>, "packed W 4 D 2", 4);
    packed(packed_read<2, 1>, "packed W 2 D 1", 2);
    packed(packed_read<4, 1>, "packed W 4 D 1", 4);
    // packed9: the engine's walk, then the persistent streams (B blocks an SM).
    auto p9 = [&](auto kern, const char* form, u32 blocks) {
      const float us = timeit([&] { kern<<<blocks, 128, 0>>>(reinterpret_cast<const uint4*>(W[c]), s.N, s.K, out); c = (c + 1) % copies; }, 40);
      CK(cudaGetLastError());
      report(form, occ(kern, 128, 0), us);
    };
    const u32 tiles16 = (s.N + 15) / 16;
    p9(packed9_read<0, 2, 2>, "packed9 walk W 2 D 2", (tiles16 * 2 + 3) / 4);
    p9(packed9_read<0, 4, 2>, "packed9 walk W 4 D 2", tiles16);
    for (u32 bps : {4u, 8u}) {
      char name[64];
      snprintf(name, sizeof name, "packed9 runs D 2, %u an SM", bps);
      p9(packed9_read<1, 1, 2>, name, sms * bps);
      snprintf(name, sizeof name, "packed9 strided D 2, %u an SM", bps);
      p9(packed9_read<2, 1, 2>, name, sms * bps);
      snprintf(name, sizeof name, "packed9 strided D 1, %u an SM", bps);
      p9(packed9_read<2, 1, 1>, name, sms * bps);
    }
    tile(gc_read<8, 1, false, 0, 8>, "tile W 8 D 1", 8);
    tile(gc_read<8, 2, false, 0, 8>, "tile W 8 D 2", 8);
    tile(gc_read<16, 1, false, 0, 16>, "tile W 16 D 1", 16);
    tile(gc_read<16, 2, false, 0, 16>, "tile W 16 D 2", 16);
    tile(gc_read<32, 1, false, 0, 32>, "tile W 32 D 1", 32);
    auto row = [&](auto kern, const char* form, u32 R) {
      for (int bps : {4, 8, 16}) {
        const int smem = occ_smem(bps);
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        const u32 warps = (s.N + R - 1) / R, blocks = (warps + 3) / 4;
        const float us = timeit([&] { kern<<<blocks, 128, smem>>>(W[c], S[c], B[c], s.N, s.K, out); c = (c + 1) % copies; }, 40);
        CK(cudaGetLastError());
        report(form, occ(kern, 128, smem), us);
      }
    };
    row(row_read<1>, "row R 1", 1);
    row(row_read<2>, "row R 2", 2);
    for (int k = 0; k < copies; ++k) { CK(cudaFree(W[k])); CK(cudaFree(S[k])); CK(cudaFree(B[k])); }
  }
  return 0;
}
