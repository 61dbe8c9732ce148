// rms_norm, l2_norm, ssm_norm_gate, softmax and gelu's CUDA kernels
// (shaders/cuda/{rms_norm,l2_norm,ssm_norm_gate,softmax,gelu}.cu)
// on the CPU simulation (sim_runtime.h), against float64 references, at
// the launches the ops plan for an H100 (ts/launch.ts rowLaunch,
// ts/ops/softmax.ts two passes, ts/ops/gelu.ts geluCudaLaunch; written out
// again below, as tests/rms_norm.test.ts, tests/softmax.test.ts and
// tests/gelu.test.ts hold them): rows of 1 to 32 lanes, a block per row,
// rows longer than the registers hold, the element-by-element paths, in
// place, masked and fully masked rows, both passes over slices, gelu's
// vector and element launches. Error: |got - want| / max(|want|, 1e-3 of
// the largest |want|, and 2^-14 for f16), under the dtype's tolerance (as
// the TypeScript tests). run.sh builds and runs it.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <string>


template <class T>
void check(const std::string& what, const T* got, const std::vector<double>& want, double tol) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  // f16's spacing is absolute below its smallest normal (2^-14).
  const double floor = std::max({1e-3 * scale, std::is_same_v<T, __half> ? std::ldexp(1.0, -14) : 0.0, 1e-30});
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = back(got[i]);
    const double e = g == want[i] ? 0 : std::fabs(g - want[i]) / std::max(std::fabs(want[i]), floor);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-72s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), worst, tol);
}

std::string dims(SimDim g, SimDim b) {
  return " grid " + std::to_string(g.x) + "x" + std::to_string(g.y) + " block " + std::to_string(b.x) + "x" + std::to_string(b.y);
}

// ---- rms_norm, l2_norm and ssm_norm_gate (rows through sumsq_scale_row) ----

// The sum of squares of row r of x [rows, dim], in float64.
template <class A>
double row_sumsq(const A& x, u32 r, u32 dim) {
  double sq = 0;
  for (u32 j = 0; j < dim; ++j) sq += x.at(size_t(r) * dim + j) * x.at(size_t(r) * dim + j);
  return sq;
}

enum NormMode { WEIGHTED, ONE_PLUS_W, UNSCALED };

template <class T, class W, class K>
void run_rms(const char* name, K kernel, NormMode mode, u32 rows, u32 dim, SimDim grid, SimDim block, bool in_place = false) {
  Arr<T> x(size_t(rows) * dim), y(size_t(rows) * dim);
  Arr<W> w(dim);
  x.random(-3, 3);
  w.random(-2, 2);
  y.poison();
  std::vector<double> want(size_t(rows) * dim);
  for (u32 r = 0; r < rows; ++r) {
    const double inv = 1 / std::sqrt(row_sumsq(x, r, dim) / dim + 1e-6);
    for (u32 j = 0; j < dim; ++j) {
      const double s = mode == WEIGHTED ? w.at(j) : mode == ONE_PLUS_W ? 1 + w.at(j) : 1;
      want[size_t(r) * dim + j] = x.at(size_t(r) * dim + j) * inv * s;
    }
  }
  T* out = in_place ? x.p : y.p;
  RmsNormParams p{1e-6f, float(dim)};
  sim_launch(grid, block, 4 * 32, [&] { kernel(x.p, w.p, out, &p); });
  check(std::string(name) + " [" + std::to_string(rows) + ", " + std::to_string(dim) + "]" + dims(grid, block) + (in_place ? " in place" : ""),
        out, want, tol_of<T>());
}

template <class T, class K>
void run_rms_unscaled(const char* name, K kernel, u32 rows, u32 dim, SimDim grid, SimDim block) {
  run_rms<T, T>(name, [&](const T* x, const T*, T* y, const RmsNormParams* p) { kernel(x, y, p); }, UNSCALED, rows, dim, grid, block);
}

template <class T, class K>
void run_l2(const char* name, K kernel, u32 rows, u32 dim, SimDim grid, SimDim block, bool in_place = false) {
  Arr<T> x(size_t(rows) * dim), y(size_t(rows) * dim);
  x.random(-3, 3);
  y.poison();
  std::vector<double> want(size_t(rows) * dim);
  for (u32 r = 0; r < rows; ++r) {
    const double inv = 1 / std::sqrt(row_sumsq(x, r, dim) + 1e-6);
    for (u32 j = 0; j < dim; ++j) want[size_t(r) * dim + j] = x.at(size_t(r) * dim + j) * inv;
  }
  T* out = in_place ? x.p : y.p;
  L2NormParams p{rows, dim, 1e-6f};
  sim_launch(grid, block, 4 * 32, [&] { kernel(x.p, out, &p); });
  check(std::string(name) + " [" + std::to_string(rows) + ", " + std::to_string(dim) + "]" + dims(grid, block) + (in_place ? " in place" : ""),
        out, want, tol_of<T>());
}

// out: 0 a buffer of its own, 1 attn_out's, 2 z's.
void run_gate(u32 rows, u32 dv, SimDim grid, SimDim block, int out_at = 0) {
  Arr<float> x(size_t(rows) * dv), z(size_t(rows) * dv), y(size_t(rows) * dv), w(dv);
  x.random(-2, 2);
  z.random(-6, 6);
  w.random(0.5, 1.5);
  y.poison();
  std::vector<double> want(size_t(rows) * dv);
  for (u32 r = 0; r < rows; ++r) {
    const double inv = 1 / std::sqrt(row_sumsq(x, r, dv) / dv + 1e-6);
    for (u32 j = 0; j < dv; ++j) {
      const double zv = z.at(size_t(r) * dv + j);
      want[size_t(r) * dv + j] = x.at(size_t(r) * dv + j) * inv * w.at(j) * (zv / (1 + std::exp(-zv)));
    }
  }
  float* out = out_at == 1 ? x.p : out_at == 2 ? z.p : y.p;
  SsmNormGateParams p{1e-6f, float(dv), 0, 0};
  sim_launch(grid, block, 4 * 32, [&] { ssm_norm_gate_f32(x.p, w.p, z.p, out, &p); });
  check("ssm_norm_gate_f32 [" + std::to_string(rows) + ", " + std::to_string(dv) + "]" + dims(grid, block) +
            (out_at == 1 ? " over attn_out" : out_at == 2 ? " over z" : ""),
        out, want, tol_of<float>());
}

// ---- softmax ----

struct SoftmaxCase {
  u32 rows, cols;
  float scale = 1, cap = 0;
  u32 seq_q = 0;             // 0: no mask
  int masked = 0;            // 1: a causal mask plus a random bias; 2: row 0's first 2048 masked, row 1 all, row 2 all but one
  bool in_place = false;
  u32 slice = 2048;          // the two-pass form's slice
};

std::vector<double> softmax_ref(const std::vector<double>& x, const std::vector<double>& mask, const SoftmaxCase& c) {
  std::vector<double> y(x.size());
  for (u32 r = 0; r < c.rows; ++r) {
    std::vector<double> v(c.cols);
    double m = -INFINITY;
    for (u32 j = 0; j < c.cols; ++j) {
      double t = x[size_t(r) * c.cols + j] * c.scale;
      if (c.cap > 0) t = c.cap * std::tanh(t / c.cap);
      if (c.seq_q > 0) t += mask[size_t(r % c.seq_q) * c.cols + j];
      v[j] = t;
      m = std::max(m, t);
    }
    double s = 0;
    for (u32 j = 0; j < c.cols; ++j) s += m == -INFINITY ? 0 : std::exp(v[j] - m);
    for (u32 j = 0; j < c.cols; ++j) y[size_t(r) * c.cols + j] = m == -INFINITY ? 0 : std::exp(v[j] - m) / s;
  }
  return y;
}

template <class T>
struct SoftmaxData {
  Arr<T> x, y;
  Arr<__nv_bfloat16> mask;
  std::vector<double> want;
  SoftmaxData(const SoftmaxCase& c) : x(size_t(c.rows) * c.cols), y(size_t(c.rows) * c.cols), mask(size_t(std::max(c.seq_q, 1u)) * c.cols) {
    x.random(c.cap > 0 ? -400 : -6, c.cap > 0 ? 400 : 6);
    y.poison();
    std::uniform_real_distribution<double> bias(-2, 0);
    for (u32 q = 0; q < std::max(c.seq_q, 1u); ++q)
      for (u32 k = 0; k < c.cols; ++k) {
        double m = 0;
        if (c.masked == 1) m = k > q + c.cols - c.seq_q ? -INFINITY : bias(gen);
        if (c.masked == 2) m = q == 0 ? (k < 2048 ? -INFINITY : 0) : q == 1 ? -INFINITY : (k == c.cols - 1 ? 0 : -INFINITY);
        mask.p[size_t(q) * c.cols + k] = cvt<__nv_bfloat16>(m);
      }
    std::vector<double> xs(x.n), ms(mask.n);
    for (size_t i = 0; i < x.n; ++i) xs[i] = x.at(i);
    for (size_t i = 0; i < mask.n; ++i) ms[i] = mask.at(i);
    want = softmax_ref(xs, ms, c);
  }
  T* out(const SoftmaxCase& c) { return c.in_place ? x.p : y.p; }
};

std::string label(const char* name, const SoftmaxCase& c) {
  std::string s = std::string(name) + " [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "]";
  if (c.scale != 1 || c.cap > 0) s += " scale+cap";
  if (c.seq_q > 0) s += c.masked == 2 ? " masked slices" : " mask";
  if (c.in_place) s += " in place";
  return s;
}

// softmax_<t> (no scale, cap or mask).
template <class T, class K>
void run_softmax(const char* name, K kernel, SoftmaxCase c, SimDim grid, SimDim block) {
  SoftmaxData<T> d(c);
  SoftmaxParams p{float(c.cols), 0};
  sim_launch(grid, block, 4 * 32, [&] { kernel(d.x.p, d.out(c), &p); });
  check(label(name, c) + dims(grid, block), d.out(c), d.want, tol_of<T>());
}

// scale_mask_softmax_<t>.
template <class T, class K>
void run_scale_mask(const char* name, K kernel, SoftmaxCase c, SimDim grid, SimDim block) {
  SoftmaxData<T> d(c);
  ScaleMaskSoftmaxParams p{c.cols, c.seq_q, c.scale, c.cap};
  sim_launch(grid, block, 4 * 32, [&] { kernel(d.x.p, d.out(c), d.mask.p, &p); });
  check(label(name, c) + dims(grid, block), d.out(c), d.want, tol_of<T>());
}

// softmax_blocks_<t> then softmax_finish_<t>: slices of c.slice, 256 threads (the op's plan).
template <class T, class KB, class KF>
void run_two_pass(const char* name, KB blocks, KF finish, SoftmaxCase c) {
  SoftmaxData<T> d(c);
  const u32 slice = c.slice, n_blocks = (c.cols + slice - 1) / slice;
  Arr<float> partials(size_t(c.rows) * n_blocks * 2);
  partials.poison();
  SoftmaxBlocksParams p{c.cols, c.seq_q, c.scale, c.cap, slice, n_blocks};
  const SimDim grid{n_blocks, c.rows, 1}, block{256, 1, 1};
  sim_launch(grid, block, 4 * 8, [&] { blocks(d.x.p, d.mask.p, partials.p, &p); });
  sim_launch(grid, block, 4 * 8, [&] { finish(d.x.p, d.mask.p, partials.p, d.out(c), &p); });
  check(label(name, c) + " two passes," + dims(grid, block), d.out(c), d.want, tol_of<T>());
}

// softmax_stream_<t>: slices of threads x 8 vectors (the kernel's STREAM_HELD),
// rows * n_blocks units over `blocks` blocks. resident: every block at once
// (sim_launch_resident; the blocks wait for their rows' slices); else one
// block at a time, so each block that waits for a slice a later block holds
// polls in vain and takes the row's statistics from the whole row. `word`:
// what the rows' words hold when the dispatch starts; they must end the
// dispatch with the same low bits, every arrival counted.
template <class T, class K>
void run_stream(const char* name, K kernel, SoftmaxCase c, u32 blocks, u32 threads, bool resident, u32 word = 0) {
  SoftmaxData<T> d(c);
  const u32 slice = threads * 8 * (16 / sizeof(T)), n_blocks = (c.cols + slice - 1) / slice;
  Arr<float> partials(size_t(c.rows) * n_blocks * 2);
  partials.poison();
  std::vector<u32> words(c.rows, word);
  SoftmaxStreamParams p{c.cols, c.rows, c.scale, slice, n_blocks};
  const SimDim grid{blocks, 1, 1}, block{threads, 1, 1};
  const size_t smem = 4 * ((threads + 31) / 32 + 1);
  auto go = [&] { kernel(d.x.p, partials.p, d.out(c), words.data(), &p); };
  if (resident) sim_launch_resident(grid, block, smem, go);
  else sim_launch(grid, block, smem, go);
  std::string what = label(name, c) + (resident ? " resident," : " one block at a time,") + dims(grid, block) +
                     (word != 0 ? " (a foreign word)" : "");
  check(what, d.out(c), d.want, tol_of<T>());
  u32 bad = 0;
  for (u32 r = 0; r < c.rows; ++r) bad += (words[r] & 0x7fffffffu) != (word & 0x7fffffffu);
  if (bad != 0) failures++;
  std::printf("%s %-72s %u of %u words changed\n", bad == 0 ? "ok  " : "FAIL", (what + ": the words' low bits as they began").c_str(), bad, c.rows);
}

// stream_word_valid against every state an arrival can find: slice 0
// arriving at each place in the order, either top bit to begin with; after
// the last arrival the top bit has flipped and the low bits are zero again.
// Words another op wrote (a float, a count past the row's slices) are not
// valid.
void check_stream_words() {
  u32 bad = 0;
  for (u32 n : {1u, 2u, 3u, 32u, 528u})
    for (u32 first0 = 0; first0 < n; ++first0)
      for (u32 top : {0u, 0x80000000u}) {
        u32 w = top;
        for (u32 a = 0; a < n; ++a) {
          if (!stream_word_valid(w, n)) bad++;
          w += a == first0 ? 0x80000000u - (n - 1u) : 1u;
        }
        if ((w & 0x7fffffffu) != 0 || (w >> 31) == (top >> 31)) bad++;
      }
  for (u32 foreign : {0x3f800000u, 32u, 1000u, 0x7fff0000u})
    if (stream_word_valid(foreign, 32)) bad++;
  if (bad != 0) failures++;
  std::printf("%s %-72s %u wrong\n", bad == 0 ? "ok  " : "FAIL", "stream_word_valid: every arrival order, foreign words", bad);
}

// ---- gelu ----

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// The op's dispatches for n elements: the first floor(n / 256) * 256 at the
// vector launch (blocks (t / 2, 2)), the rest one element a thread.
template <class T, class K>
void run_gelu(const char* name, K kernel, u32 n, SimDim vgrid, SimDim vblock) {
  Arr<T> x(n), y(n);
  x.random(-8, 8);
  y.poison();
  std::vector<double> want(n);
  for (u32 i = 0; i < n; ++i) want[i] = gelu_ref(x.at(i));
  const u32 full = n / 256 * 256;
  if (full > 0) sim_launch(vgrid, vblock, 0, [&] { kernel(x.p, y.p); });
  if (n > full) sim_launch({1, 1, 1}, {n - full, 1, 1}, 0, [&] { kernel(x.p + full, y.p + full); });
  check(std::string(name) + " n=" + std::to_string(n) + dims(vgrid, vblock), y.p, want, tol_of<T>());
}

int main() {
  // rms_norm: rows of L lanes (blockDim (L, R)), blocks per row, held and re-read rows, scalar rows.
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_bf16", rms_norm_bf16, WEIGHTED, 128, 128, {4, 1, 1}, {8, 32, 1});
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_bf16", rms_norm_bf16, WEIGHTED, 128, 128, {2, 1, 1}, {4, 64, 1});
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_bf16", rms_norm_bf16, WEIGHTED, 64, 128, {1, 1, 1}, {4, 64, 1}, true);
  run_rms<__half, float>("rms_norm_one_plus_f16", rms_norm_one_plus_f16, ONE_PLUS_W, 64, 256, {2, 1, 1}, {8, 32, 1});
  run_rms_unscaled<float>("rms_norm_no_scale_f32", rms_norm_no_scale_f32, 32, 64, {1, 1, 1}, {2, 32, 1});
  run_rms_unscaled<__nv_bfloat16>("rms_norm_no_scale_bf16", rms_norm_no_scale_bf16, 256, 8, {1, 1, 1}, {1, 256, 1});
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_bf16", rms_norm_bf16, WEIGHTED, 3, 1344, {3, 1, 1}, {64, 1, 1});
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_bf16 (rows past the held)", rms_norm_bf16, WEIGHTED, 2, 4096, {2, 1, 1}, {32, 1, 1});
  run_rms<float, float>("rms_norm_f32", rms_norm_f32, WEIGHTED, 2, 5376, {2, 1, 1}, {192, 1, 1});
  run_rms<float, float>("rms_norm_f32 (scalar)", rms_norm_f32, WEIGHTED, 6, 65, {3, 1, 1}, {32, 2, 1});
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_one_plus_bf16 (scalar)", rms_norm_one_plus_bf16, ONE_PLUS_W, 5, 65, {5, 1, 1}, {32, 1, 1});
  // Fewer rows than SMs: one vector a thread (the weights of each loaded with the row).
  run_rms<float, float>("rms_norm_f32 (few rows)", rms_norm_f32, WEIGHTED, 1, 2048, {1, 1, 1}, {512, 1, 1});
  run_rms<float, float>("rms_norm_f32 (few rows, idle threads)", rms_norm_f32, WEIGHTED, 2, 2040, {2, 1, 1}, {512, 1, 1});
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_bf16 (one vector a lane)", rms_norm_bf16, WEIGHTED, 64, 128, {2, 1, 1}, {16, 32, 1});
  run_rms<__half, float>("rms_norm_f16 (few rows)", rms_norm_f16, WEIGHTED, 2, 4096, {2, 1, 1}, {512, 1, 1}, true);
  run_rms<__nv_bfloat16, __nv_bfloat16>("rms_norm_one_plus_bf16 (few rows)", rms_norm_one_plus_bf16, ONE_PLUS_W, 1, 5376, {1, 1, 1}, {672, 1, 1});

  // l2_norm_<t> and ssm_norm_gate_f32 at rowLaunch's forms (tests/l2_norm.test.ts,
  // tests/ssm_norm_gate.test.ts): rows of 8 lanes (the models' heads of 128),
  // a block per row, fewer rows than SMs (a vector a thread), the scalar path.
  run_l2<float>("l2_norm_f32", l2_norm_f32, 64, 128, {2, 1, 1}, {8, 32, 1});
  run_l2<__nv_bfloat16>("l2_norm_bf16", l2_norm_bf16, 64, 128, {2, 1, 1}, {8, 32, 1}, true);
  run_l2<__half>("l2_norm_f16", l2_norm_f16, 40, 64, {5, 1, 1}, {8, 8, 1});
  run_l2<float>("l2_norm_f32 (few rows)", l2_norm_f32, 3, 128, {3, 1, 1}, {32, 1, 1});
  run_l2<__nv_bfloat16>("l2_norm_bf16 (a block a row)", l2_norm_bf16, 3, 2000, {3, 1, 1}, {64, 1, 1});
  run_l2<float>("l2_norm_f32 (scalar)", l2_norm_f32, 4, 31, {1, 1, 1}, {32, 4, 1});
  run_gate(64, 128, {2, 1, 1}, {8, 32, 1});
  run_gate(64, 128, {2, 1, 1}, {8, 32, 1}, 1);
  run_gate(40, 64, {5, 1, 1}, {8, 8, 1}, 2);
  run_gate(32, 128, {32, 1, 1}, {32, 1, 1});
  run_gate(3, 1000, {3, 1, 1}, {32, 1, 1});
  run_gate(4, 3, {1, 1, 1}, {32, 4, 1});
  run_gate(2, 257, {2, 1, 1}, {1000, 1, 1});

  // softmax_<t>: lanes, blocks, rows past the held (online), the scalar path.
  run_softmax<__nv_bfloat16>("softmax_bf16", softmax_bf16, {64, 128}, {2, 1, 1}, {8, 32, 1});
  run_softmax<__nv_bfloat16>("softmax_bf16", softmax_bf16, {64, 128}, {1, 1, 1}, {4, 64, 1});
  run_softmax<float>("softmax_f32", softmax_f32, {3, 2048}, {3, 1, 1}, {64, 1, 1});
  run_softmax<float>("softmax_f32 (rows past the held)", softmax_f32, {2, 9000}, {2, 1, 1}, {32, 1, 1});
  run_softmax<__half>("softmax_f16", softmax_f16, {2, 8192}, {2, 1, 1}, {256, 1, 1});
  run_softmax<__nv_bfloat16>("softmax_bf16 (scalar)", softmax_bf16, {2, 1001}, {2, 1, 1}, {32, 1, 1});
  run_softmax<__nv_bfloat16>("softmax_bf16 (few rows)", softmax_bf16, {3, 8192}, {3, 1, 1}, {1024, 1, 1});
  {
    SoftmaxCase c{64, 128};
    c.in_place = true;
    run_softmax<float>("softmax_f32", softmax_f32, c, {1, 1, 1}, {4, 64, 1});
  }
  // scale_mask_softmax_<t>: scale, cap and a causal mask; fully masked rows; scalar rows.
  run_scale_mask<float>("scale_mask_softmax_f32", scale_mask_softmax_f32, {4, 2048, 0.125f, 30, 2, 1}, {4, 1, 1}, {64, 1, 1});
  run_scale_mask<__nv_bfloat16>("scale_mask_softmax_bf16", scale_mask_softmax_bf16, {32, 256, 0.125f, 30, 4, 1}, {1, 1, 1}, {8, 32, 1});
  run_scale_mask<__half>("scale_mask_softmax_f16 (rows past the held)", scale_mask_softmax_f16, {2, 5000, 0.5f, 0, 2, 1}, {2, 1, 1}, {32, 1, 1});
  run_scale_mask<float>("scale_mask_softmax_f32", scale_mask_softmax_f32, {3, 4100, 1, 0, 3, 2}, {3, 1, 1}, {160, 1, 1});
  run_scale_mask<float>("scale_mask_softmax_f32 (rows past the held)", scale_mask_softmax_f32, {4, 6000, 0.125f, 30, 2, 1}, {4, 1, 1}, {32, 1, 1});
  run_scale_mask<__nv_bfloat16>("scale_mask_softmax_bf16 (rows past the held)", scale_mask_softmax_bf16, {2, 4096, 0.5f, 20, 2, 1}, {2, 1, 1}, {32, 1, 1});
  run_scale_mask<float>("scale_mask_softmax_f32 (scalar)", scale_mask_softmax_f32, {4, 37, 2, 5, 2, 1}, {1, 1, 1}, {32, 4, 1});
  {
    SoftmaxCase c{4, 2048, 0.125f, 30, 2, 1};
    c.in_place = true;
    run_scale_mask<__nv_bfloat16>("scale_mask_softmax_bf16", scale_mask_softmax_bf16, c, {4, 1, 1}, {64, 1, 1});
  }
  // The op's launches at 16 elements a thread: a block of cols / 16 (4 f32
  // vectors a thread, causal), rows of 16 lanes, fewer rows than SMs (the op
  // keeps 16 a thread there too: 512 threads), and 1024 threads (2 vectors a
  // thread, some held slots empty).
  run_scale_mask<float>("scale_mask_softmax_f32 (16 a thread)", scale_mask_softmax_f32, {8, 2048, 0.0884f, 50, 8, 1}, {8, 1, 1}, {128, 1, 1});
  run_scale_mask<__nv_bfloat16>("scale_mask_softmax_bf16 (16 a thread)", scale_mask_softmax_bf16, {32, 256, 0.125f, 30, 4, 1}, {2, 1, 1}, {16, 16, 1});
  run_scale_mask<float>("scale_mask_softmax_f32 (few rows)", scale_mask_softmax_f32, {4, 8192, 0.0884f, 50, 1, 1}, {4, 1, 1}, {512, 1, 1});
  run_scale_mask<float>("scale_mask_softmax_f32 (2 vectors a thread)", scale_mask_softmax_f32, {4, 8192, 0.0884f, 50, 1, 1}, {4, 1, 1}, {1024, 1, 1});
  run_scale_mask<__half>("scale_mask_softmax_f16 (few rows)", scale_mask_softmax_f16, {2, 8192, 0.5f, 0, 2, 1}, {2, 1, 1}, {1024, 1, 1});
  // Blocks whose last warp is partial (block_sum / block_max fold the
  // per-warp values from shared memory there), and rows of 8 heads over a
  // mask of 6 queries (taken query-major: mask_major_row).
  run_softmax<float>("softmax_f32 (a partial last warp)", softmax_f32, {3, 2000}, {3, 1, 1}, {100, 1, 1});
  run_scale_mask<float>("scale_mask_softmax_f32 (a partial last warp)", scale_mask_softmax_f32, {4, 1000, 0.125f, 30, 2, 1}, {4, 1, 1}, {48, 1, 1});
  run_scale_mask<__nv_bfloat16>("scale_mask_softmax_bf16 (8 heads x 6 queries)", scale_mask_softmax_bf16, {48, 512, 0.125f, 30, 6, 1}, {48, 1, 1}, {64, 1, 1});
  // The two-pass form: slices of 2048, a short last slice, masked slices and rows, in place.
  run_two_pass<float>("softmax_blocks/finish_f32", softmax_blocks_f32, softmax_finish_f32, {2, 6000});
  run_two_pass<float>("softmax_blocks/finish_f32", softmax_blocks_f32, softmax_finish_f32, {4, 6000, 0.125f, 30, 2, 1});
  run_two_pass<__nv_bfloat16>("softmax_blocks/finish_bf16 (scalar)", softmax_blocks_bf16, softmax_finish_bf16, {3, 4099, 0.5f, 0, 3, 1});
  run_two_pass<__half>("softmax_blocks/finish_f16", softmax_blocks_f16, softmax_finish_f16, {2, 6144});
  run_two_pass<float>("softmax_blocks/finish_f32", softmax_blocks_f32, softmax_finish_f32, {3, 4100, 1, 0, 3, 2});
  {
    SoftmaxCase c{2, 5000};
    c.in_place = true;
    run_two_pass<__nv_bfloat16>("softmax_blocks/finish_bf16", softmax_blocks_bf16, softmax_finish_bf16, c);
  }
  {
    // Slices of 16384 (the op's longer slices for many rows): two chunks of
    // ROW_LOADS vectors a thread, a short last slice, a causal mask.
    SoftmaxCase c{4, 40000, 0.125f, 30, 2, 1};
    c.slice = 16384;
    run_two_pass<float>("softmax_blocks/finish_f32 (slices of 16384)", softmax_blocks_f32, softmax_finish_f32, c);
  }

  // The streamed form: several units a block, blocks waiting for each
  // other (resident), a short last slice, a slice element by element
  // (rows off 16-byte alignment), a scale; blocks that cannot wait (one at a
  // time: the bounded poll, then the whole row); a word another op wrote.
  check_stream_words();
  run_stream<float>("softmax_stream_f32", softmax_stream_f32, {5, 2500}, 4, 32, true);
  run_stream<__nv_bfloat16>("softmax_stream_bf16", softmax_stream_bf16, {3, 5000, 3.0f}, 3, 32, true);
  run_stream<__half>("softmax_stream_f16 (rows off alignment)", softmax_stream_f16, {4, 2051}, 2, 32, true);
  run_stream<float>("softmax_stream_f32", softmax_stream_f32, {1, 4096}, 16, 32, true);
  run_stream<float>("softmax_stream_f32", softmax_stream_f32, {2, 1500}, 2, 32, false);
  run_stream<float>("softmax_stream_f32", softmax_stream_f32, {3, 2500}, 4, 32, true, 5);

  // gelu_<t>: the vector launch (blocks (T / 2, 2)) and the element launch of the rest.
  run_gelu<__nv_bfloat16>("gelu_bf16", gelu_bf16, 768, {3, 1, 1}, {16, 2, 1});
  run_gelu<__nv_bfloat16>("gelu_bf16", gelu_bf16, 4099, {2, 1, 1}, {128, 2, 1});
  run_gelu<float>("gelu_f32", gelu_f32, 1024 + 5, {1, 1, 1}, {128, 2, 1});
  run_gelu<__half>("gelu_f16", gelu_f16, 21504, {21, 1, 1}, {64, 2, 1});

  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
