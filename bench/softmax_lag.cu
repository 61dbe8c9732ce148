// The vocabulary softmax (f32 rows of 262144) as two phases a unit, lagged,
// in one dispatch: a persistent grid of G blocks (all resident) takes units
// u = blockIdx.x + i G (a unit: a slice of T x 4V elements of row u / U).
// Iteration i of a block runs phase A of unit a = blockIdx.x + i G (load
// the slice from DRAM, reduce it to its (max, sum of exp), write the pair,
// arrive at the row's word) and phase B of unit b = blockIdx.x + (i - L) G,
// the unit it took L iterations before (read the slice again, from L2
// where it should still be, wait until the row's word says every slice of
// the row arrived, fold the row's pairs, write exp(x - M) / S). A and B's
// loads are issued together, before either reduces. No block holds a slice
// while it waits: the bytes in flight are those of loads, as in a copy; the
// price is the second read, from L2 (G x 16L KB between the two reads).
//
// Forward progress: B of iteration i waits only on A's of iterations up to
// i + 1 (units of one row are consecutive and U <= G), which in every
// block's order come after B's of iterations below i + 1 - L < i only, so
// with L >= 1 and every block resident the waits end (same argument by
// induction on i). bench/softmax_forms.cu's st_softmax holds the slice in
// registers across its wait instead; run `softmax_forms bulk` beside this
// for its two best launches and the copies.
//
// H: the loads' L2 policy. 0: A by ld.global.nc, B by ld.cs (evict first);
// 1: A with an evict_last cache policy, B with evict_first.
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -o /tmp/softmax_lag bench/softmax_lag.cu && /tmp/softmax_lag
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>
#include "harness.cuh"

__device__ __forceinline__ unsigned ld_acq(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ unsigned long long policy_last() {
  unsigned long long p; asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p)); return p;
}
__device__ __forceinline__ unsigned long long policy_first() {
  unsigned long long p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p;
}
__device__ __forceinline__ float4 ld_pol(const float4* a, unsigned long long pol) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a), "l"(pol));
  return v;
}

template <int T, int V, int L, int H>
__global__ void __launch_bounds__(T) ab_softmax(const float* x, float* y, float2* part, unsigned* word, int rows, int cols) {
  __shared__ float sh[32];
  __shared__ unsigned olds[L + 1];  // the word as each pending unit's arrival found it (thread 0)
  __shared__ float2 rowst;
  const int per = T * 4 * V, U = cols / per, units = rows * U, G = gridDim.x;
  const int b0 = blockIdx.x;
  if (b0 >= units) return;
  const int iters = (units - 1 - b0) / G + 1 + L;
  unsigned long long pa = 0, pb = 0;
  if (H == 1) { pa = policy_last(); pb = policy_first(); }
  for (int i = 0; i < iters; ++i) {
    const int ua = b0 + i * G, ub = b0 + (i - L) * G;
    const bool doA = ua < units, doB = i >= L;
    float4 ra[V], rb[V];
    if (doA) {
      const float4* xs = reinterpret_cast<const float4*>(x + size_t(ua) * per);
#pragma unroll
      for (int j = 0; j < V; ++j) ra[j] = H == 1 ? ld_pol(xs + threadIdx.x + j * T, pa) : __ldg(xs + threadIdx.x + j * T);
    }
    if (doB) {
      const float4* xs = reinterpret_cast<const float4*>(x + size_t(ub) * per);
#pragma unroll
      for (int j = 0; j < V; ++j) rb[j] = H == 1 ? ld_pol(xs + threadIdx.x + j * T, pb) : __ldcs(xs + threadIdx.x + j * T);
    }
    if (doA) {
      const int row = ua / U, c = ua - row * U;
      float m = -INFINITY;
#pragma unroll
      for (int j = 0; j < V; ++j) m = fmaxf(m, fmaxf(fmaxf(ra[j].x, ra[j].y), fmaxf(ra[j].z, ra[j].w)));
      const float mb = bmax(m, sh);
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < V; ++j) s += (__expf(ra[j].x - mb) + __expf(ra[j].y - mb)) + (__expf(ra[j].z - mb) + __expf(ra[j].w - mb));
      __syncthreads();
      const float sb = bsum(s, sh);
      if (threadIdx.x == 0) {
        __stcg(part + ua, make_float2(mb, sb));
        const unsigned inc = c == 0 ? 0x80000000u - unsigned(U - 1) : 1u;
        unsigned old;
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(word + row), "r"(inc) : "memory");
        olds[i % (L + 1)] = old;
      }
    }
    if (doB) {
      const int row = ub / U;
      if (threadIdx.x == 0) {
        const unsigned bit = olds[(i - L) % (L + 1)] >> 31;
        while ((ld_acq(word + row) >> 31) == bit) __nanosleep(32);
      }
      __syncthreads();
      if (threadIdx.x < 32) {
        float M = -INFINITY, S = 0.f;
        for (int k = threadIdx.x; k < U; k += 32) {
          const float2 p = __ldcg(part + size_t(row) * U + k);
          const float mx = fmaxf(M, p.x);
          S = S * __expf(M - mx) + p.y * __expf(p.x - mx);
          M = mx;
        }
        for (int o = 16; o; o >>= 1) {
          const float mo = __shfl_xor_sync(~0u, M, o), so = __shfl_xor_sync(~0u, S, o);
          const float mx = fmaxf(M, mo);
          S = S * __expf(M - mx) + so * __expf(mo - mx);
          M = mx;
        }
        if (threadIdx.x == 0) rowst = make_float2(M, 1.f / S);
      }
      __syncthreads();
      const float2 st = rowst;
      float4* ys = reinterpret_cast<float4*>(y + size_t(ub) * per);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float4 v = rb[j];
        v.x = __expf(v.x - st.x) * st.y; v.y = __expf(v.y - st.x) * st.y; v.z = __expf(v.z - st.x) * st.y; v.w = __expf(v.w - st.x) * st.y;
        __stcs(ys + threadIdx.x + j * T, v);
      }
    } else {
      __syncthreads();  // sh is read by bsum's last step; the next A writes it
    }
  }
}


int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  const int cols = 262144;
  for (int rows : {1, 64}) {
    const size_t n = size_t(rows) * cols;
    std::vector<float> hx(n); srand(1); for (auto& v : hx) v = (rand() / float(RAND_MAX)) * 20.f - 10.f;
    float *dx, *dy; float2* dp; unsigned* dw;
    CK(cudaMalloc(&dx, n * 4)); CK(cudaMalloc(&dy, n * 4)); CK(cudaMalloc(&dp, size_t(rows) * 256 * 8)); CK(cudaMalloc(&dw, rows * 4));
    CK(cudaMemset(dw, 0, rows * 4));
    CK(cudaMemcpy(dx, hx.data(), n * 4, cudaMemcpyHostToDevice));
    const double bytes = 8.0 * n;
    struct Cfg { void (*k)(const float*, float*, float2*, unsigned*, int, int); int T, V, L, H; };
    const Cfg cfgs[] = {
      {ab_softmax<256, 4, 1, 0>, 256, 4, 1, 0}, {ab_softmax<256, 4, 2, 0>, 256, 4, 2, 0}, {ab_softmax<256, 4, 1, 1>, 256, 4, 1, 1},
      {ab_softmax<256, 4, 2, 1>, 256, 4, 2, 1}, {ab_softmax<256, 8, 1, 0>, 256, 8, 1, 0}, {ab_softmax<256, 8, 1, 1>, 256, 8, 1, 1},
      {ab_softmax<128, 8, 1, 0>, 128, 8, 1, 0}, {ab_softmax<128, 8, 2, 1>, 128, 8, 2, 1}, {ab_softmax<512, 2, 1, 0>, 512, 2, 1, 0},
      {ab_softmax<256, 2, 2, 0>, 256, 2, 2, 0}, {ab_softmax<256, 2, 3, 0>, 256, 2, 3, 0},
    };
    for (const Cfg& cf : cfgs) for (int bps : {1, 2, 3, 4, 6, 8}) {
      int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, cf.k, cf.T, 0));
      if (bps > occ) continue;
      const int per = cf.T * 4 * cf.V, U = cols / per, G = sms * bps;
      if (G < U) continue;
      auto gs = [&](cudaStream_t st) { cf.k<<<G, cf.T, 0, st>>>(dx, dy, dp, dw, rows, cols); };
      auto go = [&]() { gs(0); };
      CK(cudaMemset(dy, 0xff, n * 4)); go(); CK(cudaDeviceSynchronize());
      const double err = softmax_check(hx, dy, rows, cols);
      const float us = timeit(go, 200), ug = timeg(gs, 100);
      printf("rows %2d lag T %3d V %d (slice %5d) L %d H %d G %4d (%d/SM, occ %d): %8.2f us  %6.0f GB/s  err %.2e  graph %8.2f us %6.0f GB/s\n",
             rows, cf.T, cf.V, per, cf.L, cf.H, G, bps, occ, us, bytes / us / 1e3, err, ug, bytes / ug / 1e3);
    }
    { auto go = [&]() { CK(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice)); }; float us = timeit(go, 200); printf("rows %2d cudaMemcpyAsync: %8.2f us  %6.0f GB/s\n", rows, us, bytes / us / 1e3); }
    CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dp)); CK(cudaFree(dw));
  }
  return 0;
}
