// fused_norm's CUDA kernels fused_norm_add_norms_f32 and
// fused_norm_moe_sum_{f32,bf16_input} (shaders/cuda/fused_norm.cu) on the
// CPU simulation (sim_runtime.h), against float64 references, one block a
// row as the ops launch them: rows the threads hold in registers and rows
// past them, the element-by-element path (dim not a multiple of 4), partial
// last warps, 0 to 3 normed outputs, each scalar mode, in place. Error:
// |got - want| / max(|want|, 0.1 of the largest |want|)
// (tests/fused_norm.test.ts sumErr: the outputs are sums of terms of the
// data's scale, which may cancel), under f32's tolerance. run.sh builds and
// runs it.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <string>

void check(const std::string& what, const float* got, const std::vector<double>& want, double tol) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double floor = std::max(0.1 * scale, 1e-30);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i];
    const double e = g == want[i] ? 0 : std::fabs(g - want[i]) / std::max(std::fabs(want[i]), floor);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-84s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), worst, tol);
}

double rms_inv(const double* x, u32 dim, double eps) {
  double sq = 0;
  for (u32 i = 0; i < dim; ++i) sq += x[i] * x[i];
  return 1 / std::sqrt(sq / dim + eps);
}

std::string shape(const char* name, u32 rows, u32 dim, u32 threads) {
  return std::string(name) + " [" + std::to_string(rows) + ", " + std::to_string(dim) + "] a block of " + std::to_string(threads);
}

// h = (residual + input * rms_inv(input) * weight) [* scalar]; normed_j = h * rms_inv(h) [* nw_j].
void run_add_norms(u32 rows, u32 dim, u32 norms, u32 weighted, u32 scalar_mode, u32 threads, bool in_place = false) {
  const size_t n = size_t(rows) * dim;
  Arr<float> res(n), in(n), w(dim), sc(scalar_mode == 2 ? dim : 1), out(n);
  std::vector<Arr<float>> nw, no;
  for (u32 j = 0; j < 3; ++j) {
    nw.emplace_back(dim);
    no.emplace_back(n);
    nw[j].random(0.5, 1.5);
    no[j].poison();
  }
  res.random(-1, 1);
  in.random(-2, 2);
  w.random(0.5, 1.5);
  sc.random(-2, 2);
  out.poison();
  std::vector<double> h(n), want_n[3];
  for (u32 r = 0; r < rows; ++r) {
    std::vector<double> x(dim);
    for (u32 i = 0; i < dim; ++i) x[i] = in.at(size_t(r) * dim + i);
    const double ri = rms_inv(x.data(), dim, 1e-6);
    for (u32 i = 0; i < dim; ++i) {
      double v = res.at(size_t(r) * dim + i) + x[i] * ri * w.at(i);
      if (scalar_mode != 0) v *= sc.at(scalar_mode == 2 ? i : 0);
      h[size_t(r) * dim + i] = v;
    }
  }
  for (u32 j = 0; j < norms; ++j) {
    want_n[j].resize(n);
    for (u32 r = 0; r < rows; ++r) {
      const double ri = rms_inv(&h[size_t(r) * dim], dim, 1e-6);
      for (u32 i = 0; i < dim; ++i)
        want_n[j][size_t(r) * dim + i] = h[size_t(r) * dim + i] * ri * ((weighted >> j & 1u) ? nw[j].at(i) : 1.0);
    }
  }
  FusedNormAddNormsF32Params p{dim, rows, 1e-6f, scalar_mode, norms, weighted};
  float* o = in_place ? res.p : out.p;
  sim_launch({rows, 1, 1}, {threads, 1, 1}, 4 * 32,
             [&] { fused_norm_add_norms_f32(res.p, in.p, w.p, o, sc.p, &p, nw[0].p, no[0].p, nw[1].p, no[1].p, nw[2].p, no[2].p); });
  const std::string what = shape("fused_norm_add_norms_f32", rows, dim, threads) +
                           " norms " + std::to_string(norms) + " scalar " + std::to_string(scalar_mode) + (in_place ? " in place" : "");
  check(what + " output", o, h, 1e-5);
  for (u32 j = 0; j < norms; ++j) check(what + " normed" + std::to_string(j), no[j].p, want_n[j], 1e-5);
  // Outputs past `norms` stay unwritten (still NaN).
  for (u32 j = norms; j < 3; ++j)
    if (!std::isnan(no[j].p[0])) {
      failures++;
      std::printf("FAIL %s normed%u written\n", what.c_str(), j);
    }
}

// out = input * rms_inv(input) * weight + e * rms_inv(e) * moe_weight, e = sum_k w[k] y[k].
template <class E>
void run_moe_sum(u32 rows, u32 dim, u32 topk, u32 threads, bool in_place = false) {
  const size_t n = size_t(rows) * dim;
  Arr<float> in(n), w(dim), ew(size_t(rows) * topk), mw(dim), out(n);
  Arr<E> y(n * topk);
  in.random(-2, 2);
  w.random(0.5, 1.5);
  ew.random(0, 1);
  mw.random(0.5, 1.5);
  y.random(-3, 3);
  out.poison();
  std::vector<double> want(n);
  for (u32 r = 0; r < rows; ++r) {
    std::vector<double> x(dim), e(dim, 0.0);
    for (u32 i = 0; i < dim; ++i) x[i] = in.at(size_t(r) * dim + i);
    for (u32 k = 0; k < topk; ++k)
      for (u32 i = 0; i < dim; ++i) e[i] += ew.at(size_t(r) * topk + k) * y.at((size_t(r) * topk + k) * dim + i);
    const double rx = rms_inv(x.data(), dim, 1e-6), re = rms_inv(e.data(), dim, 1e-6);
    for (u32 i = 0; i < dim; ++i) want[size_t(r) * dim + i] = x[i] * rx * w.at(i) + e[i] * re * mw.at(i);
  }
  FusedNormMoeSumParams p{dim, rows, topk, 1e-6f};
  float* o = in_place ? in.p : out.p;
  constexpr bool BF = std::is_same_v<E, __nv_bfloat16>;
  sim_launch({rows, 1, 1}, {threads, 1, 1}, 4 * 32, [&] {
    if constexpr (BF) fused_norm_moe_sum_bf16_input(in.p, w.p, ew.p, y.p, mw.p, o, &p);
    else fused_norm_moe_sum_f32(in.p, w.p, ew.p, y.p, mw.p, o, &p);
  });
  const char* name = BF ? "fused_norm_moe_sum_bf16_input" : "fused_norm_moe_sum_f32";
  check(shape(name, rows, dim, threads) + " top " + std::to_string(topk) + (in_place ? " in place" : ""), o, want, 1e-5);
}

int main() {
  // Every normed count and scalar mode; Gemma 4's row (2816: 704 vectors, 3
  // a thread of 256 held), rows past the held vectors (8192), the element
  // path (dim 1001), a partial last warp (40 threads), in place.
  run_add_norms(3, 1000, 3, 0b101, 2, 256);
  run_add_norms(1, 2816, 3, 0b111, 0, 256);
  run_add_norms(1, 2816, 1, 0b1, 1, 256, true);
  run_add_norms(2, 2816, 0, 0, 2, 256);
  run_add_norms(1, 8192, 2, 0b10, 0, 256);
  run_add_norms(1, 1001, 3, 0b111, 2, 128);
  run_add_norms(2, 1000, 2, 0b11, 1, 40);
  run_moe_sum<float>(2, 1000, 4, 256);
  run_moe_sum<float>(1, 2816, 8, 256);
  run_moe_sum<__nv_bfloat16>(2, 2816, 8, 256, true);
  run_moe_sum<float>(1, 8192, 2, 256);
  run_moe_sum<float>(1, 1001, 3, 40);
  run_moe_sum<__nv_bfloat16>(3, 64, 8, 32);
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
