// Tests of the emulator's scheduler and runtime hooks with hand-written C++
// kernels that call the hooks the way translated Metal kernels do.
// Run: native/emu/tests/runtime/run.sh
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <signal.h>

#include "../../executor.h"
#include "../../../common/tests/check.h"

using namespace mlxn::emu;

static bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

static const mlxn_emu_site kSiteA = {"k.metal", 10, 3};
static const mlxn_emu_site kSiteB = {"k.metal", 20, 5};
static const mlxn_emu_site kSiteC = {"k.metal", 30, 7};

// The shim's preemption point before a threadgroup-memory access.
static inline void tg_access(mlxn_emu_thread* t) {
  if (t->random_schedule && --t->preempt_countdown == 0) t->hooks->preempt(t);
}

static Launch make_launch(Kernel* k, uint32_t groups, uint32_t threads) {
  Launch l;
  l.kernel = k;
  l.grid[0] = groups;
  l.threads[0] = threads;
  return l;
}

static void bind(Launch& l, uint32_t idx, void* p, uint64_t len) {
  l.buffers[idx].ptr = static_cast<uint8_t*>(p);
  l.buffers[idx].length = len;
  l.buffer_set |= 1u << idx;
}

static void bind_tg(Launch& l, uint32_t idx, uint64_t len) {
  l.threadgroup_length[idx] = len;
  l.threadgroup_set |= 1u << idx;
}

// --- barrier release: rotate values through threadgroup memory -----------

static void k_rotate(mlxn_emu_thread* t) {
  float* tg = reinterpret_cast<float*>(t->threadgroup[0].ptr);
  float* out = reinterpret_cast<float*>(t->buffers[0].ptr);
  uint32_t i = t->thread_index_in_threadgroup, n = t->threads_per_threadgroup[0];
  tg_access(t);
  tg[i] = float(t->thread_position_in_grid[0]);
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
  tg_access(t);
  out[t->thread_position_in_grid[0]] = tg[(i + 1) % n];
}

static void test_barrier_release(bool random) {
  Kernel k;
  k.name = "rotate";
  k.fn = k_rotate;
  k.buffer_indices = {0};
  k.threadgroup_indices = {0};
  const uint32_t groups = 7, n = 200;
  std::vector<float> out(groups * n, -1.f);
  Launch l = make_launch(&k, groups, n);
  bind(l, 0, out.data(), out.size() * 4);
  bind_tg(l, 0, n * 4);
  l.schedule.random = random;
  CHECK(check_launch(l).empty(), "%s", check_launch(l).c_str());
  std::string err = execute(l);
  CHECK(err.empty(), "%s", err.c_str());
  bool ok = true;
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t i = 0; i < n; ++i) ok &= out[g * n + i] == float(g * n + (i + 1) % n);
  CHECK(ok, "rotate result wrong (random=%d)", int(random));
}

// --- exited threads drop out of barriers ---------------------------------

static void k_early_exit(mlxn_emu_thread* t) {
  uint32_t i = t->thread_index_in_threadgroup;
  if (i % 3 == 0) return;
  uint32_t* tg = reinterpret_cast<uint32_t*>(t->threadgroup[0].ptr);
  tg[i] = i;
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
  uint32_t* out = reinterpret_cast<uint32_t*>(t->buffers[0].ptr);
  uint32_t j = (i + 1) % t->threads_per_threadgroup[0];
  out[i] = j % 3 == 0 ? 7 : tg[j];
}

static void test_early_exit() {
  Kernel k;
  k.name = "early_exit";
  k.fn = k_early_exit;
  std::vector<uint32_t> out(96, 0);
  Launch l = make_launch(&k, 1, 96);
  bind(l, 0, out.data(), out.size() * 4);
  bind_tg(l, 0, 96 * 4);
  std::string err = execute(l);
  CHECK(err.empty(), "%s", err.c_str());
  bool ok = true;
  for (uint32_t i = 0; i < 96; ++i) {
    uint32_t j = (i + 1) % 96;
    uint32_t want = i % 3 == 0 ? 0 : (j % 3 == 0 ? 7 : j);
    ok &= out[i] == want;
  }
  CHECK(ok, "early exit result wrong");
}

// --- divergent barrier: error names both sites ---------------------------

static void k_divergent(mlxn_emu_thread* t) {
  if (t->thread_index_in_threadgroup < 40)
    t->hooks->threadgroup_barrier(t, kSiteA, 0);
  else
    t->hooks->threadgroup_barrier(t, kSiteB, 0);
  // Not reached by any thread: the dispatch fails at the barriers.
  reinterpret_cast<uint32_t*>(t->buffers[0].ptr)[0] = 1;
}

static void test_divergent_barrier(bool random) {
  Kernel k;
  k.name = "divergent";
  k.fn = k_divergent;
  uint32_t out = 0;
  Launch l = make_launch(&k, 3, 64);
  bind(l, 0, &out, 4);
  l.schedule.random = random;
  std::string err = execute(l);
  CHECK(contains(err, "divergent") && contains(err, "k.metal:10:3") && contains(err, "k.metal:20:5") &&
            contains(err, "threadgroup (0,0,0)"),
        "got: %s", err.c_str());
  CHECK(out == 0, "threads ran past a divergent barrier");
  // The pool still works afterwards.
  test_barrier_release(false);
}

// --- simd exchange: active sets by site -----------------------------------

static uint32_t simd_sum(mlxn_emu_thread* t, mlxn_emu_site site, uint32_t v, uint32_t* mask) {
  const uint32_t* all = static_cast<const uint32_t*>(t->hooks->simd_exchange(t, site, &v, 4, mask));
  uint32_t s = 0;
  for (uint32_t l = 0; l < 32; ++l) s += all[l];
  return s;
}

static void k_simd(mlxn_emu_thread* t) {
  uint32_t lane = t->thread_index_in_simdgroup;
  uint32_t* out = reinterpret_cast<uint32_t*>(t->buffers[0].ptr) + 4 * t->thread_index_in_threadgroup;
  uint32_t mask = 0;
  // Uniform: every live lane.
  out[0] = simd_sum(t, kSiteA, lane, &mask);
  // Divergent branches: two active sets at two sites.
  if (lane < 10)
    out[1] = simd_sum(t, kSiteB, 1, &mask);
  else
    out[1] = simd_sum(t, kSiteC, 100, &mask);
  out[2] = mask;
  // Lanes >= 16 take a branch with a collective written earlier in the source
  // (site A line 10) while lanes < 16 go ahead to the collective after it
  // (site C line 30): A runs first, then all lanes meet at C.
  if (lane >= 16) (void)simd_sum(t, {"k.metal", 5, 1}, 0, &mask);
  out[3] = simd_sum(t, {"k.metal", 40, 1}, 1, &mask);
}

static void test_simd_exchange(bool random) {
  Kernel k;
  k.name = "simd";
  k.fn = k_simd;
  const uint32_t n = 80;  // 2 full simdgroups and one of 16 lanes
  std::vector<uint32_t> out(4 * n, 0xdead);
  Launch l = make_launch(&k, 2, n);
  bind(l, 0, out.data(), out.size() * 4);
  l.schedule.random = random;
  std::string err = execute(l);
  CHECK(err.empty(), "%s", err.c_str());
  bool ok0 = true, ok1 = true, ok2 = true, ok3 = true;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t lanes = i < 64 ? 32 : 16;
    uint32_t lane = i % 32;
    ok0 &= out[4 * i] == lanes * (lanes - 1) / 2;
    uint32_t want1 = lane < 10 ? 10 : 100 * (lanes - 10);
    ok1 &= out[4 * i + 1] == want1;
    uint32_t full = lanes == 32 ? 0xffffffffu : 0xffffu;
    uint32_t want2 = lane < 10 ? 0x3ffu : full & ~0x3ffu;
    ok2 &= out[4 * i + 2] == want2;
    ok3 &= out[4 * i + 3] == lanes;
  }
  CHECK(ok0, "uniform simd sum wrong (random=%d)", int(random));
  CHECK(ok1, "divergent simd sums wrong (random=%d)", int(random));
  CHECK(ok2, "active masks wrong (random=%d)", int(random));
  CHECK(ok3, "reconvergence wrong (random=%d)", int(random));
}

// --- random schedule exposes a missing barrier ---------------------------

// Shifts values left by one through threadgroup memory, but without the
// barrier between the read of tg[i+1] and the write of tg[i]. The sequential
// schedule runs thread i before thread i+1, so it reads the old value and the
// bug stays hidden; preemption at threadgroup accesses exposes it.
static void k_missing_barrier(mlxn_emu_thread* t) {
  uint32_t* tg = reinterpret_cast<uint32_t*>(t->threadgroup[0].ptr);
  uint32_t i = t->thread_index_in_threadgroup, n = t->threads_per_threadgroup[0];
  tg_access(t);
  tg[i] = i;
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
  uint32_t v = 0;
  if (i + 1 < n) {
    tg_access(t);
    v = tg[i + 1];
  }
  // missing: threadgroup_barrier here
  tg_access(t);
  tg[i] = v;
  t->hooks->threadgroup_barrier(t, kSiteB, 0);
  tg_access(t);
  reinterpret_cast<uint32_t*>(t->buffers[0].ptr)[t->thread_position_in_grid[0]] = tg[i];
}

static bool run_missing_barrier(bool random, uint64_t seed) {
  Kernel k;
  k.name = "missing_barrier";
  k.fn = k_missing_barrier;
  const uint32_t n = 128, groups = 4;
  std::vector<uint32_t> out(n * groups, 0);
  Launch l = make_launch(&k, groups, n);
  bind(l, 0, out.data(), out.size() * 4);
  bind_tg(l, 0, n * 4);
  l.schedule.random = random;
  l.schedule.seed = seed;
  std::string err = execute(l);
  CHECK(err.empty(), "%s", err.c_str());
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t i = 0; i < n; ++i)
      if (out[g * n + i] != (i + 1 < n ? i + 1 : 0)) return false;
  return true;
}

static void test_random_schedule() {
  CHECK(run_missing_barrier(false, 0), "sequential schedule should hide this missing barrier");
  CHECK(!run_missing_barrier(true, 1), "random schedule should expose the missing barrier");
  CHECK(!run_missing_barrier(true, 12345), "random schedule should expose the missing barrier");
}

// --- out-of-bounds report --------------------------------------------------

static void k_oob(mlxn_emu_thread* t) {
  const mlxn_emu_binding& b = t->buffers[1];
  uint64_t off = uint64_t(t->thread_position_in_grid[0]) * 4;
  float* p;
  if (off + 4 > b.length)
    p = static_cast<float*>(t->hooks->out_of_bounds(t, MLXN_EMU_SPACE_DEVICE, 1, int64_t(off), 4,
                                                     b.length, {"oob.metal", 7, 12}));
  else
    p = reinterpret_cast<float*>(b.ptr + off);
  *p = 1.0f;
}

static void test_out_of_bounds() {
  Kernel k;
  k.name = "oob_kernel";
  k.fn = k_oob;
  std::vector<float> buf(100, 0.f);
  Launch l = make_launch(&k, 2, 64);
  bind(l, 1, buf.data(), 400);
  std::string err = execute(l);
  CHECK(contains(err, "oob_kernel") && contains(err, "[[buffer(1)]]") && contains(err, "byte offset 400") &&
            contains(err, "binding length 400") && contains(err, "oob.metal:7:12") &&
            contains(err, "thread (36,0,0) of threadgroup (1,0,0)"),
        "got: %s", err.c_str());
  CHECK(buf[99] == 1.0f, "in-bounds writes were lost");
}

// --- static threadgroup variables ----------------------------------------

static void k_static(mlxn_emu_thread* t) {
  uint32_t* a = static_cast<uint32_t*>(t->hooks->threadgroup_static(t, 1, 64 * 4, 16));
  float* b = static_cast<float*>(t->hooks->threadgroup_static(t, 2, 8, 8));
  uint32_t i = t->thread_index_in_threadgroup;
  if (i == 0) b[0] = 0;  // zero-initialized anyway
  a[i] = i + 1;
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
  uint32_t sum = 0;
  for (uint32_t j = 0; j < 64; ++j) sum += a[j];
  reinterpret_cast<uint32_t*>(t->buffers[0].ptr)[t->thread_position_in_grid[0]] = sum + uint32_t(b[1]);
}

static void k_static_big(mlxn_emu_thread* t) {
  t->hooks->threadgroup_static(t, 1, 32768 - 1024 + 16, 16);
}

static void test_threadgroup_static() {
  Kernel k;
  k.name = "static_tg";
  k.fn = k_static;
  std::vector<uint32_t> out(128, 0);
  Launch l = make_launch(&k, 2, 64);
  bind(l, 0, out.data(), out.size() * 4);
  std::string err = execute(l);
  CHECK(err.empty(), "%s", err.c_str());
  bool ok = true;
  for (uint32_t v : out) ok &= v == 64 * 65 / 2;
  CHECK(ok, "static threadgroup variable not shared");
  CHECK(k.static_threadgroup_bytes.load() == 64 * 4 + 16, "static bytes %llu",
        (unsigned long long)k.static_threadgroup_bytes.load());

  Kernel big;
  big.name = "static_big";
  big.fn = k_static_big;
  Launch lb = make_launch(&big, 1, 32);
  bind_tg(lb, 0, 1024);
  err = execute(lb);
  CHECK(contains(err, "static_big") && contains(err, "over the limit") && contains(err, "1024 bytes dynamic"),
        "got: %s", err.c_str());
}

// --- fail hook --------------------------------------------------------------

static void k_fail(mlxn_emu_thread* t) {
  if (t->thread_index_in_threadgroup == 5) t->hooks->fail(t, "custom failure", {"f.metal", 3, 4});
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
}

static void test_fail() {
  Kernel k;
  k.name = "failing";
  k.fn = k_fail;
  Launch l = make_launch(&k, 3, 32);
  std::string err = execute(l);
  CHECK(contains(err, "failing") && contains(err, "custom failure") && contains(err, "f.metal:3:4"),
        "got: %s", err.c_str());
}

// --- launch checks -----------------------------------------------------------

static void k_nop(mlxn_emu_thread*) {}

static void test_check_launch() {
  Kernel k;
  k.name = "nop";
  k.fn = k_nop;
  k.buffer_indices = {0, 3};
  k.threadgroup_indices = {1};
  uint32_t x = 0;
  Launch l = make_launch(&k, 1, 1024);
  bind(l, 0, &x, 4);
  bind(l, 3, &x, 4);
  bind_tg(l, 1, 32768);
  CHECK(check_launch(l).empty(), "%s", check_launch(l).c_str());
  l.threads[0] = 1025;
  CHECK(contains(check_launch(l), "1025") && contains(check_launch(l), "1024"), "%s", check_launch(l).c_str());
  l.threads[0] = 32;
  l.threads[1] = 33;
  CHECK(contains(check_launch(l), "1056"), "%s", check_launch(l).c_str());
  l.threads[1] = 1;
  k.max_threads = 256;
  l.threads[0] = 512;
  CHECK(contains(check_launch(l), "pipeline's maximum of 256"), "%s", check_launch(l).c_str());
  l.threads[0] = 32;
  bind_tg(l, 1, 32768 + 4);
  CHECK(contains(check_launch(l), "exceeds the device limit of 32768"), "%s", check_launch(l).c_str());
  bind_tg(l, 1, 64);
  l.buffer_set &= ~(1u << 3);
  CHECK(contains(check_launch(l), "[[buffer(3)]] is not bound"), "%s", check_launch(l).c_str());
  bind(l, 3, &x, 4);
  l.threadgroup_set = 0;
  CHECK(contains(check_launch(l), "[[threadgroup(1)]]"), "%s", check_launch(l).c_str());
  bind_tg(l, 1, 64);
  l.grid[1] = 0;
  CHECK(contains(check_launch(l), "positive"), "%s", check_launch(l).c_str());
}

// --- many threadgroups over the pool ----------------------------------------

static void k_big_grid(mlxn_emu_thread* t) {
  uint32_t* out = reinterpret_cast<uint32_t*>(t->buffers[0].ptr);
  uint32_t gx = t->thread_position_in_grid[0], gy = t->thread_position_in_grid[1];
  out[gy * t->threads_per_grid[0] + gx] = gx * 3 + gy;
}

static void test_big_grid() {
  Kernel k;
  k.name = "big_grid";
  k.fn = k_big_grid;
  Launch l;
  l.kernel = &k;
  l.grid[0] = 37;
  l.grid[1] = 11;
  l.threads[0] = 8;
  l.threads[1] = 4;
  const uint32_t W = 37 * 8, H = 11 * 4;
  std::vector<uint32_t> out(W * H, 0);
  bind(l, 0, out.data(), out.size() * 4);
  std::string err = execute(l);
  CHECK(err.empty(), "%s", err.c_str());
  bool ok = true;
  for (uint32_t y = 0; y < H; ++y)
    for (uint32_t x = 0; x < W; ++x) ok &= out[y * W + x] == x * 3 + y;
  CHECK(ok, "2-D grid positions wrong");
}

// --- faults in kernel code fail the dispatch, not the process ---------------

static void k_null_write(mlxn_emu_thread* t) {
  if (t->thread_index_in_threadgroup == 3) {
    volatile float* p = reinterpret_cast<float*>(uintptr_t(t->buffers[0].length) * 0 + 16);
    *p = 1.0f;
  }
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
}

static uint32_t deep(volatile uint32_t depth) {
  volatile uint8_t frame[512];
  frame[0] = uint8_t(depth);
  return depth == 0 ? frame[0] : deep(depth + 1) + frame[0];
}

static void k_stack_overflow(mlxn_emu_thread* t) {
  if (t->thread_index_in_threadgroup == 1) reinterpret_cast<uint32_t*>(t->buffers[0].ptr)[0] = deep(1);
}

static void test_faults() {
  Kernel k;
  k.name = "null_write";
  k.fn = k_null_write;
  uint32_t x = 0;
  Launch l = make_launch(&k, 2, 32);
  bind(l, 0, &x, 4);
  std::string err = execute(l);
  CHECK(contains(err, "null_write") && contains(err, "invalid memory access") &&
            contains(err, "thread (3,0,0) of threadgroup (0,0,0)"),
        "got: %s", err.c_str());
  Kernel so;
  so.name = "overflow";
  so.fn = k_stack_overflow;
  Launch lo = make_launch(&so, 1, 4);
  bind(lo, 0, &x, 4);
  err = execute(lo);
  CHECK(contains(err, "overflow") && contains(err, "stack overflow") && contains(err, "thread (1,0,0)"),
        "got: %s", err.c_str());
  // The workers go on working.
  test_barrier_release(false);
  err = execute(l);
  CHECK(contains(err, "invalid memory access"), "second fault: %s", err.c_str());
}

// --- other synchronous signals raised by kernel code -------------------------

// buffers[0] holds {which thread faults, dividend, divisor}: read at run time,
// so the division is real.
static const int32_t* fault_args(mlxn_emu_thread* t) { return reinterpret_cast<const int32_t*>(t->buffers[0].ptr); }
static bool faulting_thread(mlxn_emu_thread* t) {
  return int32_t(t->thread_position_in_grid[0]) == fault_args(t)[0];
}

static void k_divide(mlxn_emu_thread* t) {
  volatile int32_t a = fault_args(t)[1], b = fault_args(t)[2];
  if (faulting_thread(t)) a = a / b;
  t->hooks->threadgroup_barrier(t, kSiteA, 0);
}

static void k_trap(mlxn_emu_thread* t) {
  if (faulting_thread(t)) __builtin_trap();
}

static void k_debugtrap(mlxn_emu_thread* t) {
  if (faulting_thread(t)) __builtin_debugtrap();
}

static void k_abort(mlxn_emu_thread* t) {
  if (faulting_thread(t)) std::abort();
}

static std::string run_fault(const char* name, void (*fn)(mlxn_emu_thread*), int32_t which, int32_t a = 0,
                             int32_t b = 0) {
  Kernel k;
  k.name = name;
  k.fn = fn;
  int32_t args[3] = {which, a, b};
  Launch l = make_launch(&k, 3, 32);
  bind(l, 0, args, sizeof args);
  return execute(l);
}

static void test_signal_faults() {
  std::string err;
#if defined(__x86_64__)
  err = run_fault("divide", k_divide, 37, 7, 0);
  CHECK(contains(err, "kernel 'divide': integer division by zero or overflow (SIGFPE)") &&
            contains(err, "thread (5,0,0) of threadgroup (1,0,0)"),
        "got: %s", err.c_str());
  err = run_fault("divide", k_divide, 70, INT32_MIN, -1);
  CHECK(contains(err, "integer division by zero or overflow (SIGFPE)") &&
            contains(err, "thread (6,0,0) of threadgroup (2,0,0)"),
        "INT_MIN / -1: %s", err.c_str());
  err = run_fault("trap", k_trap, 2);
  CHECK(contains(err, "kernel 'trap': illegal instruction (SIGILL") && contains(err, "thread (2,0,0)"), "got: %s",
        err.c_str());
#endif
  err = run_fault("debugtrap", k_debugtrap, 33);
  CHECK(contains(err, "kernel 'debugtrap': trap (SIGTRAP") && contains(err, "thread (1,0,0) of threadgroup (1,0,0)"),
        "got: %s", err.c_str());
  for (int32_t which : {95, 0, 95}) {
    err = run_fault("aborting", k_abort, which);
    CHECK(contains(err, "kernel 'aborting': abort (SIGABRT") &&
              contains(err, "thread (" + std::to_string(which % 32) + ",0,0) of threadgroup (" +
                                std::to_string(which / 32) + ",0,0)"),
          "got: %s", err.c_str());
  }
  // The workers go on working, and no kernel faults when none is asked to.
  test_barrier_release(false);
  test_barrier_release(true);
  err = run_fault("aborting", k_abort, -1);
  CHECK(err.empty(), "no thread aborts: %s", err.c_str());
}

// --- the time limit ends every dispatch within twice its value ------------------

// Loops forever through the out-of-bounds hook, as a translated kernel does
// on every access past its binding.
static void k_oob_forever(mlxn_emu_thread* t) {
  for (;;) {
    uint32_t* p = static_cast<uint32_t*>(
        t->hooks->out_of_bounds(t, MLXN_EMU_SPACE_DEVICE, 0, 4096, 4, t->buffers[0].length, kSiteB));
    *p = 1;
    if (t->random_schedule && --t->preempt_countdown == 0) t->hooks->preempt(t);
  }
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static void test_timeout_through_hooks(bool random) {
  Kernel k;
  k.name = "oob_forever";
  k.fn = k_oob_forever;
  uint32_t x = 0;
  for (int run = 0; run < 8; ++run) {
    Launch l = make_launch(&k, 4, 32);
    bind(l, 0, &x, 4);
    l.schedule.random = random;
    l.schedule.timeout_ms = 100;
    const auto t0 = std::chrono::steady_clock::now();
    std::string err = execute(l);
    const double ms = ms_since(t0);
    CHECK(contains(err, "kernel 'oob_forever': the dispatch did not finish within 100 ms"), "run %d: %s", run,
          err.c_str());
    CHECK(ms < 200, "run %d (random=%d) took %.1f ms, more than twice the limit of 100 ms", run, int(random), ms);
  }
  test_barrier_release(random);
}

// A dispatch queued behind another that holds every worker ends at its own
// limit, counted from its start, not when the other one ends.
static void test_timeout_queued() {
  Kernel k;
  k.name = "oob_forever";
  k.fn = k_oob_forever;
  uint32_t x = 0;
  Launch first = make_launch(&k, 4 * worker_count(), 32);
  bind(first, 0, &x, 4);
  first.schedule.timeout_ms = 400;
  std::string first_err;
  std::thread runner([&] { first_err = execute(first); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Launch second = first;
  second.schedule.timeout_ms = 100;
  const auto t0 = std::chrono::steady_clock::now();
  std::string err = execute(second);
  const double ms = ms_since(t0);
  runner.join();
  CHECK(contains(err, "did not finish within 100 ms"), "got: %s", err.c_str());
  CHECK(ms < 200, "the queued dispatch took %.1f ms under a 100 ms limit", ms);
  CHECK(contains(first_err, "did not finish within 400 ms"), "got: %s", first_err.c_str());
  test_barrier_release(false);
}

// Blocks every signal for 300 ms, then loops forever in kernel code.
static void k_deaf_then_forever(mlxn_emu_thread*) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  for (volatile int i = 0;; i = i + 1) {
  }
}

// The waiter signals a late worker every 2 ms. Real-time signals queue: were
// all those signals delivered at once, their handler frames would overflow
// the worker's alternate signal stack and kill the process. At most one is
// on its way to a worker, so the worker is abandoned once it unblocks them.
static void test_watchdog_signals_do_not_pile_up() {
  Kernel k;
  k.name = "deaf";
  k.fn = k_deaf_then_forever;
  Launch l = make_launch(&k, 1, 1);
  l.schedule.timeout_ms = 100;
  const auto t0 = std::chrono::steady_clock::now();
  std::string err = execute(l);
  const double ms = ms_since(t0);
  // Past twice the limit the dispatch gives up on the worker, still deaf.
  CHECK(contains(err, "kernel 'deaf': the dispatch did not finish within 100 ms") &&
            contains(err, "still running the kernel at twice the limit"),
        "got: %s", err.c_str());
  CHECK(ms < 250, "took %.1f ms", ms);
  // Once it hears the signal again, the worker leaves the kernel and is back
  // in the pool.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  test_barrier_release(false);
  test_barrier_release(true);
}

static void k_mark_first(mlxn_emu_thread* t) {
  if (t->thread_position_in_grid[0] == 0 && t->thread_position_in_grid[1] == 0)
    *reinterpret_cast<uint32_t*>(t->buffers[0].ptr) = 7;
}

static void test_timeout_huge_grid() {
  Kernel k;
  k.name = "mark_first";
  k.fn = k_mark_first;
  uint32_t x = 0;
  Launch l;
  l.kernel = &k;
  l.grid[0] = 65536;
  l.grid[1] = 65536;  // 2^32 threadgroups
  bind(l, 0, &x, 4);
  l.schedule.timeout_ms = 200;
  CHECK(check_launch(l).empty(), "%s", check_launch(l).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  std::string err = execute(l);
  const double ms = ms_since(t0);
  CHECK(contains(err, "kernel 'mark_first': the dispatch did not finish within 200 ms"), "got: %s", err.c_str());
  CHECK(ms >= 195 && ms < 400, "2^32 threadgroups under a 200 ms limit took %.1f ms", ms);
  CHECK(x == 7, "threadgroup (0,0,0) did not run");
  test_barrier_release(false);
}

static void test_grid_limits() {
  Kernel k;
  k.name = "nop";
  k.fn = k_nop;
  Launch l;
  l.kernel = &k;
  l.grid[0] = 1u << 31;
  l.grid[1] = 1u << 31;
  l.grid[2] = 4;  // 2^64 threadgroups: a 64-bit product would wrap to 0
  std::string err = check_launch(l);
  CHECK(contains(err, "kernel 'nop': grid of (2147483648,2147483648,4) threadgroups = 2^64 or more") &&
            contains(err, "limit of 2^63"),
        "got: %s", err.c_str());
  l.grid[2] = 2;  // 2^63 threadgroups: the most there may be
  CHECK(check_launch(l).empty(), "%s", check_launch(l).c_str());
  l.threads[2] = 2;  // 2^64 threads
  err = check_launch(l);
  CHECK(contains(err, "= 2^64 or more threads") && contains(err, "2^64-1"), "got: %s", err.c_str());
  l.grid[0] = l.grid[1] = l.grid[2] = 1;
  l.threads[2] = 1;
  l.grid[1] = 1u << 30;
  l.threads[1] = 4;  // 2^32 threads on axis y: thread_position_in_grid.y would wrap
  err = check_launch(l);
  CHECK(contains(err, "has 4294967296 threads on axis y") && contains(err, "2^32-1"), "got: %s", err.c_str());
  l.threads[1] = 3;
  CHECK(check_launch(l).empty(), "%s", check_launch(l).c_str());
}

int main() {
  std::printf("workers: %u\n", worker_count());
  test_barrier_release(false);
  test_barrier_release(true);
  test_early_exit();
  test_divergent_barrier(false);
  test_divergent_barrier(true);
  test_simd_exchange(false);
  test_simd_exchange(true);
  test_random_schedule();
  test_out_of_bounds();
  test_threadgroup_static();
  test_fail();
  test_check_launch();
  test_big_grid();
  test_faults();
  test_signal_faults();
  test_timeout_through_hooks(false);
  test_timeout_through_hooks(true);
  test_timeout_queued();
  test_watchdog_signals_do_not_pile_up();
  test_timeout_huge_grid();
  test_grid_limits();
  return check_summary();
}
