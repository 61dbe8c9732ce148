// Checks the CUDA kernels of shaders/cuda/*.cu through the cuda backend's C ABI
// (build/cuda/libmlx_native_cuda.so via dlopen, compiled at run time by NVRTC
// exactly as the library does for ts/ops), dispatching each kernel with the
// grid, block, bindings and threadgroup memory that ts/ops computes, against
// plain CPU references in double on seeded random inputs, outputs poisoned
// with NaN (0xff bytes) before each run. Then times the performance cases.
// Usage: kernels_test <libmlx_native_cuda.so> <shaders/cuda folder>
// Exit status 0 only when every check passes.

#include <dlfcn.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <algorithm>
#include <numeric>

#include "../../../native/include/mlx_native.h"

// The param structs, from common.h and the family headers, as the kernels compile them.
typedef uint32_t uint;
typedef uint64_t ulong;
#include "../../common.h"
#include "../../fused_norm.h"
#include "../../flash_attn_vec.h"
#include "../../l2_norm.h"
#include "../../ssm_conv.h"
#include "../../gated_delta_net.h"
#include "../../compute_g_beta.h"
#include "../../chunk_gated_delta_rule.h"
#include "../../moe_routing.h"
#include "../../ssm_norm_gate.h"

using std::string;
using std::vector;

// ---------------------------------------------------------------- ABI
#define FN(name) static decltype(&::name) p_##name;
FN(mlxn_device_count) FN(mlxn_device_open) FN(mlxn_device_name) FN(mlxn_buffer_alloc)
FN(mlxn_buffer_release) FN(mlxn_buffer_write) FN(mlxn_buffer_read) FN(mlxn_library_compile)
FN(mlxn_pipeline_create) FN(mlxn_encoder_create) FN(mlxn_encoder_dispatch) FN(mlxn_encoder_commit)
FN(mlxn_encoder_wait) FN(mlxn_encoder_gpu_time_ns) FN(mlxn_encoder_barrier) FN(mlxn_device_limit)
#undef FN

static char g_msg[16384];
static mlxn_device* g_dev;
static uint32_t g_cc;   // the device's compute capability (90: an H100 or H200)
static uint64_t g_sms;  // its multiprocessors
static mlxn_encoder* g_enc;
static std::map<string, mlxn_library*> g_libs;
static std::map<string, mlxn_pipeline*> g_pipes;
static int g_fail = 0, g_pass = 0;
static FILE* g_log = stdout;

static void die(const char* what, mlxn_status s) {
  fprintf(stderr, "FATAL %s: status %d: %s\n", what, s, g_msg);
  exit(2);
}

struct Buf {
  mlxn_buffer* h = nullptr;
  size_t bytes = 0;
  Buf() {}
  explicit Buf(size_t n) : bytes(n ? n : 16) {
    mlxn_status s = p_mlxn_buffer_alloc(g_dev, bytes, &h, g_msg, sizeof g_msg);
    if (s) die("alloc", s);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf& operator=(Buf&& o) noexcept { std::swap(h, o.h); std::swap(bytes, o.bytes); return *this; }
  Buf(Buf&& o) noexcept : h(o.h), bytes(o.bytes) { o.h = nullptr; }
  ~Buf() { if (h) p_mlxn_buffer_release(h); }
  void write(const void* src, size_t n, size_t off = 0) {
    mlxn_status s = p_mlxn_buffer_write(h, off, src, n, g_msg, sizeof g_msg);
    if (s) die("write", s);
  }
  void poison() { vector<uint8_t> ff(bytes, 0xff); write(ff.data(), bytes); }
  template <typename T> vector<T> read(size_t n, size_t off = 0) {
    vector<T> v(n);
    mlxn_status s = p_mlxn_buffer_read(h, off, v.data(), n * sizeof(T), g_msg, sizeof g_msg);
    if (s) die("read", s);
    return v;
  }
};
template <typename T> static Buf upload(const vector<T>& v, size_t extra = 0) {
  Buf b(v.size() * sizeof(T) + extra);
  if (!v.empty()) b.write(v.data(), v.size() * sizeof(T));
  return b;
}

static mlxn_pipeline* pipe(const string& family, const string& kernel, const string& dir) {
  auto it = g_pipes.find(kernel);
  if (it != g_pipes.end()) return it->second;
  if (!g_libs.count(family)) {
    // As the kernel registry (ts/registry.ts joinSources) compiles it: the
    // prelude, common.h, the family header (when the family has one), the kernels.
    auto read = [](const string& path) {
      std::ifstream f(path);
      std::stringstream ss;
      ss << f.rdbuf();
      return std::make_pair(bool(f), ss.str());
    };
    string name = family + ".cu", src;
    auto prelude = read(dir + "/common.cuh"), common = read(dir + "/../common.h"), header = read(dir + "/../" + family + ".h"),
         kernels = read(dir + "/" + name);
    if (prelude.second.empty() || common.second.empty() || kernels.second.empty()) {
      fprintf(stderr, "FATAL: cannot read %s/common.cuh, %s/../common.h or %s\n", dir.c_str(), dir.c_str(), name.c_str());
      exit(2);
    }
    src = "#line 1 \"cuda/common.cuh\"\n" + prelude.second + "\n";
    src += "#line 1 \"common.h\"\n" + common.second + "\n";
    if (header.first) src += "#line 1 \"" + family + ".h\"\n" + header.second + "\n";
    src += "#line 1 \"cuda/" + name + "\"\n" + kernels.second + "\n";
    mlxn_library* lib;
    mlxn_status s = p_mlxn_library_compile(g_dev, src.data(), src.size(), name.c_str(), nullptr, 0, &lib, g_msg, sizeof g_msg);
    if (s) die(("compile " + name).c_str(), s);
    g_libs[family] = lib;
  }
  mlxn_pipeline* p;
  mlxn_status s = p_mlxn_pipeline_create(g_libs[family], kernel.c_str(), &p, g_msg, sizeof g_msg);
  if (s) die(("pipeline " + kernel).c_str(), s);
  g_pipes[kernel] = p;
  return p;
}

struct Dispatch {
  vector<uint8_t> hdr;
  vector<uint8_t> recs;
  vector<uint8_t> pay;
  uint32_t n = 0;
  Dispatch(mlxn_pipeline* p, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t tx) : hdr(48, 0) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    uint32_t dims[6] = {gx, gy, gz, tx, 1, 1};
    memcpy(hdr.data(), &h, 8);
    memcpy(hdr.data() + 8, dims, 24);
  }
  void rec(uint32_t kind, uint32_t index, uint64_t a, uint64_t b) {
    uint8_t r[24];
    memcpy(r, &kind, 4); memcpy(r + 4, &index, 4); memcpy(r + 8, &a, 8); memcpy(r + 16, &b, 8);
    recs.insert(recs.end(), r, r + 24);
    ++n;
  }
  Dispatch& buf(uint32_t i, const Buf& b, uint64_t off = 0) { rec(MLXN_BIND_BUFFER, i, (uint64_t)(uintptr_t)b.h, off); return *this; }
  Dispatch& bytes(uint32_t i, const void* d, uint32_t len) {
    while (pay.size() % 16) pay.push_back(0);
    rec(MLXN_BIND_BYTES, i, pay.size(), len);
    pay.insert(pay.end(), (const uint8_t*)d, (const uint8_t*)d + len);
    return *this;
  }
  template <typename T> Dispatch& val(uint32_t i, const T& v) { return bytes(i, &v, sizeof v); }
  Dispatch& tg(uint32_t i, uint64_t len) { rec(MLXN_BIND_THREADGROUP_MEMORY, i, len, 0); return *this; }
  void record() {
    uint32_t p = pay.size();
    memcpy(hdr.data() + 32, &n, 4);
    memcpy(hdr.data() + 36, &p, 4);
    vector<uint8_t> blk(hdr);
    blk.insert(blk.end(), recs.begin(), recs.end());
    blk.insert(blk.end(), pay.begin(), pay.end());
    mlxn_status s = p_mlxn_encoder_dispatch(g_enc, blk.data(), blk.size(), g_msg, sizeof g_msg);
    if (s) die("dispatch", s);
  }
};
static void barrier() { mlxn_status s = p_mlxn_encoder_barrier(g_enc, g_msg, sizeof g_msg); if (s) die("barrier", s); }
static uint64_t commit_wait() {
  mlxn_status s = p_mlxn_encoder_commit(g_enc, g_msg, sizeof g_msg);
  if (s) die("commit", s);
  s = p_mlxn_encoder_wait(g_enc, g_msg, sizeof g_msg);
  if (s) die("wait (kernel execution)", s);
  return p_mlxn_encoder_gpu_time_ns(g_enc);
}
// GPU time of one run of fn: the median over 5 commits of reps runs each,
// a barrier between runs, so that a run starts after the one before ends (the
// encoder runs the dispatches of a stretch without barriers side by side: a
// grid of fewer blocks than the SMs hold would then be timed at the
// throughput of several runs, not at the latency a run has in a pipeline).
static double time_ns(const std::function<void()>& fn, int reps) {
  fn(); commit_wait();
  vector<double> t;
  for (int r = 0; r < 5; ++r) {
    for (int i = 0; i < reps; ++i) {
      if (i) barrier();
      fn();
    }
    t.push_back(double(commit_wait()) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

// ---------------------------------------------------------------- numbers
static float bf16_to_f(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t f_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
static float bf16r(float f) { return bf16_to_f(f_to_bf16(f)); }
static float f16_to_f(uint16_t h) {
  uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp(float(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(float(m | 1024), int(e) - 25);
  return s ? -v : v;
}
static uint16_t f_to_f16(float f) {  // round to nearest even; |f| below 65520
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);                       // a in [2^(e-1), 2^e)
  const int ulp_exp = std::max(e - 11, -24);  // f16 ulp: 2^(e-11) for normals, 2^-24 for subnormals
  const float q = std::nearbyint(std::ldexp(a, -ulp_exp));  // ties to even
  const float r = std::ldexp(q, ulp_exp);
  int re;
  std::frexp(r, &re);
  if (re - 1 < -14) return sign | uint16_t(q);  // subnormal (or rounded up to the smallest normal: q = 1024)
  const uint16_t m = uint16_t(uint32_t(std::ldexp(r, 10 - (re - 1))) & 1023u);
  return sign | uint16_t(((re - 1 + 15) << 10) | m);
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t s) : g(s) {}
  double uni(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); }
  double normal() { return std::normal_distribution<double>(0, 1)(g); }
};

// Max |got - want| / max(|want|, floor) over all elements; NaN counts as failure.
static double max_rel(const vector<double>& got, const vector<double>& want, double floor) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(got[i] - want[i]) / std::max(std::fabs(want[i]), floor);
    if (!(e == e)) return INFINITY;
    m = std::max(m, e);
  }
  return m;
}
static double scale_of(const vector<double>& v) { double m = 0; for (double x : v) m = std::max(m, std::fabs(x)); return m; }
static void check(const string& name, double err, double tol) {
  bool ok = err <= tol;
  (ok ? g_pass : g_fail)++;
  fprintf(g_log, "%s %-70s err %.3g (tol %.1g)\n", ok ? "PASS" : "FAIL", name.c_str(), err, tol);
  fflush(g_log);
}
template <typename T> static vector<double> to_d(const vector<T>& v) { return vector<double>(v.begin(), v.end()); }
static vector<double> bf16_d(const vector<uint16_t>& v) { vector<double> r(v.size()); for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f(v[i]); return r; }
static uint32_t next_pow2(uint32_t n) { uint32_t p = 1; while (p < n) p *= 2; return p; }

static string g_dir;
static vector<string> g_perf;
static void perf(const string& line) { g_perf.push_back(line); fprintf(g_log, "PERF %s\n", line.c_str()); fflush(g_log); }
static double g_copy_gbs = 0;

// ---------------------------------------------------------------- fused_norm

static void test_fused_norm(Rng& rng) {
  const char* F = "fused_norm";
  struct Case { uint32_t rows, dim, threads; uint64_t in_off; };  // threads 0: the op's choice
  vector<Case> cases = {{1, 1, 0, 0}, {3, 3, 0, 0}, {2, 7, 0, 0}, {5, 31, 0, 0}, {4, 32, 0, 0}, {3, 33, 0, 0},
                        {7, 100, 0, 0}, {2, 128, 0, 0}, {3, 1000, 0, 0}, {4, 4096, 0, 0}, {2, 5376, 0, 0},
                        {2, 8196, 0, 0}, {2, 12288, 0, 0}, {3, 4096, 96, 0}, {2, 1000, 1, 0}, {2, 4100, 1024, 0},
                        {3, 4096, 0, 4}, {2, 2048, 33, 0},
                        {8200, 4096, 0, 0}};  // 134 MB (f32) / 67 MB (bf16) per tensor: the evict-first path
  for (const Case& c : cases) {
    for (int bf = 0; bf < 2; ++bf) {
      const uint32_t n = c.rows * c.dim;
      vector<double> res(n), in(n), w(c.dim), sc(c.dim);
      for (auto& x : res) x = rng.normal();
      for (auto& x : in) x = rng.normal() * 2;
      for (auto& x : w) x = rng.uni(0.5, 1.5);
      for (auto& x : sc) x = rng.uni(-2, 2);
      if (bf) { for (auto* v : {&res, &in, &w}) for (auto& x : *v) x = bf16r(float(x)); }
      else { for (auto* v : {&res, &in, &w, &sc}) for (auto& x : *v) x = float(x); }
      const float eps = 1e-6f;
      uint32_t threads = c.threads ? c.threads : std::min(256u, next_pow2(c.dim));
      uint32_t tgb = ((threads + 31) / 32 * 4 + 15) / 16 * 16;
      auto mk = [&](const vector<double>& v) {
        if (bf) { vector<uint16_t> h(v.size()); for (size_t i = 0; i < v.size(); ++i) h[i] = f_to_bf16(float(v[i])); return upload(h, 16); }
        vector<float> h(v.begin(), v.end()); return upload(h, 16);
      };
      const uint64_t esz = bf ? 2 : 4;
      // input at byte offset in_off: the buffer holds one leading pad element group
      Buf bres = mk(res), bw = mk(w);
      Buf bin(n * esz + 32);
      {
        vector<uint8_t> raw(n * esz);
        if (bf) { for (uint32_t i = 0; i < n; ++i) { uint16_t h = f_to_bf16(float(in[i])); memcpy(&raw[i * 2], &h, 2); } }
        else { for (uint32_t i = 0; i < n; ++i) { float f = float(in[i]); memcpy(&raw[i * 4], &f, 4); } }
        bin.write(raw.data(), raw.size(), c.in_off);
      }
      Buf out(n * esz), sum(n * esz);
      auto rd = [&](Buf& b) { return bf ? bf16_d(b.read<uint16_t>(n)) : to_d(b.read<float>(n)); };
      const double tol = bf ? 1e-2 : 2e-5;
      char tag[128];
      snprintf(tag, sizeof tag, "rows=%u dim=%u threads=%u in_off=%llu", c.rows, c.dim, threads, (unsigned long long)c.in_off);
      // reference pieces
      auto rms = [&](const vector<double>& x, uint32_t r) { double s = 0; for (uint32_t i = 0; i < c.dim; ++i) s += x[r * c.dim + i] * x[r * c.dim + i]; return 1 / std::sqrt(s / c.dim + eps); };
      vector<double> s(n);
      for (uint32_t i = 0; i < n; ++i) s[i] = res[i] + in[i];
      // fused_norm_add
      {
        out.poison();
        Dispatch d(pipe(F, bf ? "fused_norm_add_bf16" : "fused_norm_add_f32", g_dir), c.rows, 1, 1, threads);
        d.buf(0, bres).buf(1, bin, c.in_off).buf(2, bw).buf(3, out).val(4, c.dim).val(5, c.rows).val(6, eps).tg(0, tgb).record();
        commit_wait();
        vector<double> want(n);
        for (uint32_t r = 0; r < c.rows; ++r) { double ri = rms(in, r); for (uint32_t i = 0; i < c.dim; ++i) want[r * c.dim + i] = res[r * c.dim + i] + in[r * c.dim + i] * ri * w[i]; }
        check(string(bf ? "fused_norm_add_bf16 " : "fused_norm_add_f32 ") + tag, max_rel(rd(out), want, 1.0), tol);
      }
      // fused_residual_norm, with and without sum
      for (int ws = 0; ws < 2; ++ws) {
        out.poison(); sum.poison();
        FusedResidualNormParams p{c.dim, c.rows, eps, uint32_t(ws)};
        Dispatch d(pipe(F, bf ? "fused_residual_norm_bf16" : "fused_residual_norm_f32", g_dir), c.rows, 1, 1, threads);
        d.buf(0, bres).buf(1, bin, c.in_off).buf(2, bw).buf(3, out).buf(4, ws ? sum : out).val(5, p).tg(0, tgb).record();
        commit_wait();
        vector<double> want(n);
        for (uint32_t r = 0; r < c.rows; ++r) { double ri = rms(s, r); for (uint32_t i = 0; i < c.dim; ++i) want[r * c.dim + i] = s[r * c.dim + i] * ri * w[i]; }
        string k = string(bf ? "fused_residual_norm_bf16 " : "fused_residual_norm_f32 ") + (ws ? "sum " : "nosum ") + tag;
        check(k, max_rel(rd(out), want, 1.0), tol);
        if (ws) check(k + " sum_output", max_rel(rd(sum), s, 1.0), tol);
        else { auto g = sum.read<uint8_t>(n * esz); bool untouched = std::all_of(g.begin(), g.end(), [](uint8_t b) { return b == 0xff; }); check(k + " sum_output untouched", untouched ? 0 : 1, 0); }
      }
      if (bf) continue;
      // scalar kernels (f32)
      for (int vecsc = 0; vecsc < 2; ++vecsc) {
        vector<float> scv(vecsc ? c.dim : 1);
        for (size_t i = 0; i < scv.size(); ++i) scv[i] = float(sc[i]);
        Buf bsc = upload(scv);
        // fused_residual_norm_scalar_f32's struct; fused_norm_add_scalar_f32's has the same fields.
        FusedResidualNormScalarF32Params p{c.dim, c.rows, eps, uint32_t(vecsc)};
        auto scat = [&](uint32_t i) { return double(vecsc ? scv[i] : scv[0]); };
        for (int which = 0; which < 2; ++which) {
          out.poison();
          const char* kn = which ? "fused_norm_add_scalar_f32" : "fused_residual_norm_scalar_f32";
          Dispatch d(pipe(F, kn, g_dir), c.rows, 1, 1, threads);
          d.buf(0, bres).buf(1, bin, c.in_off).buf(2, bw).buf(3, out).buf(4, bsc).val(5, p).tg(0, tgb).record();
          commit_wait();
          vector<double> want(n);
          for (uint32_t r = 0; r < c.rows; ++r) {
            double ri = which ? rms(in, r) : rms(s, r);
            for (uint32_t i = 0; i < c.dim; ++i) {
              uint32_t j = r * c.dim + i;
              want[j] = which ? (res[j] + in[j] * ri * w[i]) * scat(i) : s[j] * ri * w[i] * scat(i);
            }
          }
          check(string(kn) + (vecsc ? " vec " : " one ") + tag, max_rel(rd(out), want, 1.0), tol);
        }
      }
    }
  }
  // performance: 16384 x 4096 f32 and 1 x 4096
  for (uint32_t rows : {16384u, 1u}) {
    const uint32_t dim = 4096, n = rows * dim;
    vector<float> h(n);
    for (auto& x : h) x = float(rng.normal());
    Buf a = upload(h), b = upload(h), w = upload(vector<float>(dim, 1.0f)), o(n * 4), s(n * 4);
    const float eps = 1e-6f;
    auto na = [&] { Dispatch d(pipe(F, "fused_norm_add_f32", g_dir), rows, 1, 1, 256); d.buf(0, a).buf(1, b).buf(2, w).buf(3, o).val(4, dim).val(5, rows).val(6, eps).tg(0, 32).record(); };
    FusedResidualNormParams p{dim, rows, eps, 1};
    auto rn = [&] { Dispatch d(pipe(F, "fused_residual_norm_f32", g_dir), rows, 1, 1, 256); d.buf(0, a).buf(1, b).buf(2, w).buf(3, o).buf(4, s).val(5, p).tg(0, 32).record(); };
    int reps = rows > 1 ? 20 : 200;
    double t1 = time_ns(na, reps), t2 = time_ns(rn, reps);
    char line[256];
    snprintf(line, sizeof line, "fused_norm_add_f32 %ux%u: %.2f us, %.0f GB/s (3 x 4 B/elem; copy %.0f GB/s -> %.0f%%)", rows, dim, t1 / 1e3, 12.0 * n / t1, g_copy_gbs, 100 * 12.0 * n / t1 / g_copy_gbs);
    perf(line);
    snprintf(line, sizeof line, "fused_residual_norm_f32 (+sum) %ux%u: %.2f us, %.0f GB/s (4 x 4 B/elem; %.0f%% of copy)", rows, dim, t2 / 1e3, 16.0 * n / t2, 100 * 16.0 * n / t2 / g_copy_gbs);
    perf(line);
  }
  {
    const uint32_t rows = 16384, dim = 4096, n = rows * dim;
    vector<uint16_t> h(n);
    for (auto& x : h) x = f_to_bf16(float(rng.normal()));
    Buf a = upload(h), b = upload(h), w = upload(vector<uint16_t>(dim, f_to_bf16(1.0f))), o(n * 2);
    const float eps = 1e-6f;
    auto na = [&] { Dispatch d(pipe(F, "fused_norm_add_bf16", g_dir), rows, 1, 1, 256); d.buf(0, a).buf(1, b).buf(2, w).buf(3, o).val(4, dim).val(5, rows).val(6, eps).tg(0, 32).record(); };
    double t = time_ns(na, 20);
    char line[256];
    snprintf(line, sizeof line, "fused_norm_add_bf16 %ux%u: %.2f us, %.0f GB/s (%.0f%% of copy)", rows, dim, t / 1e3, 6.0 * n / t, 100 * 6.0 * n / t / g_copy_gbs);
    perf(line);
  }
}

// ---------------------------------------------------------------- moe_routing
static void test_moe(Rng& rng) {
  const char* F = "moe_routing";
  // kind 0 continuous, 1 ties, 2 with -inf rows, 3 logits within 0.1 (near ties
  // around the cut-off's margin), 4 within 0.02 (more candidates than a warp)
  struct Case { uint32_t tokens, e, k; int kind; };
  vector<Case> cases = {{1, 1, 1, 0}, {5, 8, 2, 0}, {7, 60, 4, 1}, {3, 64, 8, 2}, {1, 128, 1, 0}, {64, 512, 8, 1},
                        {3, 257, 16, 0}, {2, 1000, 40, 1}, {2, 5, 5, 1}, {3, 33, 33, 2}, {2, 8128, 8, 0}, {2, 300, 300, 1},
                        {4, 512, 8, 2}, {9, 1024, 32, 0}, {5, 1025, 8, 0}, {3, 100, 32, 1}, {11, 512, 8, 0},
                        {1, 2, 2, 0}, {13, 40, 20, 1}, {6, 1024, 8, 2}, {3, 512, 33, 0}, {17, 256, 8, 1},
                        {16, 512, 8, 3}, {16, 1024, 8, 3}, {8, 512, 8, 4}, {4, 1024, 8, 4}, {8, 100, 8, 3}, {5, 1022, 8, 3}};
  // Params: the 8-byte FusedMoeRoutingParams {num_experts, top_k}; grid (T, 1, 1).
  // threads 0: the op's cuda shape (ts/ops/moe_routing.ts): 32 threads and no
  // threadgroup memory when experts <= 1024 and top_k <= 32 (the warp path),
  // else min(256, nextPow2(E)) threads and E floats of threadgroup(0).
  // threads > 0: a raw launch as the Rust host does, threadgroup(0) =
  // (2 E + threads) floats.
  auto launch = [&](bool single, uint32_t threads, uint32_t T, uint32_t E, uint32_t K, Buf& bl, Buf& ids, Buf& wts,
                    Buf& bs) {
    FusedMoeRoutingParams p{E, K};
    uint64_t tg_bytes;
    if (threads == 0) {
      const bool warp = E <= 1024 && K <= 32;
      threads = warp ? 32 : std::min(256u, next_pow2(E));
      tg_bytes = warp ? 0 : (E * 4 + 15) / 16 * 16;
    } else {
      tg_bytes = ((2ull * E + threads) * 4 + 15) / 16 * 16;
    }
    Dispatch d(pipe(F, single ? "fused_moe_routing_f32" : "fused_moe_routing_batch_f32", g_dir), T, 1, 1, threads);
    d.buf(0, bl).buf(1, ids).buf(2, wts).buf(3, bs).val(4, p);
    if (tg_bytes) d.tg(0, tg_bytes);
    d.record();
  };
  const uint32_t launches[] = {0, 1, 32, 48, 256, 1000};
  for (const Case& c : cases) {
    for (int single = 0; single < 2; ++single) {
      if (single && c.tokens != 1 && !(c.e == 8 && c.k == 2)) continue;
      const uint32_t T = single ? 1 : c.tokens;
      vector<float> lg(T * c.e), sc(c.e);
      for (auto& x : lg) {
        x = c.kind == 1 ? float(std::round(rng.uni(-3, 3) * 2) / 2)
            : c.kind == 3 ? float(rng.uni(-0.05, 0.05)) : c.kind == 4 ? float(rng.uni(0, 0.02)) : float(rng.uni(-4, 4));
      }
      if (c.kind == 2) {
        for (uint32_t e = 0; e < c.e; ++e) lg[e] = -INFINITY;       // token 0: every logit -inf
        if (T > 1) for (uint32_t e = 0; e < c.e; e += 3) lg[c.e + e] = -INFINITY;
      }
      for (auto& x : sc) x = float(rng.uni(0.5, 2));
      Buf bl = upload(lg), bs = upload(sc), ids(T * c.k * 4), wts(T * c.k * 4);
      // reference: rank u = expf(l - max) in f32 (the kernel's ranking values), weights in double
      vector<uint32_t> want_i(T * c.k);
      vector<double> want_w(T * c.k);
      for (uint32_t t = 0; t < T; ++t) {
        const float* l = &lg[t * c.e];
        float mx = -INFINITY;
        for (uint32_t e = 0; e < c.e; ++e) mx = std::max(mx, l[e]);
        vector<float> u(c.e);
        for (uint32_t e = 0; e < c.e; ++e) u[e] = mx == -INFINITY ? 0.0f : std::exp(l[e] - mx);
        vector<uint32_t> ord(c.e);
        std::iota(ord.begin(), ord.end(), 0);
        std::stable_sort(ord.begin(), ord.end(), [&](uint32_t a, uint32_t b) { return u[a] > u[b]; });
        double tot = 0;
        for (uint32_t k = 0; k < c.k; ++k) tot += u[ord[k]];
        for (uint32_t k = 0; k < c.k; ++k) {
          want_i[t * c.k + k] = ord[k];
          want_w[t * c.k + k] = tot > 0 ? u[ord[k]] / tot * sc[ord[k]] : 0;
        }
      }
      for (uint32_t threads : launches) {
        ids.poison(); wts.poison();
        launch(single, threads, T, c.e, c.k, bl, ids, wts, bs);
        commit_wait();
        auto gi = ids.read<uint32_t>(T * c.k);
        auto gw = wts.read<float>(T * c.k);
        size_t id_bad = 0;
        for (size_t i = 0; i < gi.size(); ++i) id_bad += gi[i] != want_i[i];
        char shape[48];
        if (threads == 0) {
          snprintf(shape, sizeof shape, "op shape (%u threads)", c.e <= 1024 && c.k <= 32 ? 32u : std::min(256u, next_pow2(c.e)));
        } else {
          snprintf(shape, sizeof shape, "raw %u threads", threads);
        }
        char tag[200];
        snprintf(tag, sizeof tag, "%s tokens=%u experts=%u top_k=%u %s %s", single ? "fused_moe_routing_f32" : "fused_moe_routing_batch_f32",
                 T, c.e, c.k, shape, c.kind == 1 ? "ties" : c.kind == 2 ? "-inf" : c.kind == 3 ? "near" : c.kind == 4 ? "dense" : "");
        check(string(tag) + " ids", double(id_bad), 0);
        check(string(tag) + " weights", max_rel(to_d(gw), want_w, 1e-3), 1e-5);
      }
    }
  }
  {
    const uint32_t T = 8192, E = 512, K = 8;
    vector<float> lg(T * E), sc(E, 1.0f);
    for (auto& x : lg) x = float(rng.normal());
    Buf bl = upload(lg), bs = upload(sc), ids(T * K * 4), wts(T * K * 4);
    auto fn = [&] { launch(false, 0, T, E, K, bl, ids, wts, bs); };
    double t = time_ns(fn, 20);
    char line[200];
    snprintf(line, sizeof line, "fused_moe_routing_batch_f32 8192 tokens x 512 experts top-8, op shape (32 threads): %.2f us (%.0f GB/s of logits)", t / 1e3, 4.0 * T * E / t);
    perf(line);
    auto fb = [&] { launch(false, 256, T, E, K, bl, ids, wts, bs); };
    t = time_ns(fb, 20);
    snprintf(line, sizeof line, "fused_moe_routing_batch_f32 8192 tokens x 512 experts top-8, raw 256 threads (block path): %.2f us", t / 1e3);
    perf(line);
    Buf l1 = upload(vector<float>(lg.begin(), lg.begin() + E)), i1(K * 4), w1(K * 4);
    auto f1 = [&] { launch(true, 0, 1, E, K, l1, i1, w1, bs); };
    t = time_ns(f1, 200);
    snprintf(line, sizeof line, "fused_moe_routing_f32 1 token x 512 experts top-8, op shape: %.2f us per dispatch (200 in one commit)", t / 1e3);
    perf(line);
  }
}

// ---------------------------------------------------------------- ssm_norm_gate
static void test_ssm(Rng& rng) {
  const char* F = "ssm_norm_gate";
  struct Case { uint32_t rows, dv, threads; uint64_t off; };
  vector<Case> cases = {{1, 1, 0, 0}, {3, 3, 0, 0}, {7, 64, 0, 0}, {5, 100, 0, 0}, {33, 128, 0, 0}, {4, 256, 0, 0},
                        {2, 8200, 0, 0}, {3, 128, 0, 4}, {2, 128, 48, 0}, {2, 1000, 1, 0}};
  for (const Case& c : cases) {
    const uint32_t n = c.rows * c.dv;
    vector<float> x(n), z(n), w(c.dv);
    for (auto& v : x) v = float(rng.normal());
    for (auto& v : z) v = float(rng.uni(-6, 6));
    for (auto& v : w) v = float(rng.uni(0.5, 1.5));
    Buf bx(n * 4 + 16), bz = upload(z), bw = upload(w), out(n * 4);
    bx.write(x.data(), n * 4, c.off);
    out.poison();
    uint32_t threads = c.threads ? c.threads : std::min(256u, next_pow2(c.dv));
    SsmNormGateParams p{1e-6f, float(c.dv), 0, 0};
    Dispatch d(pipe(F, "ssm_norm_gate_f32", g_dir), c.rows, 1, 1, threads);
    d.buf(0, bx, c.off).buf(1, bw).buf(2, bz).buf(3, out).val(4, p).tg(0, ((threads + 31) / 32 * 4 + 15) / 16 * 16).record();
    commit_wait();
    vector<double> want(n);
    for (uint32_t r = 0; r < c.rows; ++r) {
      double s = 0;
      for (uint32_t i = 0; i < c.dv; ++i) s += double(x[r * c.dv + i]) * x[r * c.dv + i];
      double inv = 1 / std::sqrt(s / c.dv + 1e-6f);
      for (uint32_t i = 0; i < c.dv; ++i) { double zv = z[r * c.dv + i]; want[r * c.dv + i] = x[r * c.dv + i] * inv * w[i] * zv / (1 + std::exp(-zv)); }
    }
    char tag[128];
    snprintf(tag, sizeof tag, "ssm_norm_gate_f32 rows=%u dv=%u threads=%u off=%llu", c.rows, c.dv, threads, (unsigned long long)c.off);
    check(tag, max_rel(to_d(out.read<float>(n)), want, 1.0), 2e-5);
  }
}

// ---------------------------------------------------------------- chunk_local_cumsum_g_f32 (family chunk_gated_delta_rule)
static void test_cumsum(Rng& rng) {
  const char* F = "chunk_gated_delta_rule";
  struct Case { uint32_t b, t, h, bt; };
  vector<Case> cases = {{1, 1, 1, 64}, {2, 100, 3, 64}, {1, 64, 4, 64}, {3, 257, 5, 32}, {1, 2050, 2, 1024},
                        {2, 50, 3, 7}, {1, 130, 1, 48}, {2, 4096, 16, 64}, {1, 33, 2, 1}};
  for (const Case& c : cases) {
    const uint32_t n = c.b * c.t * c.h, nt = (c.t + c.bt - 1) / c.bt;
    vector<float> g(n);
    for (auto& v : g) v = float(rng.uni(-0.5, 0));
    Buf bg = upload(g), out(n * 4);
    out.poison();
    ChunkLocalCumsumParams p{c.b, c.t, c.h, c.bt, nt};
    Dispatch d(pipe(F, "chunk_local_cumsum_g_f32", g_dir), 1, c.h, c.b * nt, c.bt);
    d.buf(0, bg).buf(1, out).val(2, p).record();
    commit_wait();
    vector<double> want(n);
    for (uint32_t ib = 0; ib < c.b; ++ib)
      for (uint32_t ih = 0; ih < c.h; ++ih) {
        double acc = 0;
        for (uint32_t it = 0; it < c.t; ++it) {
          if (it % c.bt == 0) acc = 0;
          size_t at = (size_t(ib) * c.t + it) * c.h + ih;
          acc += g[at];
          want[at] = acc;
        }
      }
    char tag[128];
    snprintf(tag, sizeof tag, "chunk_local_cumsum_g_f32 b=%u t=%u h=%u bt=%u", c.b, c.t, c.h, c.bt);
    check(tag, max_rel(to_d(out.read<float>(n)), want, 1.0), 2e-5);
  }
}

// ---------------------------------------------------------------- flash_attn_vec

// The op's cuda launch of a main kernel (ts/ops/flash_attn_vec.ts cudaMainLaunch): f32 K/V on
// FFMA, grid x from flashAttnVecCudaHeadBlocks; f16 / bf16 on tensor cores, 8 query heads a block.
static uint32_t fav_head_blocks(uint32_t batch, uint32_t nh, uint32_t nkv, uint32_t D, uint32_t nwg) {
  const uint32_t group = nh / nkv, slices = D * 4 / 512;
  uint32_t hpb = std::min(group, std::max(1u, 8 / slices));
  while (hpb > 1 && (group + hpb - 1) / hpb * nkv * batch * nwg < 128) hpb = (hpb + 1) / 2;
  return (group + hpb - 1) / hpb;
}
static const uint32_t FAV_CUDA_THREADS = 128;
static uint32_t fav_grid_x(int kv, uint32_t batch, uint32_t nh, uint32_t nkv, uint32_t D, uint32_t nwg) {
  return kv == 0 ? fav_head_blocks(batch, nh, nkv, D, nwg) : (nh / nkv + 7) / 8;
}
static uint64_t fav_smem(int kv, uint32_t D) { return kv == 0 ? 4 * 32 * 768 : 192 * 1024 + (D == 512 ? 16 * 512 * 2 : 0); }
static const char* fav_tag(int kv) { return kv == 0 ? "" : kv == 1 ? "f16kv_" : "bf16kv_"; }

static void test_fav(Rng& rng) {
  const char* F = "flash_attn_vec";
  // lens: one per sequence (the main entries: every sequence lens[0]); ring and varlen: the varlen entries.
  struct Case { uint32_t batch, nh, nkv, cap, mask, win; float softcap; uint32_t nwg; vector<uint32_t> lens; bool varlen, ring; };
  vector<Case> cases = {
      {1, 4, 1, 4, 0, 0, 0, 1, {1}, false, false}, {2, 8, 2, 128, 1, 0, 0, 1, {100, 100}, false, false},
      {1, 8, 4, 1024, 2, 300, 30, 8, {1000}, false, false}, {2, 4, 4, 40, 0, 0, 0, 32, {33, 33}, false, false},
      {1, 16, 2, 4100, 1, 0, 0, 16, {4097}, false, false}, {1, 2, 1, 64, 2, 1, 0, 3, {64}, false, false},
      {3, 6, 3, 300, 2, 500, 50, 5, {257, 257, 257}, false, false}, {1, 2, 2, 31, 0, 0, 10, 2, {31}, false, false},
      {1, 16, 2, 2100, 1, 0, 0, 32, {2049}, false, false}, {2, 16, 1, 700, 2, 130, 0, 4, {700, 700}, false, false},
      {1, 6, 2, 80, 0, 0, 20, 1, {77}, false, false}, {1, 5, 1, 3001, 1, 0, 0, 7, {3000}, false, false},
      {2, 16, 2, 2, 0, 0, 0, 32, {1, 1}, false, false},
      {4, 16, 2, 64, 0, 0, 0, 4, {0, 1, 17, 64}, true, false},               // varlen, global cache
      {2, 8, 2, 48, 2, 16, 0, 1, {60, 33}, true, false},                     // a length past the capacity
      {5, 16, 2, 32, 0, 0, 0, 4, {1, 31, 32, 33, 1000}, true, true},         // ring = window, wrapped many times
      {3, 8, 1, 40, 2, 24, 8, 3, {23, 24, 4097}, true, true},                // ring wider than the window
      {2, 32, 2, 1024, 2, 1024, 0, 8, {1500, 70000}, true, true}};           // GQA 16, a window of 1024
  for (int kv = 0; kv < 3; ++kv)
    for (uint32_t D : {128u, 256u, 512u})
      for (const Case& c : cases) {
        const uint32_t rows = c.batch * c.nh;
        const size_t kvn = size_t(c.batch) * c.nkv * c.cap * D;
        vector<float> q(rows * D);
        for (auto& v : q) v = float(rng.normal());
        // The visible positions [lo, hi) of sequence b (shaders/flash_attn_vec.metal) and their slots.
        auto span = [&](uint32_t b, uint32_t& lo, uint32_t& hi) {
          const uint32_t len = c.varlen ? c.lens[b] : c.lens[0];
          hi = c.ring ? len : std::min(len, c.cap);
          lo = c.ring && len > c.cap ? len - c.cap : 0;
          if (c.mask == 2 && c.win > 0 && len > c.win) lo = std::max(lo, len - c.win);
        };
        auto slot = [&](uint32_t j) { return c.ring ? j % c.cap : j; };
        vector<double> kd(kvn), vd(kvn);
        for (uint32_t b = 0; b < c.batch; ++b) {
          uint32_t lo, hi;
          span(b, lo, hi);
          vector<char> used(c.cap, 0);
          for (uint32_t j = lo; j < hi; ++j) used[slot(j)] = 1;
          for (uint32_t h = 0; h < c.nkv; ++h)
            for (uint32_t sl = 0; sl < c.cap; ++sl)
              for (uint32_t e = 0; e < D; ++e) {
                const size_t i = ((size_t(b) * c.nkv + h) * c.cap + sl) * D + e;
                kd[i] = used[sl] ? rng.normal() : NAN;   // slots outside the span are NaN: they must not be read
                vd[i] = used[sl] ? rng.normal() : NAN;
              }
        }
        Buf bk, bv;
        if (kv == 0) {
          vector<float> fk(kd.begin(), kd.end()), fv(vd.begin(), vd.end());
          for (size_t i = 0; i < kvn; ++i) { kd[i] = fk[i]; vd[i] = fv[i]; }
          bk = upload(fk); bv = upload(fv);
        } else {
          vector<uint16_t> hk(kvn), hv(kvn);
          for (size_t i = 0; i < kvn; ++i) {
            if (kv == 1) {
              hk[i] = std::isnan(kd[i]) ? 0x7e00 : f_to_f16(float(kd[i])); hv[i] = std::isnan(vd[i]) ? 0x7e00 : f_to_f16(float(vd[i]));
              kd[i] = f16_to_f(hk[i]); vd[i] = f16_to_f(hv[i]);
            } else {
              hk[i] = f_to_bf16(float(kd[i])); hv[i] = f_to_bf16(float(vd[i]));
              kd[i] = bf16_to_f(hk[i]); vd[i] = bf16_to_f(hv[i]);
            }
          }
          bk = upload(hk); bv = upload(hv);
        }
        Buf bq = upload(q), out(rows * D * 4), lens = upload(c.lens);
        Buf tmp(c.nwg > 1 ? size_t(rows) * (D + 2) * c.nwg * 4 : 16);
        out.poison(); tmp.poison();
        const float scale = float(1.0 / std::sqrt(double(D)));
        const string kn = string(c.varlen ? "flash_attn_vec_varlen_" : "flash_attn_vec_") + fav_tag(kv) + "dk" + std::to_string(D);
        Dispatch d(pipe(F, kn, g_dir), fav_grid_x(kv, c.batch, c.nh, c.nkv, D, c.nwg), c.nkv, c.batch * c.nwg, FAV_CUDA_THREADS);
        if (c.varlen) {
          FlashAttnVecVarlenParams p{c.nh, c.nkv, D, c.cap, scale, c.mask, c.mask == 2 ? c.win : 0, c.softcap, c.nwg, c.ring ? 1u : 0u};
          d.val(0, p);
        } else {
          FlashAttnVecParams p{c.nh, c.nkv, D, c.lens[0], c.cap, scale, c.mask, c.mask == 2 ? c.win : 0, c.softcap, c.nwg};
          d.val(0, p);
        }
        d.buf(1, bq).buf(2, bk).buf(3, bv).buf(4, c.nwg == 1 ? out : tmp);
        if (c.varlen) d.buf(5, lens);
        d.tg(0, fav_smem(kv, D)).record();
        if (c.nwg > 1) {
          barrier();
          uint32_t nrows = rows, nwg = c.nwg;
          Dispatch r(pipe(F, "flash_attn_vec_reduce_dk" + std::to_string(D), g_dir), rows, 1, 1, 32 * c.nwg);
          r.val(0, nrows).buf(1, tmp).buf(2, out).val(3, nwg).record();
        }
        commit_wait();
        vector<double> want(rows * D, 0.0);
        const uint32_t group = c.nh / c.nkv;
        for (uint32_t b = 0; b < c.batch; ++b) {
          uint32_t lo, hi;
          span(b, lo, hi);
          vector<double> s(hi > lo ? hi - lo : 0);
          for (uint32_t h = 0; h < c.nh; ++h) {
            size_t qo = (size_t(b) * c.nh + h) * D, ko = (size_t(b) * c.nkv + h / group) * c.cap * D;
            double mx = -INFINITY;
            for (uint32_t j = lo; j < hi; ++j) {
              double dot = 0;
              for (uint32_t e = 0; e < D; ++e) dot += double(q[qo + e]) * kd[ko + size_t(slot(j)) * D + e];
              double x = scale * dot;
              if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
              s[j - lo] = x; mx = std::max(mx, x);
            }
            double sum = 0;
            for (double& x : s) { x = std::exp(x - mx); sum += x; }
            for (uint32_t j = lo; j < hi; ++j)
              for (uint32_t e = 0; e < D; ++e) want[qo + e] += s[j - lo] / sum * vd[ko + size_t(slot(j)) * D + e];
          }
        }
        char tag[240];
        snprintf(tag, sizeof tag, "%s batch=%u heads=%u/%u len=%u.. cap=%u mask=%u win=%u softcap=%g nwg=%u%s", kn.c_str(), c.batch, c.nh,
                 c.nkv, c.lens[0], c.cap, c.mask, c.win, c.softcap, c.nwg, c.ring ? " ring" : "");
        // tests/flash_attn_vec.test.ts's measure and tolerance: max |got - want| / max |want| under f32's 1e-5.
        check(tag, max_rel(to_d(out.read<float>(rows * D)), want, scale_of(want)), 1e-5);
      }
  // Decode performance: 16 query heads over 2 KV heads, 32768 positions (D 256 and 512), and a
  // ring of 1024 read at position 32775 (varlen); GB/s count each K and V byte read once.
  struct PerfCase { int kv; uint32_t D, B, nwg; bool ring; };
  for (PerfCase pc : {PerfCase{2, 256, 1, 32, false}, PerfCase{2, 256, 1, 16, false}, PerfCase{2, 256, 8, 8, false},
                      PerfCase{2, 256, 8, 16, false}, PerfCase{2, 256, 8, 32, false}, PerfCase{1, 256, 1, 32, false},
                      PerfCase{1, 256, 8, 8, false}, PerfCase{0, 256, 1, 32, false}, PerfCase{2, 512, 1, 32, false},
                      PerfCase{2, 128, 8, 8, false}, PerfCase{2, 256, 1, 8, true}, PerfCase{2, 256, 8, 8, true}}) {
    const uint32_t B = pc.B, NH = 16, NKV = 2, D = pc.D, cap = pc.ring ? 1024 : 32768, len = pc.ring ? 32775 : 32768, nwg = pc.nwg;
    const size_t kvn = size_t(B) * NKV * cap * D;
    std::mt19937 g32(uint32_t(rng.g()));
    Buf bk, bv;
    if (pc.kv == 0) {
      vector<float> fk(kvn);
      for (auto& x : fk) x = float(int(g32() % 2001) - 1000) / 1000.0f;
      bk = upload(fk); bv = upload(fk);
    } else {
      vector<uint16_t> hk(kvn);
      for (auto& x : hk) x = pc.kv == 1 ? uint16_t((g32() & 0x83ffu) | 0x3800u) : uint16_t((g32() & 0x807fu) | 0x3f00u);   // +-[0.5, 1)
      bk = upload(hk); bv = upload(hk);
    }
    vector<float> q(B * NH * D);
    for (auto& x : q) x = float(rng.normal());
    vector<uint32_t> lv(B, len);
    Buf bq = upload(q), out(B * NH * D * 4), tmp(size_t(B) * NH * (D + 2) * nwg * 4), lens = upload(lv);
    const uint32_t nrows = B * NH;
    const string kn = string(pc.ring ? "flash_attn_vec_varlen_" : "flash_attn_vec_") + fav_tag(pc.kv) + "dk" + std::to_string(D);
    auto fn = [&] {
      Dispatch d(pipe(F, kn, g_dir), fav_grid_x(pc.kv, B, NH, NKV, D, nwg), NKV, B * nwg, FAV_CUDA_THREADS);
      if (pc.ring) d.val(0, FlashAttnVecVarlenParams{NH, NKV, D, cap, 0.0625f, 0, 0, 0, nwg, 1});
      else d.val(0, FlashAttnVecParams{NH, NKV, D, len, cap, 0.0625f, 1, 0, 0, nwg});
      d.buf(1, bq).buf(2, bk).buf(3, bv).buf(4, nwg == 1 ? out : tmp);
      if (pc.ring) d.buf(5, lens);
      d.tg(0, fav_smem(pc.kv, D)).record();
      if (nwg > 1) { barrier(); Dispatch r(pipe(F, "flash_attn_vec_reduce_dk" + std::to_string(D), g_dir), nrows, 1, 1, 32 * nwg); r.val(0, nrows).buf(1, tmp).buf(2, out).val(3, nwg).record(); }
    };
    double t = time_ns(fn, B == 1 ? 20 : 5);
    const double bytes = 2.0 * kvn * (pc.kv == 0 ? 4 : 2);
    char line[240];
    snprintf(line, sizeof line, "%s B=%u heads=16/2 %s nwg=%u: %.2f us, %.0f GB/s of K+V (%.0f%% of copy)", kn.c_str(), B,
             pc.ring ? "ring 1024 at 32775" : "kv=32768", nwg, t / 1e3, bytes / t, 100 * bytes / t / g_copy_gbs);
    perf(line);
  }
}

// ---------------------------------------------------------------- gated_delta_net_chunk_inter_state_bf16 (family chunk_gated_delta_rule)
static void test_gdn(Rng& rng) {
  const char* F = "chunk_gated_delta_rule";
  struct Case { uint32_t b, t, hg, h, v; };
  vector<Case> cases = {{1, 64, 1, 1, 32}, {1, 128, 1, 2, 64}, {2, 192, 2, 4, 128}, {1, 256, 1, 2, 256}, {1, 320, 2, 6, 96}};
  const uint32_t K = 128, BT = 64;
  for (const Case& c : cases) {
    const uint32_t NT = c.t / BT;
    const size_t nk = size_t(c.b) * c.t * c.hg * K, nw = size_t(c.b) * c.t * c.h * K, nu = size_t(c.b) * c.t * c.h * c.v;
    const size_t ng = size_t(c.b) * c.t * c.h, ns = size_t(c.b) * c.h * c.v * K, nho = size_t(c.b) * NT * c.h * c.v * K;
    vector<uint16_t> hk(nk), hw(nw), hu(nu);
    vector<double> k(nk), w(nw), u(nu), g(ng), h0(ns);
    for (size_t i = 0; i < nk; ++i) { hk[i] = f_to_bf16(float(rng.normal() * 0.09)); k[i] = bf16_to_f(hk[i]); }
    for (size_t i = 0; i < nw; ++i) { hw[i] = f_to_bf16(float(rng.normal() * 0.09)); w[i] = bf16_to_f(hw[i]); }
    for (size_t i = 0; i < nu; ++i) { hu[i] = f_to_bf16(float(rng.normal())); u[i] = bf16_to_f(hu[i]); }
    vector<float> fg(ng), fh0(ns);
    for (uint32_t b = 0; b < c.b; ++b)
      for (uint32_t hh = 0; hh < c.h; ++hh) {
        double acc = 0;
        for (uint32_t t = 0; t < c.t; ++t) {
          if (t % BT == 0) acc = 0;
          acc += rng.uni(-0.08, 0);
          size_t at = (size_t(b) * c.t + t) * c.h + hh;
          fg[at] = float(acc); g[at] = fg[at];
        }
      }
    for (size_t i = 0; i < ns; ++i) { fh0[i] = float(rng.normal() * 0.5); h0[i] = fh0[i]; }
    Buf bk = upload(hk), bw = upload(hw), bu = upload(hu), bg = upload(fg), bh0 = upload(fh0);
    Buf hout(nho * 2), vnew(nu * 2), fin(ns * 4);
    hout.poison(); vnew.poison(); fin.poison();
    GatedDeltaNetChunkParams p{{c.b, c.t, c.hg, c.h, K, c.v}, BT, NT};
    Dispatch d(pipe(F, "gated_delta_net_chunk_inter_state_bf16", g_dir), c.v / 32, c.h, c.b, 128);
    d.buf(0, bk).buf(1, bw).buf(2, bu).buf(3, bg).buf(4, bh0).buf(5, hout).buf(6, vnew).buf(7, fin).val(8, p).tg(0, 32 * K * 4 + 32 * BT * 2).record();
    commit_wait();
    // mirror reference (interStateRef of ts/ops/chunk_gated_delta_rule.ts with mirrorBf16)
    vector<double> rho(nho), rvn(nu), rfin(ns);
    vector<double> hs(size_t(c.v) * K), hr(size_t(c.v) * K), vg(size_t(BT) * c.v);
    const uint32_t group = c.h / c.hg;
    for (uint32_t b = 0; b < c.b; ++b)
      for (uint32_t head = 0; head < c.h; ++head) {
        uint32_t kh = head / group;
        size_t so = (size_t(b) * c.h + head) * c.v * K;
        for (size_t i = 0; i < hs.size(); ++i) hs[i] = h0[so + i];
        for (uint32_t ch = 0; ch < NT; ++ch) {
          uint32_t t0 = ch * BT, t1 = t0 + BT;
          double gl = g[(size_t(b) * c.t + t1 - 1) * c.h + head];
          size_t sn = ((size_t(b) * NT + ch) * c.h + head) * c.v * K;
          for (size_t i = 0; i < hs.size(); ++i) { hr[i] = bf16r(float(hs[i])); rho[sn + i] = hr[i]; }
          for (uint32_t t = t0; t < t1; ++t) {
            size_t wo = ((size_t(b) * c.t + t) * c.h + head) * K, uo = ((size_t(b) * c.t + t) * c.h + head) * c.v;
            double gate = std::exp(gl - g[(size_t(b) * c.t + t) * c.h + head]);
            for (uint32_t vv = 0; vv < c.v; ++vv) {
              double dot = 0;
              for (uint32_t kk = 0; kk < K; ++kk) dot += w[wo + kk] * hr[size_t(vv) * K + kk];
              double vn = u[uo + vv] - dot;
              rvn[uo + vv] = bf16r(float(vn));
              vg[size_t(t - t0) * c.v + vv] = bf16r(float(vn * gate));
            }
          }
          double decay = std::exp(gl);
          for (uint32_t vv = 0; vv < c.v; ++vv)
            for (uint32_t kk = 0; kk < K; ++kk) {
              double acc = hs[size_t(vv) * K + kk] * decay;
              for (uint32_t t = t0; t < t1; ++t) acc += vg[size_t(t - t0) * c.v + vv] * k[((size_t(b) * c.t + t) * c.hg + kh) * K + kk];
              hs[size_t(vv) * K + kk] = float(acc);
            }
        }
        for (size_t i = 0; i < hs.size(); ++i) rfin[so + i] = hs[i];
      }
    char tag[160];
    snprintf(tag, sizeof tag, "gated_delta_net_chunk_inter_state_bf16 b=%u t=%u hg=%u h=%u v=%u", c.b, c.t, c.hg, c.h, c.v);
    // A summation-order difference (tensor-core f32 sums vs double) can move a
    // value across a bf16 rounding boundary (a one-ulp flip of vg, v_new or the
    // snapshot), and a flipped vg reaches the later state through k: these are
    // absolute errors, measured against each output's largest magnitude, and
    // the NMSE bounds their number.
    auto nmse = [](const vector<double>& g, const vector<double>& w) {
      double e = 0, r = 0;
      for (size_t i = 0; i < g.size(); ++i) { double d = g[i] - w[i]; e += d * d; r += w[i] * w[i]; }
      return e == e ? e / r : INFINITY;
    };
    auto gh = bf16_d(hout.read<uint16_t>(nho)), gv = bf16_d(vnew.read<uint16_t>(nu));
    auto gf = to_d(fin.read<float>(ns));
    check(string(tag) + " h_out max abs err / max |want|", max_rel(gh, rho, scale_of(rho)), 1e-2);
    check(string(tag) + " v_new max abs err / max |want|", max_rel(gv, rvn, scale_of(rvn)), 1e-2);
    check(string(tag) + " final_state max abs err / max |want|", max_rel(gf, rfin, scale_of(rfin)), 1e-2);
    check(string(tag) + " h_out nmse", nmse(gh, rho), 1e-6);
    check(string(tag) + " v_new nmse", nmse(gv, rvn), 1e-6);
    check(string(tag) + " final_state nmse", nmse(gf, rfin), 1e-6);
  }
  {
    const uint32_t B = 1, T = 4096, HG = 16, H = 32, V = 128, NT = T / BT;
    const size_t nk = size_t(B) * T * HG * K, nw = size_t(B) * T * H * K, nu = size_t(B) * T * H * V, ns = size_t(B) * H * V * K;
    vector<uint16_t> hk(nk), hw(nw), hu(nu);
    for (auto& x : hk) x = f_to_bf16(float(rng.normal() * 0.09));
    for (auto& x : hw) x = f_to_bf16(float(rng.normal() * 0.09));
    for (auto& x : hu) x = f_to_bf16(float(rng.normal()));
    vector<float> fg(size_t(B) * T * H, -0.01f), fh0(ns, 0.1f);
    Buf bk = upload(hk), bw = upload(hw), bu = upload(hu), bg = upload(fg), bh0 = upload(fh0);
    Buf hout(size_t(B) * NT * H * V * K * 2), vnew(nu * 2), fin(ns * 4);
    GatedDeltaNetChunkParams p{{B, T, HG, H, K, V}, BT, NT};
    auto fn = [&] {
      Dispatch d(pipe(F, "gated_delta_net_chunk_inter_state_bf16", g_dir), V / 32, H, B, 128);
      d.buf(0, bk).buf(1, bw).buf(2, bu).buf(3, bg).buf(4, bh0).buf(5, hout).buf(6, vnew).buf(7, fin).val(8, p).tg(0, 32 * K * 4 + 32 * BT * 2).record();
    };
    double t = time_ns(fn, 5);
    double bytes = 2.0 * (nk + nw + nu * 2) + 2.0 * NT * H * V * K + 8.0 * ns;
    double flops = 2.0 * 2 * B * H * double(T) * V * K;
    char line[220];
    snprintf(line, sizeof line, "gated_delta_net_chunk B=1 T=4096 Hg=16 H=32 V=128: %.1f us (%.0f GB/s, %.1f TFLOP/s; grid %u blocks)", t / 1e3, bytes / t, flops / t / 1e3, V / 32 * H * B);
    perf(line);
  }
}

#include "kernels_test_linear_attn.inc"

// ---------------------------------------------------------------- chunk_gated_delta_rule
#include "chunk_gated_delta_rule_test.inc"

// ---------------------------------------------------------------- copy ceiling
static void measure_copy() {
  const char* src =
      "extern \"C\" __global__ void copy_f32(const float4* a, float4* b, const unsigned long long* n) {\n"
      "  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < *n; i += gridDim.x * 256ull) b[i] = a[i];\n"
      "}\n";
  mlxn_library* lib;
  mlxn_status s = p_mlxn_library_compile(g_dev, src, strlen(src), "copy.cu", nullptr, 0, &lib, g_msg, sizeof g_msg);
  if (s) die("compile copy", s);
  mlxn_pipeline* pl;
  s = p_mlxn_pipeline_create(lib, "copy_f32", &pl, g_msg, sizeof g_msg);
  if (s) die("pipeline copy", s);
  const uint64_t n4 = 1ull << 26;  // 1 GiB each way
  Buf a(n4 * 16), b(n4 * 16);
  auto fn = [&] { Dispatch d(pl, 132 * 16, 1, 1, 256); d.buf(0, a).buf(1, b).val(2, n4).record(); };
  double t = time_ns(fn, 5);
  g_copy_gbs = 2.0 * n4 * 16 / t;
  char line[160];
  snprintf(line, sizeof line, "device-to-device copy (1 GiB, read + write counted): %.0f GB/s", g_copy_gbs);
  perf(line);
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s libmlx_native_cuda.so shaders/cuda [families...]\n", argv[0]); return 2; }
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
#define LOAD(name) p_##name = (decltype(p_##name))dlsym(h, #name); if (!p_##name) { fprintf(stderr, "missing %s\n", #name); return 2; }
  LOAD(mlxn_device_count) LOAD(mlxn_device_open) LOAD(mlxn_device_name) LOAD(mlxn_buffer_alloc)
  LOAD(mlxn_buffer_release) LOAD(mlxn_buffer_write) LOAD(mlxn_buffer_read) LOAD(mlxn_library_compile)
  LOAD(mlxn_pipeline_create) LOAD(mlxn_encoder_create) LOAD(mlxn_encoder_dispatch) LOAD(mlxn_encoder_commit)
  LOAD(mlxn_encoder_wait) LOAD(mlxn_encoder_gpu_time_ns) LOAD(mlxn_encoder_barrier) LOAD(mlxn_device_limit)
#undef LOAD
  g_dir = argv[2];
  if (p_mlxn_device_count() == 0) { printf("SKIPPED: no CUDA device\n"); return 0; }
  mlxn_status s = p_mlxn_device_open(0, &g_dev, g_msg, sizeof g_msg);
  if (s) die("device_open", s);
  char name[256];
  p_mlxn_device_name(g_dev, name, sizeof name);
  g_cc = uint32_t(p_mlxn_device_limit(g_dev, MLXN_LIMIT_COMPUTE_CAPABILITY));
  g_sms = p_mlxn_device_limit(g_dev, MLXN_LIMIT_MULTIPROCESSORS);
  printf("device: %s (compute capability %u)\n", name, g_cc);
  s = p_mlxn_encoder_create(g_dev, &g_enc, g_msg, sizeof g_msg);
  if (s) die("encoder", s);
  std::map<string, std::function<void(Rng&)>> fams = {
      {"fused_norm", test_fused_norm}, {"moe_routing", test_moe}, {"ssm_norm_gate", test_ssm},
      {"chunk_local_cumsum", test_cumsum}, {"flash_attn_vec", test_fav}, {"gated_delta_net_chunk", test_gdn},
      {"l2_norm", test_l2_norm}, {"compute_g_beta", test_compute_g_beta}, {"ssm_conv", test_ssm_conv},
      {"gated_delta_net", test_gated_delta_net}, {"chunk_gated_delta_rule", test_cgdr}};
  vector<string> order = {"chunk_local_cumsum", "ssm_norm_gate", "fused_norm", "moe_routing", "flash_attn_vec", "gated_delta_net_chunk",
                         "l2_norm", "compute_g_beta", "ssm_conv", "gated_delta_net",
                         "chunk_gated_delta_rule"};
  if (argc > 3) order.assign(argv + 3, argv + argc);
  measure_copy();
  uint64_t seed = 1234;
  for (const string& f : order) {
    Rng rng(seed++);
    printf("== %s\n", f.c_str());
    fams.at(f)(rng);
  }
  printf("\n==== performance\n");
  for (auto& l : g_perf) printf("%s\n", l.c_str());
  printf("==== %d checks passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
