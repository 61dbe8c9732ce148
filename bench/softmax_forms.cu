// The vocabulary softmax's forms outside the library (f32 rows of 262144):
// two passes over a scratch of per-slice (max, sum) pairs, the second pass
// with its loads before or after its programmatic-launch wait, against one
// thread-block cluster a row (8 or 16 blocks of 512 or 1024 threads, each
// slice held in registers, the slices' pairs merged through distributed
// shared memory), each with programmatic dependent launch off and on; one
// dispatch streaming the rows over a persistent grid (st_softmax, below:
// launch shapes, loads ahead, release atomics, load hints), and the same
// with each unit moved by the bulk-copy engine through shared-memory stages
// (bt_softmax; with SOFTMAX false, its pipeline without the arithmetic); two copy
// kernels and a device copy of the same bytes; each timed by back-to-back
// launches and, where it says "graph", in one CUDA graph. Each form is
// checked against a float64 softmax. Results and reading:
// bench/notes/glue-speed-2026-11-26b.md, bench/notes/softmax-stream-2026-11-27.md.
// The argument "bulk" runs the bulk forms, st_softmax's two best launches
// and the copies only.
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -o /tmp/softmax_forms bench/softmax_forms.cu && /tmp/softmax_forms [bulk]
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <string>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#include "harness.cuh"

// The block's max over its held vectors r and sum of exp(v - max), as
// (max, sum) in every thread; r becomes exp(v - max). Begins with a barrier,
// so sh may still be in use by the caller's previous reduction.
template <int V>
__device__ __forceinline__ float2 block_exp_sum(float4 (&r)[V], float* sh) {
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < V; ++j) m = fmaxf(m, fmaxf(fmaxf(r[j].x, r[j].y), fmaxf(r[j].z, r[j].w)));
  __syncthreads();
  const float mb = bmax(m, sh);
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < V; ++j) { r[j].x = __expf(r[j].x - mb); r[j].y = __expf(r[j].y - mb); r[j].z = __expf(r[j].z - mb); r[j].w = __expf(r[j].w - mb); s += (r[j].x + r[j].y) + (r[j].z + r[j].w); }
  return make_float2(mb, bsum(s, sh));
}

// One cluster of C blocks a row; each thread holds V float4.
template <int V>
__global__ void __launch_bounds__(1024, 1) cl_softmax(const float* x, float* y, int cols, int C, int pdl) {
  __shared__ float sh[32];
  __shared__ float2 pair;
  if (pdl) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  cg::cluster_group cl = cg::this_cluster();
  const int rank = cl.block_rank();
  const int row = blockIdx.x / C;
  const int slice = cols / C;
  const float4* xs = reinterpret_cast<const float4*>(x + size_t(row) * cols + size_t(rank) * slice);
  float4* ys = reinterpret_cast<float4*>(y + size_t(row) * cols + size_t(rank) * slice);
  const int nv = slice / 4;
  float4 r[V];
#pragma unroll
  for (int c = 0; c < V; ++c) { int i = threadIdx.x + c * blockDim.x; r[c] = i < nv ? xs[i] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY); }
  const float2 ms = block_exp_sum(r, sh);
  const float mb = ms.x;
  if (threadIdx.x == 0) pair = ms;
  cl.sync();
  float M = -INFINITY, S = 0.f;
  const int lane = threadIdx.x & 31;
  if (lane < C) { float2 p = *cl.map_shared_rank(&pair, lane); M = p.x; S = p.y; }
  float Mx = wmax(M);
  float t = lane < C ? S * __expf(M - Mx) : 0.f;
  float St = wsum(t);
  const float f = __expf(mb - Mx) / St;
  // keep our smem alive until every block read it
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#pragma unroll
  for (int c = 0; c < V; ++c) { int i = threadIdx.x + c * blockDim.x; if (i < nv) { float4 v = r[c]; v.x *= f; v.y *= f; v.z *= f; v.w *= f; ys[i] = v; } }
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Two passes: blocks of 256 threads, 2048 elements each (8 a thread).
__global__ void tp_blocks(const float* x, float2* part, int cols, int nb, int pdl) {
  __shared__ float sh[32];
  if (pdl) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  const int b = blockIdx.x, row = blockIdx.y;
  const float4* xs = reinterpret_cast<const float4*>(x + size_t(row) * cols + size_t(b) * 2048);
  float4 r0 = xs[threadIdx.x], r1 = xs[threadIdx.x + 256];
  float m = fmaxf(fmaxf(fmaxf(r0.x, r0.y), fmaxf(r0.z, r0.w)), fmaxf(fmaxf(r1.x, r1.y), fmaxf(r1.z, r1.w)));
  const float mb = bmax(m, sh);
  __syncthreads();
  float s = __expf(r0.x - mb) + __expf(r0.y - mb) + __expf(r0.z - mb) + __expf(r0.w - mb) + __expf(r1.x - mb) + __expf(r1.y - mb) + __expf(r1.z - mb) + __expf(r1.w - mb);
  const float sb = bsum(s, sh);
  if (threadIdx.x == 0) part[size_t(row) * nb + b] = make_float2(mb, sb);
}
// The second pass; late: the slice's loads go out before the wait on the
// first pass (x is not written by it; only the pairs are).
__global__ void tp_finish(const float* x, const float2* part, float* y, int cols, int nb, int pdl, int late) {
  if (pdl && !late) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  const int b = blockIdx.x, row = blockIdx.y;
  const float4* xs = reinterpret_cast<const float4*>(x + size_t(row) * cols + size_t(b) * 2048);
  float4* ys = reinterpret_cast<float4*>(y + size_t(row) * cols + size_t(b) * 2048);
  float4 r0 = xs[threadIdx.x], r1 = xs[threadIdx.x + 256];
  if (pdl && late) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  float M = -INFINITY, S = 0.f;
  for (int i = threadIdx.x & 31; i < nb; i += 32) { float2 p = part[size_t(row) * nb + i]; float mx = fmaxf(M, p.x); S = S * __expf(M - mx) + p.y * __expf(p.x - mx); M = mx; }
  for (int o = 16; o; o >>= 1) { float mo = __shfl_xor_sync(~0u, M, o), so = __shfl_xor_sync(~0u, S, o); float mx = fmaxf(M, mo); S = S * __expf(M - mx) + so * __expf(mo - mx); M = mx; }
  const float inv = 1.f / S;
  r0.x = __expf(r0.x - M) * inv; r0.y = __expf(r0.y - M) * inv; r0.z = __expf(r0.z - M) * inv; r0.w = __expf(r0.w - M) * inv;
  r1.x = __expf(r1.x - M) * inv; r1.y = __expf(r1.y - M) * inv; r1.z = __expf(r1.z - M) * inv; r1.w = __expf(r1.w - M) * inv;
  ys[threadIdx.x] = r0; ys[threadIdx.x + 256] = r1;
}


// One dispatch, rows streamed: a persistent grid of G blocks (all resident)
// takes units u = blockIdx.x + i G in order, a unit being a slice of T x 4V
// elements of row u / U. A block holds its slice in registers, writes the
// slice's (max, sum), arrives at its row's word (the slice-0 block adds
// 2^31 - (U - 1), the others 1: the top bit flips once all U arrived, the
// low bits return to 0), waits for the flip, folds the row's U pairs from L2
// and writes its slice. Row r's units come before any unit of a later row in
// every block's order and G >= U, so the wait always ends. Blocks at
// different units keep both DRAM directions busy.
__device__ __forceinline__ float4 ld256(const float4* p) { float4 v; asm volatile("ld.global.nc.L2::256B.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ float4 ld128na(const float4* p) { float4 v; asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
// A streamed unit's statistics, every thread of the block holding V float4
// of it in r: the block's max and sum of exp (block_exp_sum), the
// unit's pair written and its arrival at the row's word (the slice-0 block
// adds 2^31 - (U - 1), the others 1: the top bit flips when all U have
// arrived, the low bits return to 0; REL: a release atomic and a back-off
// in the poll, else a fence and a relaxed atomic), the wait for the flip,
// the row's U pairs folded from L2 in every warp. Returns the factor each
// held exp is scaled by.
template <int V, bool REL>
__device__ __forceinline__ float unit_stats(float4 (&r)[V], int u, int row, int c, int U, float2* part, unsigned* word, float* sh) {
  const float2 ms = block_exp_sum(r, sh);
  const float mb = ms.x;
  if (threadIdx.x == 0) {
    __stcg(part + u, ms);
    const unsigned inc = c == 0 ? 0x80000000u - unsigned(U - 1) : 1u;
    unsigned old;
    if (REL) asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(word + row), "r"(inc) : "memory");
    else { __threadfence(); old = atomicAdd(word + row, inc); }
    const unsigned b0 = old >> 31;
    while ((ld_acquire(word + row) >> 31) == b0) { if (REL) __nanosleep(32); }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  float M = -INFINITY, S = 0.f;
  for (int i = lane; i < U; i += 32) { float2 p = __ldcg(part + size_t(row) * U + i); float mx = fmaxf(M, p.x); S = S * __expf(M - mx) + p.y * __expf(p.x - mx); M = mx; }
  for (int o = 16; o; o >>= 1) { float mo = __shfl_xor_sync(~0u, M, o), so = __shfl_xor_sync(~0u, S, o); float mx = fmaxf(M, mo); S = (mx == -INFINITY) ? 0.f : S * __expf(M - mx) + so * __expf(mo - mx); M = mx; }
  return __expf(mb - M) / S;
}

template <int T, int V, int PF, int REL, int H = 0>
__global__ void __launch_bounds__(T) st_softmax(const float* x, float* y, float2* part, unsigned* word, int rows, int cols, int pdl) {
  __shared__ float sh[32];
  extern __shared__ float4 buf[];  // PF: two stages of T x V vectors
  if (pdl) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  const int per = T * 4 * V, U = cols / per;
  const int units = rows * U;
  auto issue = [&](int u, int stage) {
    const int row = u / U, c = u - row * U;
    const float4* xs = reinterpret_cast<const float4*>(x + size_t(row) * cols + size_t(c) * per);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      unsigned d = unsigned(__cvta_generic_to_shared(buf + stage * T * V + threadIdx.x + j * T));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(xs + threadIdx.x + j * T) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  int stage = 0;
  if (PF && blockIdx.x < units) issue(blockIdx.x, 0);
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int row = u / U, c = u - row * U;
    float4* ys = reinterpret_cast<float4*>(y + size_t(row) * cols + size_t(c) * per);
    float4 r[V];
    if (PF) {
      if (u + int(gridDim.x) < units) { issue(u + gridDim.x, stage ^ 1); asm volatile("cp.async.wait_group 1;" ::: "memory"); }
      else asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = buf[stage * T * V + threadIdx.x + j * T];
      stage ^= 1;
    } else {
      const float4* xs = reinterpret_cast<const float4*>(x + size_t(row) * cols + size_t(c) * per);
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = H == 0 ? __ldcs(xs + threadIdx.x + j * T) : H == 1 ? ld256(xs + threadIdx.x + j * T) : ld128na(xs + threadIdx.x + j * T);
    }
    const float f = unit_stats<V, REL>(r, u, row, c, U, part, word, sh);
#pragma unroll
    for (int j = 0; j < V; ++j) { float4 v = r[j]; v.x *= f; v.y *= f; v.z *= f; v.w *= f; __stcs(ys + threadIdx.x + j * T, v); }
  }
}
// One dispatch, rows streamed as st_softmax (bt_softmax), each unit's slice moved by the
// Hopper bulk-copy engine (cp.async.bulk, no tensor map): thread 0 loads the
// block's next S units into S shared-memory stages ahead (an mbarrier a
// stage, its phase flipping with each use), the block reads a stage into
// registers, reduces, arrives and waits as st_softmax, writes the scaled
// values back into the stage, and thread 0 stores the stage to y with one
// bulk store; the stage of the unit before is loaded again once its store
// has read it (wait_group.read 1), so S - 1 loads and one store are in flight
// a block behind the unit in use. SOFTMAX false: the same pipeline without the
// arithmetic, the bulk engine's copy ceiling. rows x cols a multiple of SL.

template <int T, int SL, int S, bool SOFTMAX>
__global__ void __launch_bounds__(T) bt_softmax(const float* x, float* y, float2* part, unsigned* word, int rows, int cols, int pdl) {
  extern __shared__ __align__(128) float4 stage[];  // S x SL floats
  __shared__ __align__(8) unsigned long long bars[S];
  __shared__ float sh[33];
  constexpr int V = SL / 4 / T;
  constexpr unsigned BYTES = SL * 4u;
  if (pdl) { asm volatile("griddepcontrol.wait;" ::: "memory"); asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  const int U = cols / SL, units = rows * U, G = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) bar_init(&bars[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int s = 0; s < S; ++s) { const int u = blockIdx.x + s * G; if (u < units) bulk_load(stage + s * (SL / 4), x + size_t(u) * SL, BYTES, &bars[s]); }
  }
  __syncthreads();
  int i = 0;
  for (int u = blockIdx.x; u < units; u += G, ++i) {
    const int s = i % S;
    float4* b = stage + s * (SL / 4);
    if (SOFTMAX || threadIdx.x == 0) bar_wait(&bars[s], unsigned(i / S) & 1u);
    if (SOFTMAX) {
      const int row = u / U, c = u - row * U;
      float4 r[V];
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = b[threadIdx.x + j * T];
      const float f = unit_stats<V, true>(r, u, row, c, U, part, word, sh);
#pragma unroll
      for (int j = 0; j < V; ++j) { float4 v = r[j]; v.x *= f; v.y *= f; v.z *= f; v.w *= f; b[threadIdx.x + j * T] = v; }
      fence_async_smem();
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      bulk_store(y + size_t(u) * SL, b, BYTES);
      if (i >= 1) {
        const int un = u + (S - 1) * G;  // the unit after the one before, S on
        if (un < units) { bulk_wait_read<1>(); bulk_load(stage + ((i - 1) % S) * (SL / 4), x + size_t(un) * SL, BYTES, &bars[(i - 1) % S]); }
      }
    }
  }
  if (threadIdx.x == 0) bulk_wait_all();
}
__global__ void copy16(const float4* x, float4* y, size_t n) {
  for (size_t i = (blockIdx.x * size_t(blockDim.x)) * 4 + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x * 4) {
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) if (i + j * blockDim.x < n) v[j] = ld256(x + i + j * blockDim.x);
#pragma unroll
    for (int j = 0; j < 4; ++j) if (i + j * blockDim.x < n) __stcs(y + i + j * blockDim.x, v[j]);
  }
}
__global__ void copy4(const float4* x, float4* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) y[i] = x[i];
}





int main(int argc, char** argv) {
  // "bulk": the bulk-copy forms, st_softmax's two best launches and the copies only.
  const bool bulk_only = argc > 1 && std::string(argv[1]) == "bulk";
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int cols = 262144;
  for (int rows : {1, 64}) {
    size_t n = size_t(rows) * cols;
    std::vector<float> hx(n); srand(1); for (auto& v : hx) v = (rand() / float(RAND_MAX)) * 20.f - 10.f;
    float *dx, *dy; float2* dp; CK(cudaMalloc(&dx, n * 4)); CK(cudaMalloc(&dy, n * 4)); CK(cudaMalloc(&dp, rows * 128 * 8));
    CK(cudaMemcpy(dx, hx.data(), n * 4, cudaMemcpyHostToDevice));
    const double bytes = 8.0 * n;
    for (int pdl : {0, 1}) {
      if (bulk_only) break;
      // two passes; late: the finish's loads before its wait
      for (int late : {0, 1}) {
        const int nb = cols / 2048;
        auto gs = [&](cudaStream_t st) {
          cudaLaunchConfig_t c = {}; c.gridDim = dim3(nb, rows); c.blockDim = dim3(256); c.stream = st; cudaLaunchAttribute a[1]; int k = 0;
          if (pdl) { a[k].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[k].val.programmaticStreamSerializationAllowed = 1; ++k; }
          c.attrs = a; c.numAttrs = k;
          CK(cudaLaunchKernelEx(&c, tp_blocks, (const float*)dx, dp, cols, nb, pdl));
          CK(cudaLaunchKernelEx(&c, tp_finish, (const float*)dx, (const float2*)dp, dy, cols, nb, pdl, late));
        };
        auto go = [&]() { gs(0); };
        CK(cudaMemset(dy, 0xff, n * 4)); go(); CK(cudaDeviceSynchronize());
        double err = softmax_check(hx, dy, rows, cols);
        float us = timeit(go, 200);
        float ug = timeg(gs, 100);
        printf("rows %2d two passes%s pdl %d: %8.2f us  %6.0f GB/s  err %.2e  graph %8.2f us\n", rows, late ? " late  " : "       ", pdl, us, bytes / us / 1e3, err, ug);
      }
      for (int C : {8, 16}) for (int threads : {512, 1024}) {
        const int per = cols / C / 4 / threads;  // float4 a thread
        auto kern = per == 16 ? cl_softmax<16> : per == 8 ? cl_softmax<8> : per == 4 ? cl_softmax<4> : per == 2 ? cl_softmax<2> : nullptr;
        if (!kern) continue;
        if (C > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        auto go = [&]() {
          cudaLaunchConfig_t c = {}; c.gridDim = dim3(rows * C); c.blockDim = dim3(threads); cudaLaunchAttribute a[2]; int k = 0;
          a[k].id = cudaLaunchAttributeClusterDimension; a[k].val.clusterDim.x = C; a[k].val.clusterDim.y = 1; a[k].val.clusterDim.z = 1; ++k;
          if (pdl) { a[k].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[k].val.programmaticStreamSerializationAllowed = 1; ++k; }
          c.attrs = a; c.numAttrs = k;
          cudaError_t e = cudaLaunchKernelEx(&c, kern, (const float*)dx, dy, cols, C, pdl);
          if (e != cudaSuccess) { printf("launch C %d t %d: %s\n", C, threads, cudaGetErrorString(e)); exit(1); }
        };
        CK(cudaMemset(dy, 0xff, n * 4)); go(); CK(cudaDeviceSynchronize());
        double err = softmax_check(hx, dy, rows, cols);
        float us = timeit(go, 200);
        int ncl = 0; { cudaLaunchConfig_t c = {}; c.gridDim = dim3(rows * C); c.blockDim = dim3(threads); cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension; a[0].val.clusterDim.x = C; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1; c.attrs = a; c.numAttrs = 1; cudaOccupancyMaxActiveClusters(&ncl, kern, &c); }
        printf("rows %2d cluster %2d x %4d pdl %d: %8.2f us  %6.0f GB/s  err %.2e  (%d float4 a thread, %d clusters at once)\n", rows, C, threads, pdl, us, bytes / us / 1e3, err, per, ncl);
      }
    }

    // one dispatch, rows streamed
    {
      unsigned* dw; CK(cudaMalloc(&dw, rows * 4)); CK(cudaMemset(dw, 0, rows * 4));
      float2* dq; CK(cudaMalloc(&dq, size_t(rows) * 128 * 8));
      struct Cfg { void (*k)(const float*, float*, float2*, unsigned*, int, int, int); int T, V, PF, REL; };
      const Cfg cfgs[] = {
        {st_softmax<256, 8, 0, 1, 0>, 256, 8, 0, 1}, {st_softmax<256, 8, 0, 1, 1>, 256, 8, 0, 1}, {st_softmax<256, 8, 0, 1, 2>, 256, 8, 0, 1},
        {st_softmax<128, 16, 0, 1, 0>, 128, 16, 0, 1}, {st_softmax<128, 16, 0, 1, 1>, 128, 16, 0, 1}, {st_softmax<128, 16, 0, 1, 2>, 128, 16, 0, 1},
        {st_softmax<128, 8, 0, 1, 1>, 128, 8, 0, 1}, {st_softmax<64, 16, 0, 1, 1>, 64, 16, 0, 1},
      };
      for (const Cfg& cf : cfgs) for (int bps : {3, 4, 5, 6, 8, 10, 12}) {
        auto kern = cf.k; const int V = cf.V, T = cf.T;
        if (bulk_only && !(cf.REL == 1 && ((T == 256 && V == 8 && bps == 4 && cf.k == st_softmax<256, 8, 0, 1, 0>) || (T == 128 && V == 16 && bps == 5 && cf.k == st_softmax<128, 16, 0, 1, 2>)))) continue;
        const int smem = cf.PF ? 2 * T * V * 16 : 0;
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, T, smem));
        if (bps > occ) continue;
        const int per = T * 4 * V, U = cols / per;
        const int G = sms * bps;
        if (G < U) continue;
        for (int pdl : {0, 1}) {
          if (rows == 64 && pdl) continue;
          auto gs = [&](cudaStream_t st) {
            cudaLaunchConfig_t c = {}; c.gridDim = dim3(G); c.blockDim = dim3(T); c.stream = st; c.dynamicSmemBytes = smem; cudaLaunchAttribute a[1]; int k = 0;
            if (pdl) { a[k].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[k].val.programmaticStreamSerializationAllowed = 1; ++k; }
            c.attrs = a; c.numAttrs = k;
            CK(cudaLaunchKernelEx(&c, kern, (const float*)dx, dy, dq, dw, rows, cols, pdl));
          };
          auto go = [&]() { gs(0); };
          CK(cudaMemset(dy, 0xff, n * 4)); go(); CK(cudaDeviceSynchronize());
          double err = softmax_check(hx, dy, rows, cols);
          float us = timeit(go, 200);
          float ug = timeg(gs, 100);
          printf("rows %2d stream T %4d V %2d pf %d rel %d G %4d (%d/SM, occ %d) pdl %d: %8.2f us  %6.0f GB/s  err %.2e  graph %8.2f us\n", rows, T, V, cf.PF, cf.REL, G, bps, occ, pdl, us, bytes / us / 1e3, err, ug);
        }
      }
      CK(cudaFree(dw)); CK(cudaFree(dq));
    }
    // the bulk-copy forms
    {
      unsigned* dw; CK(cudaMalloc(&dw, rows * 4)); CK(cudaMemset(dw, 0, rows * 4));
      float2* dq; CK(cudaMalloc(&dq, size_t(rows) * 256 * 8));
      struct Bcfg { void (*k)(const float*, float*, float2*, unsigned*, int, int, int); int T, SL, S; bool sm; const char* name; };
      const Bcfg bcfgs[] = {
        {bt_softmax<256, 8192, 6, true>, 256, 8192, 6, true, "softmax"}, {bt_softmax<256, 8192, 3, true>, 256, 8192, 3, true, "softmax"},
        {bt_softmax<256, 8192, 2, true>, 256, 8192, 2, true, "softmax"},
        {bt_softmax<256, 4096, 12, true>, 256, 4096, 12, true, "softmax"}, {bt_softmax<256, 4096, 6, true>, 256, 4096, 6, true, "softmax"},
        {bt_softmax<256, 4096, 4, true>, 256, 4096, 4, true, "softmax"}, {bt_softmax<128, 4096, 3, true>, 128, 4096, 3, true, "softmax"},
        {bt_softmax<256, 2048, 8, true>, 256, 2048, 8, true, "softmax"},
        {bt_softmax<32, 8192, 6, false>, 32, 8192, 6, false, "copy"}, {bt_softmax<32, 8192, 3, false>, 32, 8192, 3, false, "copy"},
        {bt_softmax<32, 4096, 6, false>, 32, 4096, 6, false, "copy"}, {bt_softmax<32, 16384, 3, false>, 32, 16384, 3, false, "copy"},
      };
      for (const Bcfg& cf : bcfgs) for (int bps : {1, 2, 3, 4}) {
        const int smem = cf.S * cf.SL * 4;
        if (bps * (smem + 1024) > 227 * 1024) continue;
        CK(cudaFuncSetAttribute(cf.k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, cf.k, cf.T, smem));
        if (bps > occ) continue;
        const int U = cols / cf.SL, G = sms * bps;
        if (G < U) continue;
        for (int pdl : {0, 1}) {
          if (rows == 64 && pdl) continue;
          auto gs = [&](cudaStream_t st) {
            cudaLaunchConfig_t c = {}; c.gridDim = dim3(G); c.blockDim = dim3(cf.T); c.stream = st; c.dynamicSmemBytes = smem; cudaLaunchAttribute a[1]; int k = 0;
            if (pdl) { a[k].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[k].val.programmaticStreamSerializationAllowed = 1; ++k; }
            c.attrs = a; c.numAttrs = k;
            CK(cudaLaunchKernelEx(&c, cf.k, (const float*)dx, dy, dq, dw, rows, cols, pdl));
          };
          auto go = [&]() { gs(0); };
          CK(cudaMemset(dy, 0xff, n * 4)); go(); CK(cudaDeviceSynchronize());
          double err = 0;
          if (cf.sm) err = softmax_check(hx, dy, rows, cols);
          else { std::vector<float> hy(n); CK(cudaMemcpy(hy.data(), dy, n * 4, cudaMemcpyDeviceToHost)); for (size_t q = 0; q < n; ++q) if (hy[q] != hx[q]) { err = 1; break; } }
          float us = timeit(go, 200);
          float ug = timeg(gs, 100);
          printf("rows %2d bulk %-7s T %4d slice %5d stages %2d G %4d (%d/SM, occ %d) pdl %d: %8.2f us  %6.0f GB/s  err %.2e  graph %8.2f us\n", rows, cf.name, cf.T, cf.SL, cf.S, G, bps, occ, pdl, us, bytes / us / 1e3, err, ug);
        }
      }
      CK(cudaFree(dw)); CK(cudaFree(dq));
    }
    { auto gs = [&](cudaStream_t st) { copy16<<<sms * 8, 256, 0, st>>>((const float4*)dx, (float4*)dy, n / 4); }; auto go = [&]() { gs(0); }; float us = timeit(go, 200); float ug = timeg(gs, 100); printf("rows %2d copy16 kernel: %8.2f us  %6.0f GB/s  graph %8.2f us\n", rows, us, bytes / us / 1e3, ug); }
    { auto gs = [&](cudaStream_t st) { copy4<<<sms * 8, 256, 0, st>>>((const float4*)dx, (float4*)dy, n / 4); }; auto go = [&]() { gs(0); }; float us = timeit(go, 200); float ug = timeg(gs, 100); printf("rows %2d copy kernel: %8.2f us  %6.0f GB/s  graph %8.2f us\n", rows, us, bytes / us / 1e3, ug); }
    // copy ceiling
    { auto go = [&]() { CK(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice)); }; float us = timeit(go, 200); printf("rows %2d copy: %8.2f us  %6.0f GB/s\n", rows, us, bytes / us / 1e3); }
    CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dp));
  }
  return 0;
}
