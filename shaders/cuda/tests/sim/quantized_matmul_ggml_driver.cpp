// The quantized_matmul_ggml family's CUDA kernels
// (shaders/cuda/quantized_matmul_ggml.cu) on the CPU simulation
// (sim_runtime.h), against a float64 dequantization written here from the
// layouts (ts/ops/quantized_matmul_ggml.ts), at the launches of
// ts/ops/quantized_matmul_ggml.ts (ggmlMatmulCudaLaunch and the rows launch,
// written out again below): the vector engine (one token to 8 and past 8,
// partial windows of Q4_0 / Q8_0, rows past N, rows whose bytes are not
// 16-byte aligned, the weight's last bytes; each format's stage reads:
// kq_load and raw_load for Q4_K / Q5_K, qs_raw and raw_load for Q4_0 / Q8_0,
// q6_raw at both word alignments), the matrix engine in both tile
// shapes and its split-k entries, dequantization to f32, f16 and bf16, and embedding rows (a bad id
// clamped, a scale). Blocks are random bytes with their f16 scales set to
// small values. Products: |got - want| / sum |x w| under f16's 1e-3 (the
// tensor cores take the weight and x in f16); the int8 variants under
// 1e-2; dequantization and embedding:
// |got - want| / max |want| under the output type's tolerance. run.sh builds
// and runs it; `big` adds the 128 x 256 tiles and many vector blocks;
// `variants` runs only the int8 engine's variants (run_variants) and Q4_K's
// group-column ones (run_gc), `vgc` only the latter, `q8_0` / `q6_K` only
// that format's products, `i8` only the op's int8 entries (I8_ENTRIES and
// Q6G), `q6g` only Q6_K's grouped one (Q6G).
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include "ggml_blocks.h"
#include <string>

// N random rows of K values, 16-byte aligned (as views and allocations
// are) plus `shift` bytes: w, rows rb bytes apart.
struct Weight {
  std::vector<unsigned char> raw;
  unsigned char* w;
  u64 rb;
};
Weight random_weight(int f, u32 N, u32 K, u32 shift) {
  Weight t;
  t.rb = u64(K) / qk_of(f) * bytes_of(f);
  t.raw.resize(N * t.rb + 16 + shift);
  t.w = t.raw.data() + ((16 - (reinterpret_cast<uintptr_t>(t.raw.data()) & 15)) & 15) + shift;
  random_blocks(f, t.w, size_t(N) * K / qk_of(f));
  return t;
}

// The float64 product y = x W^T ([M, N]) and sum |x w| of each output.
void product(int f, const Weight& t, const Arr<float>& x, u32 M, u32 N, u32 K, std::vector<double>& want, std::vector<double>& mag) {
  want.assign(size_t(M) * N, 0.0);
  mag.assign(size_t(M) * N, 0.0);
  for (u32 i = 0; i < M; ++i)
    for (u32 j = 0; j < N; ++j) {
      double s = 0, a = 0;
      for (u32 k = 0; k < K; ++k) {
        const double pr = x.at(size_t(i) * K + k) * wat(f, t.w, t.rb, j, k);
        s += pr;
        a += std::fabs(pr);
      }
      want[size_t(i) * N + j] = s;
      mag[size_t(i) * N + j] = a;
    }
}

// The worst |y - ref| / mag.
double worst_of(const Arr<float>& y, const std::vector<double>& ref, const std::vector<double>& mag) {
  double worst = 0;
  for (size_t e = 0; e < ref.size(); ++e) {
    const double d = std::fabs(y.at(e) - ref[e]) / mag[e];
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

// Bytes of a vector-engine stage row (ggmlMvCudaStageRow): a window's bytes from 16-byte units.
u32 stage_row(int f) { return 16 * ((256 / qk_of(f) * bytes_of(f) + 30 + 15) / 16); }

// ggmlMatmulCudaLaunch's shared memory of the vector entry on its own grid
// (ceil(N / 16) blocks): the vector engine's, or a group-column engine's
// where it takes one token (Q4_K the larger of both).
u32 mv_smem(int f, u32 M, u32 K) {
  const u32 sp = stage_row(f);
  u32 smem = 4 * 3 * 16 * sp + 4 * 128 * 4;
  if (M == 1 && f == Q4_K) smem = std::max(smem, K * 2 + K / 32 * 4 + 1024);
  if (M == 1 && f == Q8_0) smem = 4 * std::min(3u, cdiv(cdiv(K, 256), 4)) * 16 * sp + cdiv(K, 256) * 8 * 68 + 320;
  if (M == 1 && f == Q6_K) smem = 4 * std::min(3u, cdiv(K / 256, 4)) * 16 * sp + K * 2 + K / 4 + 320;
  return smem;
}

// y = x W^T through kernel_mul_mv_<t>_f32 (vector) or kernel_mul_mm_<t>_f32
// (matrix), the weight 16-byte aligned plus `shift` bytes.
template <class MV, class MM>
void run_matmul(int f, MV mv, MM mm, bool matrix, u32 M, u32 N, u32 K, bool big_tile = true, u32 shift = 0) {
  const Weight t = random_weight(f, N, K, shift);
  const unsigned char* w = t.w;
  const u64 rb = t.rb;
  Arr<float> x(size_t(M) * K), y(size_t(M) * N);
  x.random();
  y.poison();
  const std::string what = std::string(matrix ? "mm " : "mv ") + fmt_name(f) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                           " K=" + std::to_string(K) + (shift ? " weight +" + std::to_string(shift) : "");
  if (!matrix) {
    GgmlMatvecParams p{K, N, 1, K, 1, N, M, 1, 1};
    sim_launch({cdiv(N, 16), 1, 1}, {128, 1, 1}, mv_smem(f, M, K), [&] { mv(w, x.p, y.p, &p); });
  } else {
    GgmlMatmulMmParams p{};
    p.ne00 = int(K); p.ne02 = 1; p.nb01 = rb; p.nb02 = rb * N; p.ne12 = 1; p.nb10 = 4; p.nb11 = 4ull * K; p.nb12 = 4ull * K * M;
    p.ne0 = int(N); p.ne1 = int(M); p.r2 = 1; p.r3 = 1;
    const bool big = big_tile && M >= 1024 && N >= 1024;
    const u32 bm = big ? 128 : 64, bn = big ? 256 : 128;
    sim_launch({cdiv(N, bn) * cdiv(M, bm), 1, 1}, {big ? 256u : 128u, 1, 1}, 2 * (bm + bn) * 40 * 2, [&] { mm(&p, w, x.p, y.p); });
  }
  std::vector<double> want, mag;
  product(f, t, x, M, N, K, want, mag);
  const double worst = worst_of(y, want, mag);
  report(worst <= 1e-3, what, worst, 1e-3);
}

// y = x W^T through the vector form's _xs entry at its launch (ceil(N / 64)
// blocks of 128 threads, the stages and two x windows of 8 tokens: 4 x 3 x
// 16 x SP + 9216 bytes), the weight 16-byte aligned plus `shift` bytes, x
// `xshift` floats past 16 bytes (its 16-byte reads or its floats).
template <class XS>
void run_xs(int f, XS xs, u32 M, u32 N, u32 K, u32 shift = 0, u32 xshift = 0) {
  const Weight t = random_weight(f, N, K, shift);
  Arr<float> xb(size_t(M) * K + xshift), y(size_t(M) * N);
  xb.random();
  y.poison();
  Arr<float> x(size_t(M) * K);
  for (size_t e = 0; e < x.n; ++e) x.p[e] = xb.p[e + xshift];
  GgmlMatvecParams p{K, N, 1, K, 1, N, M, 1, 1};
  sim_launch({cdiv(N, 64), 1, 1}, {128, 1, 1}, 4 * 3 * 16 * stage_row(f) + 2 * 8 * 144 * 4, [&] { xs(t.w, xb.p + xshift, y.p, &p); });
  std::vector<double> want, mag;
  product(f, t, x, M, N, K, want, mag);
  const double worst = worst_of(y, want, mag);
  const std::string what = std::string("mv xs ") + fmt_name(f) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                           std::to_string(K) + (shift ? " weight +" + std::to_string(shift) : "") + (xshift ? " x +" + std::to_string(4 * xshift) : "");
  report(worst <= 1e-3, what, worst, 1e-3);
}

// y = x W^T through kernel_mul_mm_<t>_f32_splitk: S slices of C chunks
// of 32 (the last what is left), the matrix form's tiles by size, partials
// poisoned, the words zero before; y against the float64 product, the words
// zero again after.
template <class MMS>
void run_split(int f, MMS mms, u32 M, u32 N, u32 K, u32 S, u32 C, u32 shift = 0) {
  const Weight t = random_weight(f, N, K, shift);
  Arr<float> x(size_t(M) * K), y(size_t(M) * N), partials(size_t(S) * M * N);
  x.random();
  y.poison();
  partials.poison();
  GgmlMatmulMmParams p{};
  p.ne00 = int(K); p.ne02 = 1; p.nb01 = t.rb; p.nb02 = t.rb * N; p.ne12 = 1; p.nb10 = 4; p.nb11 = 4ull * K; p.nb12 = 4ull * K * M;
  p.ne0 = int(N); p.ne1 = int(M); p.r2 = 1; p.r3 = 1;
  const GgmlMatmulSplitParams sp{S, C};
  const bool big = M >= 1024 && N >= 1024;
  const u32 bm = big ? 128 : 64, bn = big ? 256 : 128, tiles = cdiv(N, bn) * cdiv(M, bm);
  std::vector<u32> words(tiles, 0u);
  sim_launch({tiles * S, 1, 1}, {big ? 256u : 128u, 1, 1}, 2 * (bm + bn) * 40 * 2,
             [&] { mms(&p, t.w, x.p, y.p, partials.p, words.data(), &sp); });
  std::vector<double> want, mag;
  product(f, t, x, M, N, K, want, mag);
  const double worst = worst_of(y, want, mag);
  bool zero = true;
  for (u32 v : words) zero = zero && v == 0u;
  const std::string what = std::string("mm split ") + fmt_name(f) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                           std::to_string(K) + " S=" + std::to_string(S) + " C=" + std::to_string(C) + (zero ? "" : " (words not zero after)");
  report(zero && worst <= 1e-3, what, worst, 1e-3);
}

// The int8 engine's variants (kernel_mul_mv_<t>_f32_vdq*, launched by
// bench/qmv_variants.ts only) beside the op's vector entry on the same
// inputs: each against the float64 product (the same 1e-2 as the entry) and
// against the entry's output (|variant - entry| / sum |x w|, same bound). A
// grid of 2 blocks makes each block walk several units. (R, S): the
// variant's rows a warp group and warps a group, for its shared memory.
struct DqVariant {
  const char* name;
  void (*kernel)(const unsigned char*, const float*, float*, const GgmlMatvecParams*);
  u32 R, S;
};
template <class MV>
void run_variants(int f, MV mv, const std::vector<DqVariant>& vs, u32 M, u32 N, u32 K, u32 shift = 0) {
  const Weight t = random_weight(f, N, K, shift);
  Arr<float> x(size_t(M) * K), y0(size_t(M) * N);
  x.random();
  y0.poison();
  GgmlMatvecParams p{K, N, 1, K, 1, N, M, 1, 1};
  sim_launch({cdiv(N, 16), 1, 1}, {128, 1, 1}, mv_smem(f, M, K), [&] { mv(t.w, x.p, y0.p, &p); });
  std::vector<double> want, mag, entry(size_t(M) * N);
  product(f, t, x, M, N, K, want, mag);
  for (size_t e = 0; e < entry.size(); ++e) entry[e] = y0.at(e);
  for (const DqVariant& v : vs) {
    Arr<float> y(size_t(M) * N);
    y.poison();
    const u32 smem = M * K + M * (K / 32) * 8 + 2 * 8 * v.R * 8 * 4;
    sim_launch({2, 1, 1}, {256, 1, 1}, smem, [&] { v.kernel(t.w, x.p, y.p, &p); });
    const double worst = worst_of(y, want, mag), vs_entry = worst_of(y, entry, mag);
    const std::string what = std::string(v.name) + " " + fmt_name(f) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                             std::to_string(K) + (shift ? " weight +" + std::to_string(shift) : "");
    report(worst <= 1e-2, what + " vs f64", worst, 1e-2);
    report(vs_entry <= 1e-2, what + " vs entry", vs_entry, 1e-2);
  }
}

// The group-column variants of Q4_K (kernel_mul_mv_q4_K_f32_vgc<W>, one
// token, launched by bench/qmv_variants.ts only) beside the entry: against
// the float64 product and the entry's output, as run_variants; their launch
// (grid ceil(ceil(N / 16) W / 4) of 128 threads; kernel_mul_mv_q4_K_f32_gc8:
// a 16-row tile a block of 8 warps).
template <class MV, class GC>
void run_gc(MV mv, GC gc, u32 W, u32 N, u32 K) {
  const int f = Q4_K;
  const Weight t = random_weight(f, N, K, 0);
  Arr<float> x(K, 16), y0(N), y(N);
  x.random();
  y0.poison();
  y.poison();
  GgmlMatvecParams p{K, N, 1, K, 1, N, 1, 1, 1};
  sim_launch({cdiv(N, 16), 1, 1}, {128, 1, 1}, mv_smem(f, 1, K), [&] { mv(t.w, x.p, y0.p, &p); });
  const u32 warps = std::max(W, 4u);
  sim_launch({cdiv(cdiv(N, 16) * W, warps), 1, 1}, {32 * warps, 1, 1}, K * 2 + K / 32 * 4 + 1024, [&] { gc(t.w, x.p, y.p, &p); });
  std::vector<double> want, mag, entry(N);
  product(f, t, x, 1, N, K, want, mag);
  for (size_t e = 0; e < entry.size(); ++e) entry[e] = y0.at(e);
  const double worst = worst_of(y, want, mag), vs_entry = worst_of(y, entry, mag);
  const std::string what = "vgc" + std::to_string(W) + " Q4_K M=1 N=" + std::to_string(N) + " K=" + std::to_string(K);
  report(worst <= 1e-2, what + " vs f64", worst, 1e-2);
  report(vs_entry <= 1e-2, what + " vs entry", vs_entry, 1e-2);
}

// kernel_mul_mv_q4_K_f32_gc8 launched where its engine cannot take the
// product (x not on 16 bytes): every row NaN, nothing read past x.
void run_gc8_refused(u32 N, u32 K) {
  const Weight t = random_weight(Q4_K, N, K, 0);
  Arr<float> x(K + 4, 16), y(N);
  x.random();
  y.poison();
  GgmlMatvecParams p{K, N, 1, K, 1, N, 1, 1, 1};
  sim_launch({cdiv(N, 16), 1, 1}, {256, 1, 1}, K * 2 + K / 32 * 4 + 1024, [&] { kernel_mul_mv_q4_K_f32_gc8(t.w, x.p + 1, y.p, &p); });
  u32 nan = 0;
  for (u32 r = 0; r < N; ++r) nan += std::isnan(y.at(r)) ? 1u : 0u;
  report(nan == N, "gc8 Q4_K x off 16 bytes: rows NaN N=" + std::to_string(N), double(N - nan), 0);
}

// kernel_dequantize_<t>_<o> over `blocks` blocks.
template <class O, class K>
void run_dequantize(int f, K kernel, const char* out, size_t blocks) {
  Arr<unsigned char> src(blocks * bytes_of(f), 16);
  random_blocks(f, src.p, blocks);
  const size_t n = blocks * qk_of(f);
  Arr<O> dst(n);
  dst.poison();
  GgmlDequantizeParams p{u32(n / 16)};
  const u32 grid = std::max(1u, std::min(cdiv(n / 32, 256), 4096u));
  sim_launch({grid, 1, 1}, {256, 1, 1}, 0, [&] { kernel(src.p, dst.p, &p); });
  double worst = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(value(f, src.p + (i / qk_of(f)) * bytes_of(f), u32(i % qk_of(f)))));
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(dst.at(i) - value(f, src.p + (i / qk_of(f)) * bytes_of(f), u32(i % qk_of(f)))) / scale;
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const double tol = tol_of<O>();
  report(worst <= tol, std::string("dequantize ") + fmt_name(f) + " -> " + out + " blocks=" + std::to_string(blocks), worst, tol);
}

// embedding_gather_scale_batch_<t>_to_<o>: vocab rows of `hidden`, ids with one past the table.
template <class O, class K>
void run_embedding(int f, K kernel, const char* out, u32 vocab, u32 hidden, u32 tokens, float scale) {
  const u64 rb = u64(hidden) / qk_of(f) * bytes_of(f);
  Arr<unsigned char> table(vocab * rb, 16);
  random_blocks(f, table.p, size_t(vocab) * hidden / qk_of(f));
  Arr<u32> ids(tokens);
  std::uniform_int_distribution<u32> id(0, vocab - 1);
  for (u32 i = 0; i < tokens; ++i) ids.p[i] = i == 1 ? vocab + 7 : id(gen);
  Arr<O> dst(size_t(tokens) * hidden);
  dst.poison();
  GgmlEmbeddingParams p{scale, hidden, tokens, vocab};
  const u32 grid = std::max(1u, std::min(cdiv(u64(tokens) * hidden / 32, 256), 4096u));
  sim_launch({grid, 1, 1}, {256, 1, 1}, 0, [&] { kernel(table.p, ids.p, dst.p, &p); });
  double worst = 0, big = 0;
  std::vector<double> want(size_t(tokens) * hidden);
  for (u32 i = 0; i < tokens; ++i)
    for (u32 j = 0; j < hidden; ++j) {
      want[size_t(i) * hidden + j] = wat(f, table.p, rb, std::min(ids.p[i], vocab - 1), j) * scale;
      big = std::max(big, std::fabs(want[size_t(i) * hidden + j]));
    }
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(dst.at(i) - want[i]) / big;
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const double tol = tol_of<O>();
  report(worst <= tol, std::string("embedding ") + fmt_name(f) + " -> " + out + " tokens=" + std::to_string(tokens), worst, tol);
}

#define ALL_FORMATS(X) X(Q4_0, q4_0) X(Q8_0, q8_0) X(Q4_K, q4_K) X(Q5_K, q5_K) X(Q6_K, q6_K)

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::string(argv[1]) == "big";
  const bool only_variants = argc > 1 && std::string(argv[1]) == "variants";
#define VARIANTS(F, T)                                                                                               \
  {                                                                                                                  \
    const std::vector<DqVariant> vs = {{"vdq1", kernel_mul_mv_##T##_f32_vdq1, 1, 1},                                \
                                       {"vdq2", kernel_mul_mv_##T##_f32_vdq2, 2, 1},                                \
                                       {"vdqs4", kernel_mul_mv_##T##_f32_vdqs4, 1, 4}};                             \
    const u32 kb = qk_of(F) == 32 ? 32 : 256;                                                                        \
    /* Rows past N in the last unit; one token and 8; the bench shapes' K (Qwen3.6 up, down; Gemma 4 up). */      \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 1, 37, 5 * 256);                                                   \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 8, 19, 2 * 256 + (kb == 32 ? 96 : 0));                             \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 1, 5, 5120);                                                       \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 2, 3, 17408);                                                      \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 1, 3, 5376);                                                       \
    /* An odd number of blocks a row (rows 2-byte aligned) and a weight not 16-byte aligned. */                     \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 3, 9, kb == 32 ? 288 : 256);                                       \
    run_variants(F, kernel_mul_mv_##T##_f32, vs, 2, 11, 3 * 256, kb == 32 || F == Q6_K ? 2 : 4);                    \
  }
  // Q6_K's grouped int8 entry (kernel_mul_mv_q6_K_f32_i8g: a super-block a group of 8 lanes, 4 rows a warp): rows
  // past N in a warp's last group and in a block's last unit (37, 5, 530, 21 rows), one token, 2, 3 and 8, one
  // super-block, an odd number a row (rows alternately on 4 and 2 bytes: 2816, 5376), the weight 2 and 4 bytes off
  // 16 (row 0's first block 2 bytes into a word), 2 blocks walking the units.
#define Q6G                                                                                    \
  {                                                                                            \
    const std::vector<DqVariant> g = {{"i8g", kernel_mul_mv_q6_K_f32_i8g, 4, 1}};             \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 1, 37, 256);                                 \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 8, 19, 2 * 256);                             \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 1, 530, 2816, 2);                            \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 3, 5, 5376, 4);                              \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 1, 64, 2048);                                \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 2, 11, 3 * 256, 2);                          \
    run_variants(Q6_K, kernel_mul_mv_q6_K_f32, g, 1, 21, 768, 4);                              \
  }
  if (argc > 1 && std::string(argv[1]) == "q6g") {
    Q6G
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
  const bool only_gc = argc > 1 && std::string(argv[1]) == "vgc";
  if (only_variants || only_gc) {
    // Rows past N (a partial tile), one super-block, several, the bench shapes' K, W = 2 and 4.
    for (u32 W : {2u, 4u, 8u}) {
      auto gc = W == 2 ? kernel_mul_mv_q4_K_f32_vgc2 : W == 4 ? kernel_mul_mv_q4_K_f32_vgc4 : kernel_mul_mv_q4_K_f32_gc8;
      for (const auto& [N, K] : std::vector<std::pair<u32, u32>>{{37, 5 * 256}, {16, 256}, {70, 2048}, {5, 5120}, {3, 5376}})
        run_gc(kernel_mul_mv_q4_K_f32, gc, W, N, K);
    }
    run_gc8_refused(37, 2048);
  }
  if (only_gc) {
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
  if (only_variants) {
    ALL_FORMATS(VARIANTS)
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
#define MATMUL(F, T)                                                                                          \
  {                                                                                                           \
    const u32 kb = qk_of(F) == 32 ? 32 : 256;                                                                 \
    /* The vector engine: one token, 8, past 8 (two groups); windows whole and partial; rows past N. */      \
    run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 20, 2 * 256);                   \
    run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 8, 37, 5 * 256 + 3 * kb % 256);    \
    run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 11, 16, kb == 32 ? 96 : 256);      \
    /* Rows 2-byte aligned where the format's rows can be (9 Q4_0 / Q8_0 blocks, one Q6_K super-block). */ \
    if (F == Q4_0 || F == Q8_0 || F == Q6_K)                                                                  \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 3, 7, kb == 32 ? 288 : 256);     \
    /* Q4_K / Q5_K's weight only 4-byte aligned: raw_load's scalar reads rather than kq_load's. */         \
    if (F == Q4_K || F == Q5_K)                                                                               \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 2, 19, 3 * 256, true, 4);        \
    /* Q4_0 / Q8_0 with K / 32 even (qs_raw's word reads) and a partial last window. */                         \
    if (F == Q4_0 || F == Q8_0)                                                                              \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 2, 21, 5 * 256 + 64);            \
    /* Q8_0 at one token (the group-column engine): a partial last round (704: 2 rounds and 6 blocks; 64: one  \
       of 2 blocks), rows past a tile, the weight 4 bytes off 16; rows on 2 bytes (k 736, 23 blocks; the      \
       weight 2 off), 1, 2 and 3 stages a warp (k up to 1024, 2048, past). */                                  \
    if (F == Q8_0) {                                                                                          \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 37, 704);                      \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 5, 64);                        \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 16, 2112, true, 4);            \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 9, 17408, true, 12);           \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 19, 736);                      \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 3, 704, true, 2);              \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 21, 2048, true, 6);            \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 7, 96);                        \
    }                                                                                                         \
    /* Q6_K at one token (its group-column engine): rows past a tile, rows on 2 bytes (odd super-blocks),      \
       1, 2 and 3 stages a warp, the weight 2 and 4 bytes off 16. */                                           \
    if (F == Q6_K) {                                                                                          \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 37, 256);                      \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 19, 3 * 256, true, 2);         \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 16, 2048, true, 4);            \
      run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, false, 1, 9, 5376);                      \
    }                                                                                                         \
    /* The _xs entries (2 tokens and more): warps past N (37, 21 rows), 8 tokens over 2 blocks with a partial   \
       window, past 8 (the token loop), rows on 2 bytes, the weight 4 off 16, x 4 bytes off 16 (its floats). */  \
    run_xs(F, kernel_mul_mv_##T##_f32_xs, 2, 37, 2 * 256);                                                    \
    run_xs(F, kernel_mul_mv_##T##_f32_xs, 8, 70, 5 * 256 + 3 * kb % 256);                                     \
    run_xs(F, kernel_mul_mv_##T##_f32_xs, 11, 21, kb == 32 ? 288 : 256, F == Q4_K || F == Q5_K ? 4 : 2, 1);   \
    /* The matrix engine, 64 x 128 tiles: partial tiles. */                                                  \
    run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, true, 70, 130, 256);                      \
    run_matmul(F, kernel_mul_mv_##T##_f32, kernel_mul_mm_##T##_f32, true, 9, 7, 2 * kb);                      \
    /* Split k: partial tiles, the last slice shorter (72 chunks as 9 of 8; 50 as 6 of 9); one tile, 2 slices. */ \
    if (kb == 256) run_split(F, kernel_mul_mm_##T##_f32_splitk, 70, 130, 9 * 256, 9, 8);                      \
    else run_split(F, kernel_mul_mm_##T##_f32_splitk, 70, 130, 1600, 6, 9);                                    \
    run_split(F, kernel_mul_mm_##T##_f32_splitk, 9, 7, 2 * 256, 2, 8);                                          \
    /* N a multiple of 4: the sum's 16-byte reads (the ones above read floats). */                                \
    run_split(F, kernel_mul_mm_##T##_f32_splitk, 33, 200, 1024, 4, 8);                                          \
  }
  // The int8 entries the op launches for one token of Q8_0 and Q6_K (ggmlI8Takes), beside the vector entry and the
  // float64 product at 1e-2 (x as int8), on 2 blocks that walk the units: rows past a unit, Q8_0's k 704 (22 chunks),
  // rows on 2 bytes, the weight 2 and 4 bytes off 16.
#define I8_ENTRY(F, T)                                                                      \
  {                                                                                         \
    const std::vector<DqVariant> i8 = {{"i8", kernel_mul_mv_##T##_f32_i8, 1, 1}};            \
    run_variants(F, kernel_mul_mv_##T##_f32, i8, 1, 37, F == Q8_0 ? 704 : 256);              \
    run_variants(F, kernel_mul_mv_##T##_f32, i8, 1, 530, 2816, 2);                           \
    run_variants(F, kernel_mul_mv_##T##_f32, i8, 1, 21, F == Q8_0 ? 2112 : 768, 4);          \
  }
#define I8_ENTRIES I8_ENTRY(Q8_0, q8_0) I8_ENTRY(Q6_K, q6_K)
  if (argc > 1 && std::string(argv[1]) == "i8") {
    I8_ENTRIES
    Q6G
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
  if (argc > 1 && std::string(argv[1]) == "q6_K") {
    MATMUL(Q6_K, q6_K)
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
  if (argc > 1 && std::string(argv[1]) == "q8_0") {
    MATMUL(Q8_0, q8_0)
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
  ALL_FORMATS(MATMUL)
  ALL_FORMATS(VARIANTS)
  Q6G
  I8_ENTRIES
#define ROWS(F, T)                                                                                                   \
  run_dequantize<float>(F, kernel_dequantize_##T##_f32, "f32", 3);                                                 \
  run_dequantize<__half>(F, kernel_dequantize_##T##_f16, "f16", 9);                                                \
  run_dequantize<__nv_bfloat16>(F, kernel_dequantize_##T##_bf16, "bf16", 1);                                       \
  run_embedding<float>(F, embedding_gather_scale_batch_##T##_to_f32, "f32", 5, qk_of(F) * 2, 3, 1.0f);             \
  run_embedding<__nv_bfloat16>(F, embedding_gather_scale_batch_##T##_to_bf16, "bf16", 4, qk_of(F), 4, 73.3f);      \
  run_embedding<__half>(F, embedding_gather_scale_batch_##T##_to_f16, "f16", 3, qk_of(F), 2, 0.5f);
  ALL_FORMATS(ROWS)
  if (big) {
    run_matmul(Q4_K, kernel_mul_mv_q4_K_f32, kernel_mul_mm_q4_K_f32, false, 2, 2000, 1024);
    run_matmul(Q6_K, kernel_mul_mv_q6_K_f32, kernel_mul_mm_q6_K_f32, true, 1030, 1040, 256);
    run_matmul(Q4_0, kernel_mul_mv_q4_0_f32, kernel_mul_mm_q4_0_f32, true, 1024, 1024, 64);
    run_split(Q4_K, kernel_mul_mm_q4_K_f32_splitk, 1030, 1040, 512, 2, 8);
  }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
