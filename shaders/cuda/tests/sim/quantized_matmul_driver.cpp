// The quantized_matmul family's CUDA kernels (shaders/cuda/quantized_matmul.cu)
// on the CPU simulation (sim_runtime.h), against a float64 reference, at the
// launches of ts/ops/quantized_matmul.ts (quantizedCudaLaunch, written out
// again below): every engine (vector, its ring of weight loads wrapping, matrix in both tile shapes with x by cp.async and through registers, f32, any
// layout), 4, 6 and 8 bits, group sizes 32, 64 and 128, dead lanes past the
// last chunk, rows and tokens past the tiles. Weights are random q with
// random scales and biases, packed as MLX packs them (value i of a row at bit
// i * bits). Error: |got - want| / sum |x w|, under TOL of the type the
// weight meets x in (tests/quantized_matmul.test.ts says why). run.sh builds
// and runs it; `big` adds larger sizes: many vector blocks, the 128 x 256
// tiles (minutes); `variants` runs only quantized_mv_<t>'s harness variants
// (_vks, _vdq, _vgc: run_ks), `vgc` only the _vgc ones.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <random>
#include <string>

enum Engine { VECTOR, MATRIX, MATRIX_SMALL, SIMT, ANY, GROUPS };
const char* engine_name[] = {"vector", "matrix", "matrix 64x128", "simt", "any", "groups"};

// The launch of quantizedCudaLaunch for an engine.
// GROUPS: the group-column engine (one token, 4 bits, N >= 5120): gcWarps, gcSharedBytes.
template <class K>
void launch(Engine e, u32 M, u32 N, K&& body, u32 K_ = 0, u32 gs = 0) {
  switch (e) {
    case GROUPS: {
      const u32 W = cdiv(N, 16) > 1024 ? 2 : 4, R = (K_ / gs + 7) / 8;
      sim_launch({cdiv(cdiv(N, 16) * W, 4), 1, 1}, {128, 1, 1}, R * 8 * gs * 2 + R * 8 * 4 + 1024, body);
      break;
    }
    case VECTOR: sim_launch({cdiv(N, 16), 1, 1}, {256, 1, 1}, 4096, body); break;
    case MATRIX:
    case MATRIX_SMALL: {
      const bool big = e == MATRIX && M >= 1024 && N >= 1024;
      const u32 bm = big ? 128 : 64, bn = big ? 256 : 128;
      sim_launch({cdiv(N, bn) * cdiv(M, bm), 1, 1}, {big ? 256u : 128u, 1, 1}, 4 * (bm + bn) * 40 * 2, body);
      break;
    }
    case SIMT: sim_launch({cdiv(N, 4), 1, 1}, {256, 1, 1}, 512, body); break;
    case ANY: sim_launch({std::min(cdiv(u64(M) * N, 256), 65536u), 1, 1}, {256, 1, 1}, 0, body); break;
  }
}

// One kernel at one size: x [M, K] of TX, random q [N, K] packed `bits` wide,
// scales and biases of TS per group of gs (ceil(K / gs) a row), y [M, N] of TY.
template <class TX, class TS, class TY, class Kern>
void run(const char* name, Kern kernel, Engine e, u32 M, u32 N, u32 K, u32 gs, u32 bits, bool round_x, double tol) {
  const u64 rb = row_bytes(K, bits);
  const u32 groups = (K + gs - 1) / gs;
  Arr<TX> x(size_t(M) * K, 16);
  Arr<unsigned char> w(N * rb, 16);
  Arr<TS> sc(size_t(N) * groups, 16), bi(size_t(N) * groups, 16);
  Arr<TY> y(size_t(M) * N, 16);
  x.random(-1, 1);
  sc.random(0.001, 0.02);
  bi.random(-0.1, 0.1);
  y.poison();
  std::vector<u32> q;
  random_packed(q, w.p, N, K, bits, rb);
  QuantizedMatmulParams p{M, K, N, gs, bits};
  launch(e, M, N, [&] { kernel(x.p, reinterpret_cast<const unsigned int*>(w.p), sc.p, bi.p, y.p, &p); }, K, gs);
  double worst = 0;
  for (u32 i = 0; i < M; ++i)
    for (u32 j = 0; j < N; ++j) {
      double s = 0, a = 0;
      for (u32 k = 0; k < K; ++k) {
        double xv = x.at(size_t(i) * K + k);
        if (round_x) xv = back(cvt<__nv_bfloat16>(xv));
        const size_t g = size_t(j) * groups + k / gs;
        const double pr = xv * (sc.at(g) * q[size_t(j) * K + k] + bi.at(g));
        s += pr;
        a += std::fabs(pr);
      }
      const double err = std::fabs(y.at(size_t(i) * N + j) - s) / a;
      if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
    }
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-28s %-14s M=%-5u N=%-5u K=%-4u gs=%-3u bits=%u  err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", name, engine_name[e], M, N, K,
              gs, bits, worst, tol);
}

// quantized_mv_<t>'s harness variants _vks<RT> (one token, ceil(N / RT)
// blocks) beside the entry on the same inputs: each against the float64
// product and against the entry (|variant - entry| / sum |x w|), both under tol.
// grid 0: ceil(N / RT) blocks (_vks); else that many (the persistent _vdq
// variants, with their shared memory for R = 1).
// threads, smem: the variant's block and shared memory where they differ (the _vgc variants: 128 threads).
template <class T, class Kern>
void run_ks(const char* name, Kern entry, Kern variant, u32 RT, u32 N, u32 K, u32 gs, u32 bits, double tol, u32 M = 1, u32 grid = 0,
            u32 threads = 256, u32 smem = 0) {
  const u64 rb = row_bytes(K, bits);
  const u32 groups = K / gs;
  Arr<T> x(size_t(M) * K, 16);
  Arr<unsigned char> w(N * rb, 16);
  Arr<T> sc(size_t(N) * groups, 16), bi(size_t(N) * groups, 16);
  Arr<T> y0(size_t(M) * N, 16), y(size_t(M) * N, 16);
  x.random(-1, 1);
  sc.random(0.001, 0.02);
  bi.random(-0.1, 0.1);
  y0.poison();
  y.poison();
  std::vector<u32> q;
  random_packed(q, w.p, N, K, bits, rb);
  QuantizedMatmulParams p{M, K, N, gs, bits};
  const auto* wp = reinterpret_cast<const unsigned int*>(w.p);
  sim_launch({cdiv(N, 16), 1, 1}, {256, 1, 1}, 4096, [&] { entry(x.p, wp, sc.p, bi.p, y0.p, &p); });
  if (grid == 0) sim_launch({cdiv(N, RT), 1, 1}, {256, 1, 1}, 4096, [&] { variant(x.p, wp, sc.p, bi.p, y.p, &p); });
  else sim_launch({grid, 1, 1}, {threads, 1, 1}, smem != 0 ? smem : M * K + M * (K / 32) * 8 + 2 * 8 * 8 * 4,
                  [&] { variant(x.p, wp, sc.p, bi.p, y.p, &p); });
  double worst = 0, vs_entry = 0;
  for (u32 i = 0; i < M; ++i)
    for (u32 j = 0; j < N; ++j) {
      double s = 0, a = 0;
      for (u32 k = 0; k < K; ++k) {
        const size_t g = size_t(j) * groups + k / gs;
        const double pr = x.at(size_t(i) * K + k) * (sc.at(g) * q[size_t(j) * K + k] + bi.at(g));
        s += pr;
        a += std::fabs(pr);
      }
      const size_t o = size_t(i) * N + j;
      const double e = std::fabs(y.at(o) - s) / a, d = std::fabs(y.at(o) - y0.at(o)) / a;
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
      if (!(d <= vs_entry)) vs_entry = std::isnan(d) ? INFINITY : d;
    }
  for (int c = 0; c < 2; ++c) {
    const double err = c ? vs_entry : worst;
    const bool ok = err <= tol;
    if (!ok) failures++;
    std::printf("%s %-28s %-9s M=%u N=%-5u K=%-5u gs=%-3u bits=%u  err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", name, c ? "vs entry" : "vs f64",
                M, N, K, gs, bits, err, tol);
  }
}

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::string(argv[1]) == "big";
  const bool vgc = argc > 1 && std::string(argv[1]) == "vgc";
  const bool variants = vgc || (argc > 1 && std::string(argv[1]) == "variants");
  gen.seed(4242);
  using bf = __nv_bfloat16;
  for (u32 bits : {4u, 6u, 8u}) {
    if (vgc) break;
    // The k-split variants: rows past N, parts of unequal length (K / 32 not a multiple of 16 / RT), the
    // bench shapes' K (5120, 17408, 5376) with their group sizes, dead lanes.
    for (u32 RT : {8u, 4u}) {
      auto vb = RT == 8 ? quantized_mv_bf16_vks8 : quantized_mv_bf16_vks4;
      auto vh = RT == 8 ? quantized_mv_f16_vks8 : quantized_mv_f16_vks4;
      const std::string nb = std::string("quantized_mv_bf16_vks") + std::to_string(RT), nh = std::string("quantized_mv_f16_vks") + std::to_string(RT);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, RT, 21, 5120, 64, bits, 1e-2);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, RT, 9, 17408, 64, bits, 1e-2);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, RT, 5, 5376, 64, bits, 1e-2);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, RT, 13, 320, 32, bits, 1e-2);
      run_ks<__half>(nh.c_str(), quantized_mv_f16, vh, RT, 11, 5376, 32, bits, 1e-3);
      run_ks<__half>(nh.c_str(), quantized_mv_f16, vh, RT, 6, 1152, 128, bits, 1e-3);
    }
  }
  // The int8 variants (_vdq1, _vdqs4; 4 and 8 bits): a grid of 2 blocks walking several units, 1 to 8 tokens,
  // the bench shapes' K, rows past N.
  for (u32 bits : {4u, 8u}) {
    if (vgc) break;
    for (int v = 0; v < 2; ++v) {
      auto vb = v == 0 ? quantized_mv_bf16_vdq1 : quantized_mv_bf16_vdqs4;
      auto vh = v == 0 ? quantized_mv_f16_vdq1 : quantized_mv_f16_vdqs4;
      const std::string nb = std::string("quantized_mv_bf16_") + (v == 0 ? "vdq1" : "vdqs4"), nh = std::string("quantized_mv_f16_") + (v == 0 ? "vdq1" : "vdqs4");
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, 0, 21, 5120, 64, bits, 1e-2, 1, 2);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, 0, 9, 17408, 64, bits, 1e-2, 1, 2);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, 0, 5, 5376, 64, bits, 1e-2, 1, 2);
      run_ks<bf>(nb.c_str(), quantized_mv_bf16, vb, 0, 19, 1152, 128, bits, 1e-2, 8, 2);
      run_ks<__half>(nh.c_str(), quantized_mv_f16, vh, 0, 11, 5376, 32, bits, 1e-2, 3, 2);
    }
  }
  // The group-column variants (_vgc<W>; 4 bits, one token): rows past N, rounds of fewer than 8 groups (K / gs
  // not a multiple of 8, odd too), every group size, the bench shapes' K, W warps a tile.
  for (u32 W : {1u, 2u, 4u, 11u, 12u, 14u}) {  // 1x: _vgd<x> (a round more in flight)
    auto vb = W == 1 ? quantized_mv_bf16_vgc1 : W == 2 ? quantized_mv_bf16_vgc2 : W == 4 ? quantized_mv_bf16_vgc4
            : W == 11 ? quantized_mv_bf16_vgd1 : W == 12 ? quantized_mv_bf16_vgd2 : quantized_mv_bf16_vgd4;
    auto vh = W == 1 ? quantized_mv_f16_vgc1 : W == 2 ? quantized_mv_f16_vgc2 : W == 4 ? quantized_mv_f16_vgc4
            : W == 11 ? quantized_mv_f16_vgd1 : W == 12 ? quantized_mv_f16_vgd2 : quantized_mv_f16_vgd4;
    const std::string sfx = (W > 10 ? "vgd" : "vgc") + std::to_string(W % 10);
    const std::string nb = "quantized_mv_bf16_" + sfx, nh = "quantized_mv_f16_" + sfx;
    auto gc = [&](auto tag, const std::string& name, auto entry, auto variant, u32 N, u32 K, u32 gs, double tol) {
      using T = decltype(tag);
      const u32 R = (K / gs + 7) / 8, Kp = R * 8 * gs;
      run_ks<T>(name.c_str(), entry, variant, 0, N, K, gs, 4, tol, 1, cdiv(cdiv(N, 16) * (W % 10), 4), 128, Kp * 2 + R * 8 * 4 + 1024);
    };
    gc(bf{}, nb, quantized_mv_bf16, vb, 21, 5120, 64, 1e-2);
    gc(bf{}, nb, quantized_mv_bf16, vb, 37, 5376, 64, 1e-2);
    gc(bf{}, nb, quantized_mv_bf16, vb, 9, 17408, 64, 1e-2);
    gc(bf{}, nb, quantized_mv_bf16, vb, 16, 320, 32, 1e-2);
    gc(bf{}, nb, quantized_mv_bf16, vb, 70, 1152, 128, 1e-2);
    gc(__half{}, nh, quantized_mv_f16, vh, 11, 5376, 32, 1e-3);
    gc(__half{}, nh, quantized_mv_f16, vh, 33, 2048, 64, 1e-3);
    gc(__half{}, nh, quantized_mv_f16, vh, 5, 1152, 128, 1e-3);
  }
  if (variants) {
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
  for (u32 bits : {4u, 6u, 8u}) {
    // The vector engine: one token to 8; K past one warp step and with dead lanes (K / 32 not a multiple of 4).
    run<bf, bf, bf>("quantized_mv_bf16", quantized_mv_bf16, VECTOR, 1, 20, 64, 32, bits, false, 1e-2);
    run<bf, bf, bf>("quantized_mv_bf16", quantized_mv_bf16, VECTOR, 8, 37, 1152, 128, bits, false, 1e-2);
    run<__half, __half, __half>("quantized_mv_f16", quantized_mv_f16, VECTOR, 3, 33, 320, 64, bits, false, 1e-3);
    // The ring of weight loads wrapping (a warp's steps past 2 U: K past 8 x 4 x 2 U chunks), with dead lanes in the last step.
    run<bf, bf, bf>("quantized_mv_bf16", quantized_mv_bf16, VECTOR, 1, 18, 5152, 32, bits, false, 1e-2);
    run<__half, __half, __half>("quantized_mv_f16", quantized_mv_f16, VECTOR, 5, 24, 6272, 64, bits, false, 1e-3);
    // The matrix engine, 64 x 128 tiles: partial tiles, x by cp.async.
    run<bf, bf, bf>("quantized_mm_bf16", quantized_mm_bf16, MATRIX, 70, 130, 96, 32, bits, false, 1e-2);
    run<__half, __half, __half>("quantized_mm_f16", quantized_mm_f16, MATRIX, 9, 7, 256, 128, bits, false, 1e-3);
    // f32.
    run<float, float, float>("quantized_mv_f32", quantized_mv_f32, SIMT, 5, 9, 256, 64, bits, false, 1e-5);
    run<float, float, float>("quantized_mm_f32", quantized_mm_f32, SIMT, 11, 6, 96, 32, bits, false, 1e-5);
    // mlx-native's: vector up to 8 rows, the 64 x 128 matrix tiles past them (x through registers for f32), any layout.
    run<float, bf, float>("quantized_matmul", quantized_matmul, VECTOR, 2, 24, 256, 64, bits, true, 1e-2);
    run<float, bf, float>("quantized_matmul", quantized_matmul, VECTOR, 2, 20, 6272, 64, bits, true, 1e-2);
    run<float, bf, float>("quantized_matmul_simd", quantized_matmul_simd, MATRIX_SMALL, 20, 40, 128, 32, bits, true, 1e-2);
    run<bf, bf, bf>("quantized_matmul_simd_bf16", quantized_matmul_simd_bf16, MATRIX_SMALL, 65, 129, 64, 64, bits, true, 1e-2);
    run<bf, bf, bf>("quantized_matmul_simd_bf16", quantized_matmul_simd_bf16, VECTOR, 4, 17, 128, 128, bits, true, 1e-2);
    run<float, bf, float>("quantized_matmul", quantized_matmul, ANY, 3, 7, 10, 4, bits, true, 1e-2);
    run<bf, bf, bf>("quantized_matmul_simd_bf16", quantized_matmul_simd_bf16, ANY, 9, 5, 100, 48, bits, true, 1e-2);
  }
  // The group-column engine through the entries (one token, 4 bits, N >= 5120): partial rounds, rows past a
  // tile, 4 and 2 warps a tile, f32 x rounded to bf16.
  run<bf, bf, bf>("quantized_mv_bf16", quantized_mv_bf16, GROUPS, 1, 5124, 320, 32, 4, false, 1e-2);
  run<__half, __half, __half>("quantized_mv_f16", quantized_mv_f16, GROUPS, 1, 5128, 1152, 128, 4, false, 1e-3);
  run<float, bf, float>("quantized_matmul_simd", quantized_matmul_simd, GROUPS, 1, 16400, 192, 64, 4, true, 1e-2);
  // The compact entries of mlx-native's kernels (quantizedCudaEntry) at their engines' launches: the vector one at
  // every bits, the group-column one at every group size and both warp splits.
  run<float, bf, float>("quantized_matmul_vec4", quantized_matmul_vec4, VECTOR, 3, 40, 6272, 64, 4, true, 1e-2);
  run<float, bf, float>("quantized_matmul_vec6", quantized_matmul_vec6, VECTOR, 8, 17, 192, 32, 6, true, 1e-2);
  run<float, bf, float>("quantized_matmul_vec8", quantized_matmul_vec8, VECTOR, 1, 33, 256, 128, 8, true, 1e-2);
  run<bf, bf, bf>("quantized_matmul_simd_bf16_vec4", quantized_matmul_simd_bf16_vec4, VECTOR, 2, 24, 256, 64, 4, true, 1e-2);
  run<float, bf, float>("quantized_matmul_gc32_w4", quantized_matmul_gc32_w4, GROUPS, 1, 5124, 320, 32, 4, true, 1e-2);
  run<float, bf, float>("quantized_matmul_gc64_w2", quantized_matmul_gc64_w2, GROUPS, 1, 16400, 192, 64, 4, true, 1e-2);
  run<bf, bf, bf>("quantized_matmul_simd_bf16_gc128_w4", quantized_matmul_simd_bf16_gc128_w4, GROUPS, 1, 5128, 1152, 128, 4, true, 1e-2);
  run<bf, bf, bf>("quantized_mv_bf16_vec6", quantized_mv_bf16_vec6, VECTOR, 5, 24, 6272, 64, 6, false, 1e-2);
  run<__half, __half, __half>("quantized_mv_f16_vec4", quantized_mv_f16_vec4, VECTOR, 1, 33, 320, 32, 4, false, 1e-3);
  run<__half, __half, __half>("quantized_mv_f16_gc128_w4", quantized_mv_f16_gc128_w4, GROUPS, 1, 5128, 1152, 128, 4, false, 1e-3);
  run<bf, bf, bf>("quantized_mv_bf16_gc32_w2", quantized_mv_bf16_gc32_w2, GROUPS, 1, 16400, 320, 32, 4, false, 1e-2);
  // A compact entry given sizes of another engine (bits 8 to the 4-bit entry, m 12 past the vector engine's 8, group 64 to
  // the group-column entry of 32): the any engine's exact sums at that launch.
  run<float, bf, float>("quantized_matmul_vec4 (8 bits)", quantized_matmul_vec4, VECTOR, 2, 24, 256, 64, 8, true, 1e-2);
  run<float, bf, float>("quantized_matmul_vec4 (m 12)", quantized_matmul_vec4, VECTOR, 12, 24, 256, 64, 4, true, 1e-2);
  run<float, bf, float>("quantized_matmul_gc32_w4 (group 64)", quantized_matmul_gc32_w4, GROUPS, 1, 5124, 320, 64, 4, true, 1e-2);
  if (big) {
    run<bf, bf, bf>("quantized_mv_bf16", quantized_mv_bf16, VECTOR, 3, 8200, 64, 64, 4, false, 1e-2);
    run<__half, __half, __half>("quantized_mv_f16", quantized_mv_f16, VECTOR, 8, 2000, 4096, 128, 6, false, 1e-3);
    run<bf, bf, bf>("quantized_mm_bf16 (128 x 256)", quantized_mm_bf16, MATRIX, 1030, 1040, 64, 32, 8, false, 1e-2);
    run<__half, __half, __half>("quantized_mm_f16 (128 x 256)", quantized_mm_f16, MATRIX, 1024, 1024, 32, 32, 4, false, 1e-3);
  }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
