// The dense bf16 vector product at one token (decode), the library's kernels
// against warp-row forms: y[n] = sum_k x[k] w[n, k], w bf16 [N, K] as
// checkpoints store it, x f32 (mlx-native's hf2q_dense_gemv_bf16_f32_4, what
// a model's bf16 linear runs) or bf16 (dense_mv_bf16), y f32 or bf16. The
// library's entries come from shaders/cuda/dense.cu itself (part 0: its
// vector forms), launched as the op launches them (ts/ops/dense.ts). A
// warp-row form gives each warp RW whole rows: lanes stride k by 16-byte
// vectors of the weight, U vectors a row in flight, one warp sum a row at the
// end, no block barrier; 8 warps a block. block_rows: blocks of 8 or 16 rows,
// a warp taking rows q, q + 8, ... in turn (the library's mv_lanes). Copies
// of the weight in turn so that none is in L2; every output against a
// float64 reference (bench/notes/gemv-dense-2026-11-28.md: the floor, the
// prediction and the results).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DMLXN_CUDA_PART=0 -include shaders/cuda/common.cuh \
//     -include shaders/common.h -include shaders/dense.h -o /tmp/gemv_dense bench/gemv_dense.cu && /tmp/gemv_dense
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <random>
#include <vector>
#include "harness.cuh"
// The library's source, or a variant of it (-DDENSE_CU='"path"').
#ifndef DENSE_CU
#define DENSE_CU "../shaders/cuda/dense.cu"
#endif
#include DENSE_CU

namespace {
template <u32 RW, u32 U, typename TX>
__global__ void __launch_bounds__(256) warp_rows(const TX* x, const bf16* w, float* y, u32 N, u32 K) {
  const u32 lane = threadIdx.x & 31u, row0 = (blockIdx.x * 8u + (threadIdx.x >> 5)) * RW;
  if (row0 >= N) return;
  const u32 V = K / 8;
  const bf16* wr[RW];
#pragma unroll
  for (u32 r = 0; r < RW; ++r) wr[r] = w + u64(min(row0 + r, N - 1)) * K;
  float acc[RW];
#pragma unroll
  for (u32 r = 0; r < RW; ++r) acc[r] = 0.0f;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (u32 c0 = lane; c0 < V; c0 += 32u * U) {
    uint4 wv[U][RW];
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
      const u32 c = c0 + 32u * u;
#pragma unroll
      for (u32 r = 0; r < RW; ++r) wv[u][r] = c < V ? __ldcs(reinterpret_cast<const uint4*>(wr[r] + u64(c) * 8)) : zero;
    }
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
      const u32 c = c0 + 32u * u;
      if (c < V) {
        float xv[8];
        load_elems(x + u64(c) * 8, xv);
#pragma unroll
        for (u32 r = 0; r < RW; ++r) {
          float wf[8];
          load_elems(reinterpret_cast<const bf16*>(&wv[u][r]), wf);
#pragma unroll
          for (u32 e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xv[e], acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (u32 r = 0; r < RW; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < N) y[row0 + r] = s;
  }
}

// A block of ROWS rows, warp q taking rows q, q + 8, ...: the row loop of
// the library's one-token form, 16-byte vectors only (ELEMS false) or with
// an element walk for rows that are not (chosen once, outside the loop; here
// never taken, it only adds its registers).
template <u32 ROWS, bool ELEMS>
__global__ void __launch_bounds__(256) block_rows(const float* x, const bf16* w, float* y, u32 N, u32 K) {
  const u32 lane = threadIdx.x & 31u, row0 = blockIdx.x * ROWS, V = K / 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const bool vec = !ELEMS || (K % 8 == 0 && aligned16(w) && aligned16(x));
  if (vec) {
    for (u32 r = threadIdx.x >> 5; r < ROWS && row0 + r < N; r += 8) {
      const bf16* wr = w + u64(row0 + r) * K;
      float acc = 0.0f;
      for (u32 c0 = lane; c0 < V; c0 += 32u * 8) {
        uint4 wv[8];
#pragma unroll
        for (u32 u = 0; u < 8; ++u) wv[u] = c0 + 32u * u < V ? __ldcs(reinterpret_cast<const uint4*>(wr + u64(c0 + 32u * u) * 8)) : zero;
#pragma unroll
        for (u32 u = 0; u < 8; ++u) {
          const u32 c = c0 + 32u * u;
          if (c < V) {
            float xv[8], wf[8];
            load_elems(x + u64(c) * 8, xv);
            load_elems(reinterpret_cast<const bf16*>(&wv[u]), wf);
#pragma unroll
            for (u32 e = 0; e < 8; ++e) acc = fmaf(wf[e], xv[e], acc);
          }
        }
      }
      acc = warp_sum(acc);
      if (lane == 0) y[row0 + r] = acc;
    }
  } else if constexpr (ELEMS) {
    for (u32 r = threadIdx.x >> 5; r < ROWS && row0 + r < N; r += 8) {
      const bf16* wr = w + u64(row0 + r) * K;
      float acc = 0.0f;
      for (u32 k0 = lane; k0 < K; k0 += 32u * 8) {
        float wv[8];
#pragma unroll
        for (u32 u = 0; u < 8; ++u) wv[u] = k0 + 32u * u < K ? to_f(wr[k0 + 32u * u]) : 0.0f;
#pragma unroll
        for (u32 u = 0; u < 8; ++u)
          if (k0 + 32u * u < K) acc = fmaf(wv[u], x[k0 + 32u * u], acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) y[row0 + r] = acc;
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  print_device();
  const double copy = copy_ceiling_gbs();
  std::vector<DecodeShape> shapes(std::begin(DECODE_SHAPES), std::end(DECODE_SHAPES));
  shapes.push_back({"odd [1000, 5376]", 1000, 5376});
  // `gemv_dense q4`: bf16 weights of a 4-bit weight's bytes (bench/notes/qmv-lanes-2026-11-28.md): its codes
  // alone (rows of K / 4 bf16), codes + scales + biases (K * 9 / 32), and the same bytes in rows 4x as long.
  if (argc > 1 && std::string(argv[1]) == "q4")
    shapes = {{"Qwen3.6 up codes [17408, 1280]", 17408, 1280},    {"Qwen3.6 up all [17408, 1440]", 17408, 1440},
              {"Qwen3.6 up codes, long [4352, 5120]", 4352, 5120}, {"Gemma 4 up codes [21504, 1344]", 21504, 1344},
              {"Gemma 4 up codes, long [5376, 5376]", 5376, 5376}, {"Qwen3.6 down codes [5120, 4352]", 5120, 4352}};
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (const DecodeShape& s : shapes) {
    const u32 N = s.N, K = s.K;
    std::vector<uint16_t> wb(size_t(N) * K), xb(K);
    std::vector<float> xf(K);
    for (auto& v : wb) v = bf16_bits(0.05f * uni(rng));
    for (u32 k = 0; k < K; ++k) { xb[k] = bf16_bits(uni(rng)); xf[k] = bf16_float(xb[k]); }
    std::vector<double> ref(N), mag(N);
    for (u32 r = 0; r < N; ++r) {
      double a = 0, m = 0;
      for (u32 k = 0; k < K; ++k) { const double t = double(bf16_float(wb[size_t(r) * K + k])) * xf[k]; a += t; m += std::fabs(t); }
      ref[r] = a; mag[r] = m;
    }
    const double bytes = 2.0 * wb.size();
    const int copies = copies_out_of_l2(bytes);
    std::vector<bf16*> W(copies);
    for (int c = 0; c < copies; ++c) { CK(cudaMalloc(&W[c], bytes)); CK(cudaMemcpy(W[c], wb.data(), bytes, cudaMemcpyHostToDevice)); }
    float *x, *y;
    bf16 *xh, *yh;
    CK(cudaMalloc(&x, 4 * K)); CK(cudaMalloc(&y, 4 * N)); CK(cudaMalloc(&xh, 2 * K)); CK(cudaMalloc(&yh, 2 * N));
    CK(cudaMemcpy(x, xf.data(), 4 * K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(xh, xb.data(), 2 * K, cudaMemcpyHostToDevice));
    printf("\n%s: %.2f MB of weight, %d copies\n", s.name, bytes / 1e6, copies);
    // launch(c, out): one product over copy c; out: f32 (false) or bf16 (true) y.
    auto run = [&](const char* form, bool half_out, auto launch) {
      if (half_out) CK(cudaMemset(yh, 0xff, 2 * N)); else CK(cudaMemset(y, 0xff, 4 * N));  // NaN-poisoned
      launch(0);
      CK(cudaDeviceSynchronize());
      double worst = 0;
      std::vector<float> out(N);
      if (half_out) {
        std::vector<uint16_t> o(N);
        CK(cudaMemcpy(o.data(), yh, 2 * N, cudaMemcpyDeviceToHost));
        for (u32 r = 0; r < N; ++r) out[r] = bf16_float(o[r]);
      } else {
        CK(cudaMemcpy(out.data(), y, 4 * N, cudaMemcpyDeviceToHost));
      }
      for (u32 r = 0; r < N; ++r) {
        const double e = std::fabs(out[r] - ref[r]) / (mag[r] + 1e-30);
        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
      }
      int c = 0;
      const float us = timeit([&] { launch(c); c = (c + 1) % copies; }, 40);
      CK(cudaGetLastError());
      printf("  %-34s %8.2f us  %6.0f GB/s  %.2f of copy  err %.1e of sum|xw| %s\n", form, us, bytes / us / 1e3, bytes / us / 1e3 / copy,
             worst, worst < (half_out ? 1e-2 : 1e-4) ? "ok" : "BAD");
    };
    DenseGemvBf16Params gp{};
    gp.ne00 = int(K); gp.ne01 = int(N); gp.ne02 = 1; gp.nb00 = 2; gp.nb01 = u64(K) * 2; gp.nb02 = u64(N) * K * 2; gp.nb03 = gp.nb02;
    gp.ne10 = int(K); gp.ne11 = 1; gp.ne12 = 1; gp.nb10 = 4; gp.nb11 = u64(K) * 4; gp.nb12 = gp.nb11; gp.nb13 = gp.nb11;
    gp.ne0 = int(N); gp.ne1 = 1; gp.nr0 = 1; gp.r2 = 1; gp.r3 = 1;
    DenseGemvBf16Params* dgp;
    CK(cudaMalloc(&dgp, sizeof gp)); CK(cudaMemcpy(dgp, &gp, sizeof gp, cudaMemcpyHostToDevice));
    const u32 gemv_blocks = (N + LANE_ROWS - 1) / LANE_ROWS;
    run("library hf2q gemv (x f32)", false, [&](int c) {
      hf2q_dense_gemv_bf16_f32_4<<<gemv_blocks, 256>>>(dgp, reinterpret_cast<const char*>(W[c]), reinterpret_cast<const char*>(x),
                                                         reinterpret_cast<char*>(y));
    });
    DenseParams dp{};
    dp.m = 1; dp.n = N; dp.k = K; dp.batch = 1; dp.w_batch = 1;
    DenseParams* ddp;
    CK(cudaMalloc(&ddp, sizeof dp)); CK(cudaMemcpy(ddp, &dp, sizeof dp, cudaMemcpyHostToDevice));
    // ts/ops/dense.ts denseMvCudaRows for 16-bit types: 32 rows a block from 8192 rows on, else 16.
    const u32 mv16 = N >= 8192 ? 32 : 16;
    run("library dense_mv_bf16 (x bf16)", true, [&](int c) { dense_mv_bf16<<<(N + mv16 - 1) / mv16, 256>>>(xh, W[c], yh, ddp); });
    auto wr = [&](const char* form, auto kern, u32 RW) {
      const u32 blocks = (N + 8 * RW - 1) / (8 * RW);
      run(form, false, [&](int c) { kern<<<blocks, 256>>>(x, W[c], y, N, K); });
    };
    wr("warp rows RW 1 U 8 (x f32)", warp_rows<1, 8, float>, 1);
    auto br = [&](const char* form, auto kern, u32 rows) {
      run(form, false, [&](int c) { kern<<<(N + rows - 1) / rows, 256>>>(x, W[c], y, N, K); });
    };
    br("block rows 8, vectors only", block_rows<8, false>, 8);
    br("block rows 8, element walk too", block_rows<8, true>, 8);
    br("block rows 16, vectors only", block_rows<16, false>, 16);
    br("block rows 16, element walk too", block_rows<16, true>, 16);
    wr("warp rows RW 2 U 4 (x f32)", warp_rows<2, 4, float>, 2);
    wr("warp rows RW 2 U 8 (x f32)", warp_rows<2, 8, float>, 2);
    wr("warp rows RW 4 U 2 (x f32)", warp_rows<4, 2, float>, 4);
    wr("warp rows RW 4 U 4 (x f32)", warp_rows<4, 4, float>, 4);
    for (int c = 0; c < copies; ++c) CK(cudaFree(W[c]));
    CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(xh)); CK(cudaFree(yh)); CK(cudaFree(dgp)); CK(cudaFree(ddp));
  }
  return 0;
}
