// The library's softmax_stream_f32 (shaders/cuda/softmax.cu, compiled here
// with the registry's prelude) beside a copy of its held path that differs
// from bench/softmax_forms.cu's st_softmax in one respect at a time, so the
// gap between the two can be assigned (bench/notes/softmax-stream-2026-11-27.md).
// var_stream<F>: F = 0 is the library's held path as of 2026-11-26 (loads and
// stores checked a vector, block_max / block_sum, the thread's max and
// exp(v - m) per element with its -inf check, params read from the struct,
// fence + relaxed atomic, the poll counter, 64-bit unit loop, the scale
// multiply, the alignment check); each bit takes one of st_softmax's ways
// instead (the enum below). [64, 262144] at 256 threads and [1, 262144] at
// 256 and 128, 4 blocks an SM, programmatic dependent launch on, back to
// back and in one CUDA graph, checked against float64.
//
//   nvcc -std=c++17 -O2 -DMLXN_PDL -gencode=arch=compute_90a,code=sm_90a -include shaders/cuda/common.cuh \
//     -include shaders/common.h -include shaders/softmax.h -o /tmp/softmax_stream_variants bench/softmax_stream_variants.cu && /tmp/softmax_stream_variants
#include "../shaders/cuda/softmax.cu"
#include <cmath>
#include <vector>
#include "harness.cuh"

// STD_RED: bmax / bsum (harness.cuh); BMAX_FIRST: the block's max before the
// exps; NO_GUARD: full slices assumed; REL: float2 pair and a release atomic;
// SIMPLE_POLL: no counter or word check; ARGS: sizes as kernel arguments;
// U32L: 32-bit unit loop; NOSCALE: no scale multiply; NO_HELD_CHECK: no
// alignment check.
enum { STD_RED = 1, BMAX_FIRST = 2, NO_GUARD = 4, REL = 8, SIMPLE_POLL = 16, ARGS = 32, U32L = 64, NOSCALE = 128, NO_HELD_CHECK = 256 };

template <int F, typename UT>
__device__ __forceinline__ void body(const float* x, float* partials, float* y, u32* words, const SoftmaxStreamParams* p, u32 cols_a, u32 rows_a, u32 slice_a, u32 nb_a) {
  extern __shared__ float red[];
  const u32 cols = (F & ARGS) ? cols_a : p->cols, slice = (F & ARGS) ? slice_a : p->slice, nb = (F & ARGS) ? nb_a : p->n_blocks;
  const u32 rows = (F & ARGS) ? rows_a : p->rows;
  const float scale = (F & NOSCALE) ? 1.0f : p->scale;
  const UT units = UT(rows) * nb;
  const u32 tid = threadIdx.x, bs = blockDim.x;
  const u32 flag = (bs + 31u) / 32u;
  for (UT u = blockIdx.x; u < units; u += gridDim.x) {
    const UT row = u / nb;
    const u32 b = u32(u - row * nb);
    const u32 lo = b * slice, len = min(slice, cols - lo);
    const float* xs = x + u64(row) * cols + lo;
    float* ys = y + u64(row) * cols + lo;
    const u32 nv = len / 4;
    const bool held = (F & NO_HELD_CHECK) ? true : (slice_vec(xs, ys, static_cast<const bf16*>(nullptr), len) && nv <= 8 * bs);
    if (!held) __trap();
    float4 r[8];
    const float4* xv = reinterpret_cast<const float4*>(xs);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const u32 vi = tid + u32(k) * bs;
      if ((F & NO_GUARD) || vi < nv) r[k] = __ldcs(xv + vi);
    }
    float m = neg_inf(), s = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if ((F & NO_GUARD) || tid + u32(k) * bs < nv) {
        if (!(F & NOSCALE)) { r[k].x *= scale; r[k].y *= scale; r[k].z *= scale; r[k].w *= scale; }
        m = fmaxf(m, fmaxf(fmaxf(r[k].x, r[k].y), fmaxf(r[k].z, r[k].w)));
      }
    }
    float bmx, btotal;
    if (F & BMAX_FIRST) {
      __syncthreads();
      bmx = (F & STD_RED) ? bmax(m, red) : block_max(m, red);
      __syncthreads();
      m = bmx;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if ((F & NO_GUARD) || tid + u32(k) * bs < nv) {
        r[k].x = __expf(r[k].x - m); r[k].y = __expf(r[k].y - m); r[k].z = __expf(r[k].z - m); r[k].w = __expf(r[k].w - m);
        s += (r[k].x + r[k].y) + (r[k].z + r[k].w);
      }
    }
    if (F & BMAX_FIRST) {
      btotal = (F & STD_RED) ? bsum(s, red) : block_sum(s, red);
    } else {
      bmx = (F & STD_RED) ? bmax(m, red) : block_max(m, red);
      __syncthreads();
      btotal = (F & STD_RED) ? bsum(s * __expf(m - bmx), red) : block_sum(s * __expf(m - bmx), red);
    }
    float* pr = partials + u64(row) * nb * 2u;
    if (tid == 0) {
      u32 old;
      const u32 inc = b == 0u ? 0x80000000u - (nb - 1u) : 1u;
      if (F & REL) {
        __stcg(reinterpret_cast<float2*>(pr) + b, make_float2(bmx, btotal));
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(words + row), "r"(inc) : "memory");
      } else {
        pr[2u * b] = bmx;
        pr[2u * b + 1u] = btotal;
        __threadfence();
        old = atomicAdd(words + row, inc);
      }
      bool ok = true;
      if (F & SIMPLE_POLL) {
        while ((ld_acquire_gpu(words + row) >> 31) == (old >> 31)) __nanosleep(32);
      } else {
        ok = stream_word_valid(old, nb);
        for (u32 polls = 0; ok && (ld_acquire_gpu(words + row) >> 31) == (old >> 31); ++polls) {
          if (polls == STREAM_POLLS) ok = false;
          else __nanosleep(32);
        }
      }
      red[flag] = ok ? 1.0f : 0.0f;
    }
    __syncthreads();
    if (red[flag] == 0.0f) __trap();
    float mx, total;
    merge_row_pairs(pr, nb, mx, total);
    const float g = __expf(m - mx) / total;
    float4* yv = reinterpret_cast<float4*>(ys);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const u32 vi = tid + u32(k) * bs;
      if ((F & NO_GUARD) || vi < nv) __stcs(yv + vi, make_float4(r[k].x * g, r[k].y * g, r[k].z * g, r[k].w * g));
    }
  }
}

template <int F>
__global__ void __launch_bounds__(256, 4) var_stream(const float* x, float* partials, float* y, u32* words, const SoftmaxStreamParams* p, u32 cols_a, u32 rows_a, u32 slice_a, u32 nb_a) {
  mlxn_entry();
  if (F & U32L) body<F, u32>(x, partials, y, words, p, cols_a, rows_a, slice_a, nb_a);
  else body<F, u64>(x, partials, y, words, p, cols_a, rows_a, slice_a, nb_a);
}
__global__ void __launch_bounds__(256, 4) lib_entry(const float* x, float* partials, float* y, u32* words, const SoftmaxStreamParams* p, u32, u32, u32, u32) {
  mlxn_entry();
  softmax_stream<float>(x, partials, y, words, p);
}

typedef void (*K)(const float*, float*, float*, u32*, const SoftmaxStreamParams*, u32, u32, u32, u32);

int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const u32 cols = 262144;
  struct V { K k; const char* name; };
#define VAR(f) {var_stream<f>, #f}
  const V vars[] = {
    {lib_entry, "library entry"}, VAR(0), VAR(1), VAR(2), VAR(4), VAR(8), VAR(16), VAR(32), VAR(64), VAR(128), VAR(256),
    VAR(511), VAR(511 - 1), VAR(511 - 2), VAR(511 - 4), VAR(511 - 8), VAR(511 - 16), VAR(511 - 32), VAR(511 - 64), VAR(511 - 128), VAR(511 - 256),
    VAR(1 | 2), VAR(4 | 256), VAR(8 | 16), VAR(32 | 64 | 128),
  };
  for (u32 rows : {64u, 1u}) for (u32 threads : {256u, 128u}) {
    if (rows == 64 && threads == 128) continue;
    const u32 slice = threads * 32, nb = cols / slice;
    const size_t n = size_t(rows) * cols;
    std::vector<float> hx(n); srand(1); for (auto& v : hx) v = (rand() / float(RAND_MAX)) * 20.f - 10.f;
    float *dx, *dy, *dp; u32* dw; SoftmaxStreamParams* dprm;
    CK(cudaMalloc(&dx, n * 4)); CK(cudaMalloc(&dy, n * 4)); CK(cudaMalloc(&dp, rows * nb * 8)); CK(cudaMalloc(&dw, rows * 4)); CK(cudaMemset(dw, 0, rows * 4));
    CK(cudaMemcpy(dx, hx.data(), n * 4, cudaMemcpyHostToDevice));
    SoftmaxStreamParams prm = {cols, rows, 1.0f, slice, nb};
    CK(cudaMalloc(&dprm, sizeof prm)); CK(cudaMemcpy(dprm, &prm, sizeof prm, cudaMemcpyHostToDevice));
    const u32 G = sms * 4;
    const size_t smem = 64;
    std::vector<float> hy(n);
    for (const V& v : vars) {
      auto gs = [&](cudaStream_t st) {
        cudaLaunchConfig_t c = {}; c.gridDim = dim3(G); c.blockDim = dim3(threads); c.stream = st; c.dynamicSmemBytes = smem; cudaLaunchAttribute a[1];
        a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[0].val.programmaticStreamSerializationAllowed = 1;
        c.attrs = a; c.numAttrs = 1;
        CK(cudaLaunchKernelEx(&c, v.k, (const float*)dx, dp, dy, dw, (const SoftmaxStreamParams*)dprm, cols, rows, slice, nb));
      };
      CK(cudaMemset(dy, 0xff, n * 4)); gs(0); CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(hy.data(), dy, n * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (u32 r = 0; r < rows; r += (rows > 4 ? rows / 4 : 1)) {
        double m = -1e300, s = 0; for (u32 c = 0; c < cols; ++c) m = fmax(m, hx[size_t(r) * cols + c]);
        for (u32 c = 0; c < cols; ++c) s += exp(hx[size_t(r) * cols + c] - m);
        for (u32 c = 0; c < cols; ++c) { double w = exp(hx[size_t(r) * cols + c] - m) / s; worst = fmax(worst, fabs(hy[size_t(r) * cols + c] - w) / fmax(w, 1e-3 / s)); }
      }
      const float us = timeit([&]() { gs(0); }, rows == 1 ? 400 : 200), ug = timeg(gs, 100);
      printf("rows %2u threads %3u %-14s: %8.2f us  graph %8.2f us  %6.0f GB/s  err %.2e\n", rows, threads, v.name, us, ug, 8.0 * n / ug / 1e3, worst);
    }
    CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dp)); CK(cudaFree(dw)); CK(cudaFree(dprm));
  }
  return 0;
}
