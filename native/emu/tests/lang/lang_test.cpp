// Tests of the emulator's language half without the runtime: the translator's
// output and KernelInfo, its error locations, and the seed kernels
// (/work/shared/seeds or $MLXN_SEEDS) translated, compiled with kCompileFlags
// and loaded; two of them run with trivial hooks here (sequential, one
// thread per call: one-thread threadgroups, so barriers return at once and a
// SIMD collective has one active lane).
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../translate.h"
#include "mlxn_emu_kernel_abi.h"

using namespace mlxn::emu;

static int failures = 0;
#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
      ++failures;                                                                 \
    }                                                                             \
  } while (0)

static std::string g_shim, g_work;

static bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
// Ignoring spaces: the translator keeps the source's spacing between tokens.
static std::string nospace(const std::string& s) {
  std::string r;
  for (char c : s)
    if (c != ' ') r += c;
  return r;
}

// Translates and compiles into a library; returns the dlopen handle or null.
static void* build(const std::string& src, const std::string& name, const std::vector<FunctionConstant>& fcs,
                   Translation* tr, std::string* err) {
  if (!translate(src, name, fcs, tr, err)) return nullptr;
  std::string base = g_work + "/" + name;
  std::ofstream(base + ".cpp") << tr->cpp;
  std::string cmd = "clang++-19";
  for (const char* const* f = kCompileFlags; *f; ++f) cmd += std::string(" ") + *f;
  cmd += " -I" + g_shim + " " + base + ".cpp -o " + base + ".so 2>" + base + ".log";
  if (system(cmd.c_str()) != 0) {
    std::ifstream l(base + ".log");
    std::stringstream ss;
    ss << l.rdbuf();
    *err = ss.str();
    return nullptr;
  }
  void* h = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) *err = dlerror();
  return h;
}

// ---- trivial hooks: one thread per threadgroup, run to completion ----
static std::string g_oob;
static char g_scratch[4096];
static std::vector<std::vector<char>> g_static;
static void h_barrier(mlxn_emu_thread*, mlxn_emu_site, uint32_t) {}
static char g_gathered[256 * MLXN_EMU_SIMD_WIDTH];
static const void* h_exchange(mlxn_emu_thread* t, mlxn_emu_site, const void* mine, uint32_t size, uint32_t* mask) {
  memset(g_gathered, 0, size_t(size) * MLXN_EMU_SIMD_WIDTH);
  memcpy(g_gathered + size_t(t->thread_index_in_simdgroup) * size, mine, size);
  *mask = 1u << t->thread_index_in_simdgroup;
  return g_gathered;
}
static void* h_oob(mlxn_emu_thread* t, uint32_t space, uint32_t binding, int64_t off, uint64_t size, uint64_t len,
                   mlxn_emu_site site) {
  if (g_oob.empty()) {
    char b[256];
    snprintf(b, sizeof b, "%s space %u binding %u offset %lld size %llu length %llu at %s:%u", t->kernel_name, space,
             binding, (long long)off, (unsigned long long)size, (unsigned long long)len, site.file, site.line);
    g_oob = b;
  }
  return g_scratch;
}
static void h_preempt(mlxn_emu_thread*) {}
static void* h_static(mlxn_emu_thread*, uint32_t id, uint64_t size, uint64_t) {
  if (g_static.size() <= id) g_static.resize(id + 1);
  if (g_static[id].size() < size) g_static[id].assign(size, 0);
  return g_static[id].data();
}
static void h_fail(mlxn_emu_thread*, const char* m, mlxn_emu_site s) {
  fprintf(stderr, "kernel failed: %s at %s:%u\n", m, s.file, s.line);
  abort();
}
static const mlxn_emu_hooks kHooks = {h_barrier, h_barrier, h_exchange, h_oob,
                                      h_preempt, h_static, h_fail};

// Runs kernel `sym` over a grid of one-thread threadgroups.
static void run1(void* lib, const char* sym, const char* name, uint32_t groups, std::vector<mlxn_emu_binding> buffers,
                 std::vector<mlxn_emu_binding> tg = {}) {
  auto fn = (void (*)(mlxn_emu_thread*))dlsym(lib, sym);
  CHECK(fn != nullptr);
  if (!fn) return;
  buffers.resize(MLXN_EMU_MAX_BINDINGS);
  tg.resize(MLXN_EMU_MAX_BINDINGS);
  for (uint32_t g = 0; g < groups; ++g) {
    g_static.clear();
    mlxn_emu_thread t;
    memset(&t, 0, sizeof t);
    t.hooks = &kHooks;
    t.buffers = buffers.data();
    t.threadgroup = tg.data();
    t.kernel_name = name;
    t.thread_position_in_grid[0] = g;
    t.threadgroup_position_in_grid[0] = g;
    for (int k = 0; k < 3; ++k) {
      t.threads_per_threadgroup[k] = 1;
      t.threadgroups_per_grid[k] = 1;
      t.threads_per_grid[k] = 1;
    }
    t.threadgroups_per_grid[0] = groups;
    t.threads_per_grid[0] = groups;
    t.simdgroups_per_threadgroup = 1;
    t.threads_per_simdgroup = MLXN_EMU_SIMD_WIDTH;
    t.preempt_countdown = UINT32_MAX;
    fn(&t);
  }
}

static void test_translation() {
  const char* src =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "constant bool fa [[function_constant(0)]];\n"
      "constant float fb [[function_constant(1)]];\n"
      "constant constexpr uint N = 4;\n"
      "[[max_total_threads_per_threadgroup(256)]]\n"
      "kernel void k1(device const float* a [[buffer(3)]], constant uint& n [[buffer(1)]],\n"
      "               threadgroup half* s [[threadgroup(2)]], uint3 g [[thread_position_in_grid]]) {\n"
      "  threadgroup float tile[N][8];\n"
      "  float x = 0.5h + 1.0 + 2.0bf + (is_function_constant_defined(fb) ? 1.0f : 0.0f);\n"
      "}\n"
      "template <typename T> kernel void k2(device T* o [[buffer(0)]]) {}\n"
      "template [[host_name(\"k2_f\")]] kernel void k2<float>(device float*);\n";
  Translation tr;
  std::string err;
  CHECK(translate(src, "t.metal", {{0, 1, 1}}, &tr, &err));
  CHECK(tr.kernels.size() == 2);
  if (tr.kernels.size() == 2) {
    const KernelInfo& a = tr.kernels[0];
    CHECK(a.host_name == "k1" && a.symbol == "mlxn_emu_kernel_k1");
    CHECK((a.buffer_indices == std::vector<uint32_t>{3, 1}));
    CHECK((a.threadgroup_indices == std::vector<uint32_t>{2}));
    CHECK(a.max_total_threads_per_threadgroup == 256);
    CHECK(tr.kernels[1].host_name == "k2_f" && tr.kernels[1].buffer_indices.size() == 1);
  }
  const std::string& c = tr.cpp;
  CHECK(contains(c, "#line 1 \"t.metal\""));
  CHECK(contains(c, "static constexpr bool fa = true;"));
  CHECK(contains(c, "static constexpr float fb = float{};"));
  CHECK(contains(nospace(c), nospace("::mlxn::dptr<const float, 1u> a")));
  CHECK(contains(nospace(c), nospace("const uint& n")));
  CHECK(contains(nospace(c), nospace("::mlxn::dptr<half, 3u> s")));
  CHECK(contains(nospace(c), nospace("::mlxn::tg_array<float [N][8], 0u>()")));
  CHECK(contains(nospace(c), nospace("((half)0.5f) + 1.0f + ((bfloat)2.0f) + (false ?")));
  CHECK(contains(c, "&k2<float>"));
  CHECK(!contains(c, "host_name"));
  // Line numbers survive: the kernel body's line 10 is line 10 after #line 1.
  size_t at = c.find("#line 1 \"t.metal\"\n");
  size_t x = c.find("float x =");
  int lines = 0;
  for (size_t i = at; i < x; ++i) lines += c[i] == '\n';
  CHECK(lines == 10);

  // Errors: file:line:col.
  CHECK(!translate("kernel void k(float x [[stage_in]]) {}\n", "e.metal", {}, &tr, &err));
  CHECK(contains(err, "e.metal:1:25: kernel parameter attribute [[stage_in]]"));
  CHECK(!translate("\n\nkernel void k(device float* x) {}\n", "e.metal", {}, &tr, &err));
  CHECK(contains(err, "e.metal:3:15: kernel parameter without"));
  CHECK(!translate("/* open", "e.metal", {}, &tr, &err));
  CHECK(contains(err, "e.metal:1:1: unterminated comment"));
  CHECK(!translate("template [[host_name(\"z\")]] kernel void nope<1>(device float*);", "e.metal", {}, &tr, &err));
  CHECK(contains(err, "'nope' is not a kernel template"));
}

static void test_compile_error_line() {
  Translation tr;
  std::string err;
  void* h = build("#include <metal_stdlib>\nusing namespace metal;\n\nkernel void k(device float* o [[buffer(0)]]) {\n"
                  "  o[0] = undeclared_thing;\n}\n",
                  "cerr.metal", {}, &tr, &err);
  CHECK(h == nullptr);
  CHECK(contains(err, "cerr.metal:5:"));
}

static std::vector<std::string> seed_files(const std::string& dir) {
  std::vector<std::string> r;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 6 && n.substr(n.size() - 6) == ".metal") r.push_back(n);
    }
    closedir(d);
  }
  return r;
}

static void test_seeds(const std::string& dir) {
  std::vector<std::string> files = seed_files(dir);
  if (files.empty()) {
    printf("seeds: none in %s, skipped\n", dir.c_str());
    return;
  }
  for (const std::string& f : files) {
    std::ifstream in(dir + "/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    Translation tr;
    std::string err;
    void* h = build(ss.str(), f, {}, &tr, &err);
    if (!h) fprintf(stderr, "seed %s: %s\n", f.c_str(), err.c_str());
    CHECK(h != nullptr);
    if (!h) continue;
    auto abi = (uint32_t(*)())dlsym(h, "mlxn_emu_kernel_abi");
    CHECK(abi && abi() == MLXN_EMU_KERNEL_ABI);
    for (const auto& k : tr.kernels) CHECK(dlsym(h, k.symbol.c_str()) != nullptr);
    printf("seed %s: %zu kernels\n", f.c_str(), tr.kernels.size());

    if (f == "chunk_local_cumsum.metal") {
      // [B=1, T=8, H=2], BT=4, NT=2; grid (1, H, NT) as one-thread groups in z order.
      float g[16], out[16];
      for (int i = 0; i < 16; ++i) g[i] = float(i % 5) - 1.5f;
      uint32_t params[5] = {1, 8, 2, 4, 2};
      auto fn = (void (*)(mlxn_emu_thread*))dlsym(h, "mlxn_emu_kernel_chunk_local_cumsum_g_f32");
      std::vector<mlxn_emu_binding> b(MLXN_EMU_MAX_BINDINGS), tg(MLXN_EMU_MAX_BINDINGS);
      b[0] = {(uint8_t*)g, sizeof g};
      b[1] = {(uint8_t*)out, sizeof out};
      b[2] = {(uint8_t*)params, sizeof params};
      for (uint32_t z = 0; z < 2; ++z)
        for (uint32_t y = 0; y < 2; ++y) {
          mlxn_emu_thread t;
          memset(&t, 0, sizeof t);
          t.hooks = &kHooks;
          t.buffers = b.data();
          t.threadgroup = tg.data();
          t.kernel_name = "chunk_local_cumsum_g_f32";
          t.threadgroup_position_in_grid[1] = y;
          t.threadgroup_position_in_grid[2] = z;
          t.preempt_countdown = UINT32_MAX;
          fn(&t);
        }
      for (int h2 = 0; h2 < 2; ++h2)
        for (int c = 0; c < 2; ++c) {
          float acc = 0;
          for (int i = 0; i < 4; ++i) {
            int idx = (c * 4 + i) * 2 + h2;
            acc += g[idx];
            CHECK(out[idx] == acc);
          }
        }
    }
    if (f == "ssm_norm_gate.metal") {
      // rows = 3, d_v = 5, one thread per threadgroup (tg_size 1).
      float x[15], w[5], z[15], o[15], params[2] = {1e-5f, 5.0f}, shared[1];
      for (int i = 0; i < 15; ++i) {
        x[i] = float(i % 7) * 0.3f - 0.8f;
        z[i] = float(i % 4) * 0.5f - 0.7f;
      }
      for (int i = 0; i < 5; ++i) w[i] = 0.5f + 0.1f * float(i);
      g_oob.clear();
      run1(h, "mlxn_emu_kernel_ssm_norm_gate_f32", "ssm_norm_gate_f32", 3,
           {{(uint8_t*)x, sizeof x}, {(uint8_t*)w, sizeof w}, {(uint8_t*)z, sizeof z}, {(uint8_t*)o, sizeof o},
            {(uint8_t*)params, sizeof params}},
           {{(uint8_t*)shared, sizeof shared}});
      CHECK(g_oob.empty());
      for (int r = 0; r < 3; ++r) {
        double ss = 0;
        for (int i = 0; i < 5; ++i) ss += double(x[r * 5 + i]) * x[r * 5 + i];
        double inv = 1.0 / sqrt(ss / 5 + 1e-5);
        for (int i = 0; i < 5; ++i) {
          double zz = z[r * 5 + i];
          double want = x[r * 5 + i] * inv * w[i] * (zz / (1 + exp(-zz)));
          CHECK(fabs(o[r * 5 + i] - want) <= 1e-5 * fmax(1.0, fabs(want)));
        }
      }
      // An out-of-bounds read is reported, not done: d_v = 6 reads past x.
      params[1] = 6.0f;
      run1(h, "mlxn_emu_kernel_ssm_norm_gate_f32", "ssm_norm_gate_f32", 3,
           {{(uint8_t*)x, sizeof x}, {(uint8_t*)w, sizeof w}, {(uint8_t*)z, sizeof z}, {(uint8_t*)o, sizeof o},
            {(uint8_t*)params, sizeof params}},
           {{(uint8_t*)shared, sizeof shared}});
      CHECK(contains(g_oob, "ssm_norm_gate_f32 space 1 binding 1 offset 20 size 4 length 20 at ssm_norm_gate.metal:"));
      printf("  reported: %s\n", g_oob.c_str());
    }
  }
}

// Static threadgroup memory per kernel, known before any run; `&x[i]` on a
// checked pointer stays checked.
static void test_static_threadgroup_and_elem_addr() {
  const char* src =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "constant constexpr uint N = 4;\n"
      "static void helper(threadgroup float* p) { threadgroup float4 extra[3]; extra[0] = float4(1.0f); p[0] = extra[0].x; }\n"
      "template <typename T> void tpl() { threadgroup T big[N * 2]; big[0] = T(0); }\n"
      "static void unused() { threadgroup float never[1000]; never[0] = 0.0f; }\n"
      "kernel void ks(device float* o [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {\n"
      "  constexpr uint M = 10;\n"
      "  threadgroup float a[M];\n"
      "  threadgroup uint one;\n"
      "  helper(a);\n"
      "  tpl<half>();\n"
      "  one = 1u;\n"
      "  float local[2] = {0.0f, 0.0f};\n"
      "  thread float* l = &local[1];\n"
      "  device float* q = &o[i + 5];\n"
      "  q[0] = a[0] + l[0] + float(one);\n"
      "}\n"
      "kernel void kn(device float* o [[buffer(0)]]) { o[0] = 0.0f; }\n";
  Translation tr;
  std::string err;
  void* h = build(src, "st.metal", {}, &tr, &err);
  CHECK(h != nullptr);
  if (!h) {
    fprintf(stderr, "%s\n", err.c_str());
    return;
  }
  CHECK(contains(nospace(tr.cpp), nospace("::mlxn::elem_addr(o, i + 5)")));
  CHECK(contains(nospace(tr.cpp), nospace("::mlxn::elem_addr(local, 1)")));
  auto ks = (uint64_t(*)())dlsym(h, "mlxn_emu_kernel_static_threadgroup_ks");
  auto kn = (uint64_t(*)())dlsym(h, "mlxn_emu_kernel_static_threadgroup_kn");
  CHECK(ks != nullptr && kn != nullptr);
  // a: 40 -> 48, one: 4 -> 16, extra: 48, big (half[8]): 16; `never` is not reached.
  if (ks) CHECK(ks() == 48 + 16 + 48 + 16);
  if (kn) CHECK(kn() == 0);
  // The write through &o[i + 5] is checked: binding 0, byte offset 20.
  float o[4] = {0, 0, 0, 0};
  g_oob.clear();
  run1(h, "mlxn_emu_kernel_ks", "ks", 1, {{(uint8_t*)o, sizeof o}});
  CHECK(contains(g_oob, "ks space 1 binding 0 offset 20 size 4 length 16 at st.metal:17"));
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: lang_test <shim dir> <work dir> [seed dir]\n");
    return 2;
  }
  g_shim = argv[1];
  g_work = argv[2];
  std::string seeds = argc > 3 ? argv[3] : "/work/shared/seeds";
  test_translation();
  test_compile_error_line();
  test_static_threadgroup_and_elem_addr();
  test_seeds(seeds);
  if (failures) {
    fprintf(stderr, "lang_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("lang_test: all checks passed\n");
  return 0;
}
