// What the standalone CUDA harnesses of bench/ share (softmax_forms.cu,
// softmax_lag.cu, qmv_bulk.cu, qmv_pattern.cu, code_cold.cu): the error check, the softmax
// check, timing by back-to-back launches and by one CUDA graph, and the
// Hopper bulk-copy engine's PTX (cp.async.bulk with mbarrier completion,
// sm_90).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

// bf16 bits from a float (round to nearest even) and back, on the host.
inline uint16_t bf16_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
inline float bf16_float(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; memcpy(&f, &u, 4); return f; }

// Warp and block reductions of whole warps (every lane gets the result; sh
// holds a float a warp).
__device__ __forceinline__ float wmax(float v) { for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o)); return v; }
__device__ __forceinline__ float wsum(float v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o); return v; }
__device__ __forceinline__ float bmax(float v, float* sh) {
  v = wmax(v); if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v; __syncthreads();
  float t = (threadIdx.x & 31) < (blockDim.x >> 5) ? sh[threadIdx.x & 31] : -INFINITY; return wmax(t);
}
__device__ __forceinline__ float bsum(float v, float* sh) {
  v = wsum(v); if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v; __syncthreads();
  float t = (threadIdx.x & 31) < (blockDim.x >> 5) ? sh[threadIdx.x & 31] : 0.f; return wsum(t);
}

// n back-to-back launches timed by events: best of 5, per launch.
template <typename F> float timeit(F launch, int n) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int i = 0; i < 10; ++i) launch();
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaEventRecord(a)); for (int i = 0; i < n; ++i) launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); best = fminf(best, ms * 1000.f / n);
  }
  return best;
}

// The same launches captured into one CUDA graph (n of them), so the host's
// launch pace cannot set the time: best of 5 graph launches, per launch.
template <typename F> float timeg(F launch, int n) {
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t gr; cudaGraphExec_t ex;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; ++i) launch(st);
  CK(cudaStreamEndCapture(st, &gr)); CK(cudaGraphInstantiate(&ex, gr, 0));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(ex, st)); CK(cudaStreamSynchronize(st));
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaEventRecord(a, st)); CK(cudaGraphLaunch(ex, st)); CK(cudaEventRecord(b, st)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); best = fminf(best, ms * 1000.f / n);
  }
  CK(cudaGraphExecDestroy(ex)); CK(cudaGraphDestroy(gr)); CK(cudaStreamDestroy(st));
  return best;
}

// The bulk-copy engine: loads into shared memory complete on an mbarrier
// (its phase flips when the bytes expected have landed); stores from shared
// memory are committed as bulk groups and waited on by count.
__device__ __forceinline__ unsigned sm32(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(unsigned long long* b) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sm32(b)) : "memory"); }
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sm32(b)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" :: "r"(sm32(dst)), "l"(src), "r"(bytes), "r"(sm32(b)) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long* b, unsigned phase) {
  asm volatile("{\n .reg .pred p;\n W%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W%=;\n}" :: "r"(sm32(b)), "r"(phase) : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(sm32(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// The softmax harnesses' check: the worst relative error of the rows of y
// (device) against a float64 softmax of x (host), every (rows / 4)-th row,
// each element against max(w, 1e-3 / sum).
inline double softmax_check(const std::vector<float>& hx, float* dy, int rows, int cols) {
  std::vector<float> hy(size_t(rows) * cols); CK(cudaMemcpy(hy.data(), dy, hy.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int r = 0; r < rows; r += (rows > 4 ? rows / 4 : 1)) {
    double m = -1e300, s = 0; for (int c = 0; c < cols; ++c) m = fmax(m, hx[size_t(r) * cols + c]);
    for (int c = 0; c < cols; ++c) s += exp(hx[size_t(r) * cols + c] - m);
    for (int c = 0; c < cols; ++c) { double w = exp(hx[size_t(r) * cols + c] - m) / s; double e = fabs(hy[size_t(r) * cols + c] - w) / fmax(w, 1e-3 / s); worst = fmax(worst, e); }
  }
  return worst;
}

// The copy ceiling of a run: cudaMemcpy of 1 GiB device to device (read +
// write counted), printed and returned in GB/s.
inline double copy_ceiling_gbs() {
  const size_t n = size_t(1) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, n)); CK(cudaMalloc(&b, n)); CK(cudaMemset(a, 1, n));
  const float us = timeit([&] { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); }, 5);
  const double gbs = 2.0 * n / us / 1e3;
  printf("copy 1 GiB: %.1f us, %.0f GB/s\n", us, gbs);
  CK(cudaFree(a)); CK(cudaFree(b));
  return gbs;
}

// The decode products' weight shapes the 4-bit harnesses (qmv_pattern.cu,
// qmv_packed.cu) time: [N, K], one token.
struct DecodeShape { const char* name; unsigned N, K; };
constexpr DecodeShape DECODE_SHAPES[] = {
    {"Qwen3.6 up [17408, 5120]", 17408, 5120}, {"Qwen3.6 down [5120, 17408]", 5120, 17408},
    {"Gemma 4 up [21504, 5376]", 21504, 5376}, {"35B in_proj [12352, 2048]", 12352, 2048},
    {"35B out_proj [2048, 4096]", 2048, 4096}};

// The device's name and SM count, printed; returns the SM count.
inline int print_device() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device %s, %d SMs\n", prop.name, sms);
  return sms;
}

// Copies of a weight of `bytes` that the harnesses read in turn so that none
// is in L2 when read (400 MiB in all, at least 2).
inline int copies_out_of_l2(double bytes) { return int(std::max<double>(2, (400.0 * (1 << 20)) / bytes + 1)); }

// An MLX 4-bit weight (group 64) at one token, the 4-bit harnesses' problem
// (qmv_packed.cu, qmv_lanes.cu): random codes ([N, K / 2] bytes, code k in
// byte k / 2, the low nibble first), bf16 scales in [0.002, 0.022] and
// biases in [-0.1, 0.1] ([N, K / 64]), bf16 x in [-1, 1]; the float64
// product of each row and the sum of its |x w|, the scale of its error.
struct Q4Problem {
  static constexpr unsigned GS = 64;
  unsigned N, K, G;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> sc, bi, xb;
  std::vector<double> ref, mag;
  double bytes() const { return double(codes.size()) + 4.0 * sc.size(); }
  // Row r's float64 product with x and its sum of |x w|.
  void reference_row(unsigned r, double& acc, double& m) const {
    acc = 0, m = 0;
    for (unsigned k = 0; k < K; ++k) {
      const uint8_t b = codes[size_t(r) * (K / 2) + k / 2];
      const unsigned q = (k & 1) ? (b >> 4) : (b & 15);
      const size_t g = size_t(r) * G + k / GS;
      const double t = (double(bf16_float(sc[g])) * q + bf16_float(bi[g])) * bf16_float(xb[k]);
      acc += t;
      m += std::fabs(t);
    }
  }
  // The largest error of a bf16 output over sum |x w| (a NaN: infinite).
  double worst_error(const std::vector<uint16_t>& out) const {
    double worst = 0;
    for (unsigned r = 0; r < N; ++r) {
      const double e = std::fabs(double(bf16_float(out[r])) - ref[r]) / (mag[r] + 1e-30);
      worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    }
    return worst;
  }
};
// common.cuh's gc_shared on the host: the group-column engine's dynamic
// shared memory at K (group 64).
inline unsigned gc_shared_bytes(unsigned K) {
  const unsigned r = (K / Q4Problem::GS + 7) / 8;
  return r * 8 * Q4Problem::GS * 2 + r * 8 * 4 + 1024;
}
// reference: false leaves ref and mag empty (Q4Problem::reference_row gives
// a row's on demand).
inline Q4Problem make_q4(unsigned N, unsigned K, std::mt19937& rng, bool reference = true) {
  Q4Problem p;
  p.N = N, p.K = K, p.G = K / Q4Problem::GS;
  p.codes.resize(size_t(N) * K / 2);
  p.sc.resize(size_t(N) * p.G), p.bi.resize(size_t(N) * p.G), p.xb.resize(K);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto& c : p.codes) c = uint8_t(byte(rng));
  for (auto& v : p.sc) v = bf16_bits(0.002f + 0.02f * std::fabs(uni(rng)));
  for (auto& v : p.bi) v = bf16_bits(0.1f * uni(rng));
  for (auto& v : p.xb) v = bf16_bits(uni(rng));
  if (reference) {
    p.ref.resize(N), p.mag.resize(N);
    for (unsigned r = 0; r < N; ++r) p.reference_row(r, p.ref[r], p.mag[r]);
  }
  return p;
}

// A Q4Problem on the device: copies_out_of_l2 copies of its codes, scales
// and biases (read in turn, so that none is in L2), its x, and a y of N
// values; T16 is the kernels' 2-byte type (bf16).
template <typename T16>
struct Q4Device {
  int copies;
  std::vector<unsigned char*> w;
  std::vector<T16*> s, b;
  T16 *x = nullptr, *y = nullptr;
  explicit Q4Device(const Q4Problem& p) : copies(copies_out_of_l2(p.bytes())), w(copies), s(copies), b(copies) {
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&w[c], p.codes.size())); CK(cudaMalloc(&s[c], 2 * p.sc.size())); CK(cudaMalloc(&b[c], 2 * p.bi.size()));
      CK(cudaMemcpy(w[c], p.codes.data(), p.codes.size(), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(s[c], p.sc.data(), 2 * p.sc.size(), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(b[c], p.bi.data(), 2 * p.bi.size(), cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&x, 2 * p.K)); CK(cudaMalloc(&y, 2 * p.N));
    CK(cudaMemcpy(x, p.xb.data(), 2 * p.K, cudaMemcpyHostToDevice));
  }
  Q4Device(const Q4Device&) = delete;
  ~Q4Device() {
    for (int c = 0; c < copies; ++c) { cudaFree(w[c]); cudaFree(s[c]); cudaFree(b[c]); }
    cudaFree(x); cudaFree(y);
  }
};
