// The dense family's CUDA kernels (shaders/cuda/dense.cu) on the CPU
// simulation (sim_runtime.h), against a float64 reference, at the launches
// of ts/ops/dense.ts (denseMvCudaLaunch, denseMmCudaLaunch and the crate
// kernels' grids, written out again below): every copy path (cp.async,
// registers, unaligned rows), the mma.sync tile shapes and the Hopper
// launches' tiles of each width, 128 x 256 to 128 x 128 (wgmma in the
// simulation's model, or mma.sync tiles of the same shape when built with
// -DMLXN_SIM_NO_WGMMA),
// both vector row counts, the crate's byte strides. Error: |got - want| /
// sum |x w|, under the dtype's tolerance (tests/dense.test.ts says why).
// run.sh builds and runs it; `big` adds the sizes that take the mma.sync
// 128 x 256 tiles and 32-row vector blocks (minutes).
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <string>

// Reference with strides in elements: y[b][i][j] = sum_k X(b,i,k) W(b/r, j, k).
struct Ref { std::vector<double> y, abs; };
template <class TX, class TW>
Ref reference(const Arr<TX>& x, u64 xr, u64 xb, const Arr<TW>& w, u64 wr, u64 wb, u32 M, u32 N, u32 K, u32 batch, u32 r2, bool round_x_to_w) {
  Ref out{std::vector<double>(size_t(batch) * M * N), std::vector<double>(size_t(batch) * M * N)};
  for (u32 b = 0; b < batch; ++b)
    for (u32 i = 0; i < M; ++i)
      for (u32 j = 0; j < N; ++j) {
        double s = 0, a = 0;
        for (u32 k = 0; k < K; ++k) {
          double xv = x.at(b * xb + i * xr + k);
          if (round_x_to_w) xv = back(cvt<TW>(xv));
          const double p = xv * w.at((b / r2) * wb + j * wr + k);
          s += p;
          a += std::fabs(p);
        }
        out.y[(size_t(b) * M + i) * N + j] = s;
        out.abs[(size_t(b) * M + i) * N + j] = a;
      }
  return out;
}
template <class TY>
void check(const std::string& what, const Arr<TY>& y, const Ref& r, double tol) {
  double worst = 0;
  for (size_t i = 0; i < r.y.size(); ++i) {
    const double e = std::fabs(y.at(i) - r.y[i]) / r.abs[i];
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-60s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), worst, tol);
}

// A matrix-form launch of 16-bit weights: wide > 0 is the Hopper launch of
// a 128 x wide tile (denseMmCudaLaunch: 256 threads, denseMmHopperBytes: 4
// or 5 stages of (128 + wide) 128 bytes, and 1024), wide == 0 the mma.sync
// tiles of denseMmCudaTile.
struct MmLaunch { SimDim grid, block; size_t smem; };
MmLaunch mm_launch(u32 m, u32 n, u32 batch, u32 wide) {
  if (wide > 0) return {{cdiv(n, wide) * cdiv(m, 128) * batch, 1, 1}, {256, 1, 1}, size_t(wide == 256 ? 4 : 5) * (128 + wide) * 128 + 1024};
  const bool big = m >= 1024 && n >= 1024;
  const u32 bm = big ? 128 : 64, bn = big ? 256 : 128;
  return {{cdiv(n, bn) * cdiv(m, bm) * batch, 1, 1}, {big ? 256u : 128u, 1, 1}, size_t(4) * (bm + bn) * 40 * 2};
}
std::string tile_name(u32 wide) { return wide > 0 ? " [128 x " + std::to_string(wide) + "]" : ""; }

template <class T, class K>
void run_dense(const char* name, K kernel, u32 m, u32 n, u32 k, u32 batch, u32 wbatch, bool vector, u32 wide = 0) {
  Arr<T> x(size_t(batch) * m * k), w(size_t(wbatch) * n * k), y(size_t(batch) * m * n);
  x.random(); w.random(); y.poison();
  DenseParams p{m, n, k, batch, wbatch};
  if (vector) {
    // ts/ops/dense.ts denseMvCudaRows: f32 8 at one token and below 1024 rows; 32 from 8192; else 16.
    const u32 rows = sizeof(T) == 4 && (m == 1 || n < 1024) ? 8 : n >= 8192 ? 32 : 16;
    sim_launch({cdiv(n, rows) * batch, 1, 1}, {256, 1, 1}, 0, [&] { kernel(x.p, w.p, y.p, &p); });
  } else if (sizeof(T) == 4) {
    sim_launch({cdiv(n, 64) * cdiv(m, 64) * batch, 1, 1}, {256, 1, 1}, 0, [&] { kernel(x.p, w.p, y.p, &p); });
  } else {
    const MmLaunch l = mm_launch(m, n, batch, wide);
    sim_launch(l.grid, l.block, l.smem, [&] { kernel(x.p, w.p, y.p, &p); });
  }
  Ref r = reference(x, k, u64(m) * k, w, k, u64(n) * k, m, n, k, batch, batch / wbatch, false);
  check(std::string(name) + tile_name(wide) + " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + " b=" +
        std::to_string(batch) + "/" + std::to_string(wbatch), y, r, tol_of<T>());
}

template <class TX, class TW, class K>
void run_matvec(const char* name, K kernel, u32 n, u32 k) {
  Arr<TX> a(k); Arr<TW> b(size_t(n) * k); Arr<TX> c(n);
  a.random(); b.random(); c.poison();
  DenseGemmParams p{1, n, k};
  sim_launch({cdiv(n, 8), 1, 1}, {256, 1, 1}, 0, [&] { kernel(a.p, b.p, c.p, &p); });  // DENSE_MATVEC_CUDA_ROWS
  Ref r = reference(a, k, 0, b, k, 0, 1, n, k, 1, 1, false);
  check(std::string(name) + " n=" + std::to_string(n) + " k=" + std::to_string(k), c, r, tol_of<TX>());
}

void run_gemm_f16(u32 m, u32 n, u32 k, u32 wide = 0) {
  Arr<__half> a(size_t(m) * k), b(size_t(n) * k), c(size_t(m) * n);
  a.random(); b.random(); c.poison();
  DenseGemmParams p{m, n, k};
  const MmLaunch l = mm_launch(m, n, 1, wide);
  sim_launch(l.grid, l.block, l.smem, [&] { dense_gemm_f16(a.p, b.p, c.p, &p); });
  Ref r = reference(a, k, 0, b, k, 0, m, n, k, 1, 1, false);
  check("dense_gemm_f16" + tile_name(wide) + " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k), c, r, 1e-3);
}

// The crate's batched kernels with row strides wrow (weight) and xrow (input), elements.
// gemv_rows: the _rows entry's launch (a block a row, 32 bytes of partials).
template <bool gemv, class TW, class K>
void run_hf2q(const char* name, K kernel, u32 m, u32 n, u32 k, u32 b0, u32 b1, u32 wrow, u32 xrow, u32 wide = 0, bool gemv_rows = false) {
  Arr<TW> w(size_t(b0) * n * wrow); Arr<float> x(size_t(b1) * m * xrow); Arr<float> y(size_t(b1) * m * n);
  w.random(); x.random(); y.poison();
  Ref r = reference(x, xrow, u64(m) * xrow, w, wrow, u64(n) * wrow, m, n, k, b1, b1 / b0, !gemv && sizeof(TW) == 2);
  if constexpr (gemv) {
    DenseGemvBf16Params p{};
    p.ne00 = k; p.ne01 = n; p.ne02 = b0; p.nb00 = 2; p.nb01 = u64(wrow) * 2; p.nb02 = u64(n) * wrow * 2; p.nb03 = 0;
    p.ne10 = k; p.ne11 = m; p.ne12 = b1; p.nb10 = 4; p.nb11 = u64(xrow) * 4; p.nb12 = u64(m) * xrow * 4; p.nb13 = 0;
    p.ne0 = n; p.ne1 = m; p.nr0 = 2; p.r2 = short(b1 / b0); p.r3 = 1;
    // The op's launch (ts/ops/dense.ts DENSE_MATVEC_CUDA_ROWS): 8 rows a block; or a row a block.
    sim_launch({(gemv_rows ? n : cdiv(n, 8)) * m * b1, 1, 1}, {256, 1, 1}, gemv_rows ? 32 : 0,
               [&] { kernel(&p, (const char*)w.p, (const char*)x.p, (char*)y.p); });
  } else {
    DenseMmTensorParams p{};
    p.ne00 = k; p.ne02 = b0; p.nb01 = u64(wrow) * sizeof(TW); p.nb02 = u64(n) * wrow * sizeof(TW); p.nb03 = 0; p.ne12 = b1;
    p.nb10 = 4; p.nb11 = u64(xrow) * 4; p.nb12 = u64(m) * xrow * 4; p.nb13 = 0; p.ne0 = n; p.ne1 = m; p.r2 = short(b1 / b0); p.r3 = 1;
    if constexpr (sizeof(TW) == 4) {
      sim_launch({cdiv(n, 64) * cdiv(m, 64) * b1, 1, 1}, {256, 1, 1}, 0, [&] { kernel(&p, (const char*)w.p, (const char*)x.p, (char*)y.p); });
    } else {
      const MmLaunch l = mm_launch(m, n, b1, wide);
      sim_launch(l.grid, l.block, l.smem, [&] { kernel(&p, (const char*)w.p, (const char*)x.p, (char*)y.p); });
    }
  }
  check(std::string(name) + tile_name(wide) + " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + " b=" + std::to_string(b1) + "/" +
        std::to_string(b0) + " rows " + std::to_string(wrow) + "/" + std::to_string(xrow), y, r, 1e-5);
}

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::string(argv[1]) == "big";
  // Vector form: f16 / bf16 tensor cores (k % 8 == 0) in 16-row blocks; otherwise one token a warp a row (mv_lanes; f32
  // in 8-row blocks), 2 to 8 tokens SIMT.
  run_dense<__nv_bfloat16>("dense_mv_bf16", dense_mv_bf16, 3, 100, 64, 1, 1, true);
  run_dense<__nv_bfloat16>("dense_mv_bf16", dense_mv_bf16, 8, 37, 520, 2, 1, true);
  run_dense<__half>("dense_mv_f16", dense_mv_f16, 1, 33, 40, 3, 3, true);
  run_dense<__nv_bfloat16>("dense_mv_bf16 (simt)", dense_mv_bf16, 5, 20, 33, 1, 1, true);
  run_dense<float>("dense_mv_f32", dense_mv_f32, 5, 40, 36, 2, 1, true);
  run_dense<float>("dense_mv_f32", dense_mv_f32, 1, 7, 33, 1, 1, true);
  run_dense<float>("dense_mv_f32", dense_mv_f32, 1, 1030, 72, 2, 1, true);
  run_dense<float>("dense_mv_f32", dense_mv_f32, 3, 128, 2816, 1, 1, true);
  // One token: 8 rows a pass (Gemma 4's router; rows past n in the last block; the simt form of a 16-bit type).
  run_dense<float>("dense_mv_f32", dense_mv_f32, 1, 128, 2816, 1, 1, true);
  run_dense<float>("dense_mv_f32", dense_mv_f32, 1, 13, 2816, 3, 3, true);
  run_dense<__nv_bfloat16>("dense_mv_bf16 (simt)", dense_mv_bf16, 1, 20, 33, 1, 1, true);
  // mv_lanes' walks past one round of 8 vectors (or elements) a lane: the last round partial, with either walk.
  run_dense<__nv_bfloat16>("dense_mv_bf16", dense_mv_bf16, 1, 45, 2056, 2, 1, true);
  run_dense<float>("dense_mv_f32", dense_mv_f32, 1, 21, 1030, 1, 1, true);
  // Matrix form, 64 x 128 tiles: cp.async path and the register path (k % 8 != 0).
  run_dense<__nv_bfloat16>("dense_mm_bf16", dense_mm_bf16, 100, 200, 96, 1, 1, false);
  run_dense<__nv_bfloat16>("dense_mm_bf16", dense_mm_bf16, 70, 130, 100, 2, 1, false);
  run_dense<__half>("dense_mm_f16", dense_mm_f16, 9, 7, 33, 1, 1, false);
  run_dense<__half>("dense_mm_f16", dense_mm_f16, 65, 129, 200, 2, 2, false);
  run_dense<float>("dense_mm_f32", dense_mm_f32, 70, 130, 37, 2, 1, false);
  run_dense<float>("dense_mm_f32", dense_mm_f32, 64, 64, 64, 1, 1, false);
  run_gemm_f16(33, 65, 70);
  run_gemm_f16(64, 128, 64);
  run_matvec<float, float>("dense_matvec_f32", dense_matvec_f32, 37, 130);
  run_matvec<float, __half>("dense_matvec_f16w_f32io", dense_matvec_f16w_f32io, 37, 256);
  run_matvec<float, __nv_bfloat16>("dense_matvec_bf16w_f32io", dense_matvec_bf16w_f32io, 37, 130);
  run_matvec<float, __nv_bfloat16>("dense_matvec_bf16w_f32io", dense_matvec_bf16w_f32io, 40, 512);
  run_matvec<__half, __half>("dense_matvec_f16", dense_matvec_f16, 17, 72);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4", hf2q_dense_gemv_bf16_f32_4, 3, 37, 64, 2, 4, 64, 64);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4", hf2q_dense_gemv_bf16_f32_4, 2, 20, 40, 1, 2, 45, 41);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4", hf2q_dense_gemv_bf16_f32_4, 1, 1031, 72, 1, 1, 72, 72);
  // Past one round a lane: 16-byte rows (257 vectors), then rows 1033 elements apart (the element walk).
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4", hf2q_dense_gemv_bf16_f32_4, 1, 37, 2056, 1, 1, 2056, 2056);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4", hf2q_dense_gemv_bf16_f32_4, 2, 33, 1030, 1, 2, 1033, 1030);
  // A block a row (the op's launch for few rows): Gemma 4's router (352 vectors over 256 threads), Qwen3.6's, more
  // vectors than one round of 4 a thread (k 9000), batches with a broadcast weight, strided rows, the element walk.
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4_rows", hf2q_dense_gemv_bf16_f32_4_rows, 1, 128, 2816, 1, 1, 2816, 2816, 0, true);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4_rows", hf2q_dense_gemv_bf16_f32_4_rows, 1, 21, 2048, 1, 1, 2048, 2048, 0, true);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4_rows", hf2q_dense_gemv_bf16_f32_4_rows, 1, 5, 9000, 1, 1, 9000, 9000, 0, true);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4_rows", hf2q_dense_gemv_bf16_f32_4_rows, 3, 9, 64, 2, 4, 72, 64, 0, true);
  run_hf2q<true, __nv_bfloat16>("hf2q_dense_gemv_bf16_f32_4_rows", hf2q_dense_gemv_bf16_f32_4_rows, 2, 7, 1030, 1, 2, 1033, 1030, 0, true);
  run_matvec<float, __nv_bfloat16>("dense_matvec_bf16w_f32io", dense_matvec_bf16w_f32io, 19, 4100);
  run_hf2q<false, __nv_bfloat16>("hf2q_dense_mm_bf16_f32_tensor", hf2q_dense_mm_bf16_f32_tensor, 35, 67, 64, 2, 4, 64, 64);
  run_hf2q<false, __nv_bfloat16>("hf2q_dense_mm_bf16_f32_tensor", hf2q_dense_mm_bf16_f32_tensor, 35, 67, 40, 2, 4, 48, 44);
  run_hf2q<false, __half>("hf2q_dense_mm_f16_f32_tensor", hf2q_dense_mm_f16_f32_tensor, 70, 130, 100, 1, 2, 100, 100);
  run_hf2q<false, __half>("hf2q_dense_mm_f16_f32_tensor", hf2q_dense_mm_f16_f32_tensor, 20, 30, 40, 1, 1, 45, 41);
  run_hf2q<false, float>("hf2q_dense_mm_f32_f32_tensor", hf2q_dense_mm_f32_f32_tensor, 35, 67, 64, 2, 4, 68, 64);
  // Hopper launches: each tile width; k tails (k % 64), more k tiles than
  // stages (k = 520: 9), the register paths (k % 8 != 0; f32 x), rows and
  // columns past M and N, batches.
  for (u32 wide : {256u, 224u, 192u, 160u, 128u}) {
    run_dense<__nv_bfloat16>("dense_mm_bf16", dense_mm_bf16, 200, 300, 520, 1, 1, false, wide);
    run_dense<__half>("dense_mm_f16", dense_mm_f16, 130, 70, 100, 2, 1, false, wide);
    run_dense<__nv_bfloat16>("dense_mm_bf16 (register path)", dense_mm_bf16, 9, 7, 36, 1, 1, false, wide);
    run_gemm_f16(33, 200, 72, wide);
    run_hf2q<false, __nv_bfloat16>("hf2q_dense_mm_bf16_f32_tensor", hf2q_dense_mm_bf16_f32_tensor, 35, 67, 264, 2, 4, 264, 264, wide);
    run_hf2q<false, __half>("hf2q_dense_mm_f16_f32_tensor", hf2q_dense_mm_f16_f32_tensor, 20, 30, 40, 1, 1, 45, 41, wide);
  }
  if (big) {
    run_dense<__nv_bfloat16>("dense_mv_bf16 (32-row blocks)", dense_mv_bf16, 3, 8200, 64, 1, 1, true);
    run_dense<__nv_bfloat16>("dense_mm_bf16 (128 x 256)", dense_mm_bf16, 1030, 1040, 64, 1, 1, false);
    run_dense<__half>("dense_mm_f16 (128 x 256, register path)", dense_mm_f16, 1024, 1030, 36, 1, 1, false);
    run_hf2q<false, __nv_bfloat16>("hf2q_dense_mm_bf16_f32_tensor (128 x 256)", hf2q_dense_mm_bf16_f32_tensor, 1024, 1024, 64, 1, 1, 64, 64);
  }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
