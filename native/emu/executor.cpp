#include "executor.h"

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <pthread.h>
#include <unistd.h>

#include <signal.h>
#include <sys/mman.h>
#if defined(__linux__)
#include <link.h>
#include <ucontext.h>
#endif

#include "fiber.h"
#include "util.h"

namespace mlxn::emu {

namespace {

// ---------------------------------------------------------------- errors --

// The error a dispatch reports: the one of the lowest (threadgroup, thread),
// so that the text does not depend on which OS thread got there first.
struct ErrorSlot {
  std::mutex mu;
  bool set = false;
  uint64_t group = 0;
  uint32_t thread = 0;
  std::string text;

  void offer(uint64_t g, uint32_t t, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu);
    if (!set || g < group || (g == group && t < thread)) {
      set = true;
      group = g;
      thread = t;
      text = msg;
    }
  }
};

std::string site_str(const mlxn_emu_site& s) {
  std::string out = s.file ? s.file : "<unknown>";
  out += ":" + std::to_string(s.line) + ":" + std::to_string(s.column);
  return out;
}

bool same_site(const mlxn_emu_site& a, const mlxn_emu_site& b) {
  if (a.line != b.line || a.column != b.column) return false;
  if (a.file == b.file) return true;
  if (!a.file || !b.file) return false;
  return std::strcmp(a.file, b.file) == 0;
}

// Source order of sites: among lanes of a simdgroup parked at different simd
// collectives, the one earliest in the source runs first, which is where
// structured control flow reconverges last (the branch body before the code
// after the branch).
bool site_before(const mlxn_emu_site& a, const mlxn_emu_site& b) {
  int c = std::strcmp(a.file ? a.file : "", b.file ? b.file : "");
  if (c != 0) return c < 0;
  if (a.line != b.line) return a.line < b.line;
  return a.column < b.column;
}

std::string xyz(const uint32_t v[3]) {
  return "(" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + ")";
}

const char* space_name(uint32_t space) {
  switch (space) {
    case MLXN_EMU_SPACE_DEVICE: return "device";
    case MLXN_EMU_SPACE_CONSTANT: return "constant";
    case MLXN_EMU_SPACE_THREADGROUP: return "threadgroup";
    default: return "unknown";
  }
}

// ------------------------------------------------------------------ rng --

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

// ------------------------------------------------------------------ job --

struct Job {
  Launch launch_copy;
  const Launch* launch = nullptr;
  uint64_t total = 0;                 // threadgroups
  std::atomic<uint64_t> next{0};      // next threadgroup to claim
  // Set on the first error and at the time limit: workers check it before
  // claiming each threadgroup and stop, so a failed dispatch of billions of
  // threadgroups ends as soon as the ones running end.
  std::atomic<bool> failed{false};
  // The kernel's code (Kernel::code_lo/hi), for the watchdog handler.
  uintptr_t code_lo = UINTPTR_MAX, code_hi = UINTPTR_MAX;
  std::mutex mu;
  std::condition_variable cv;
  // Under mu. Workers join a job only while it is in the pool's queue, and
  // the first worker to leave it (or the waiter at the time limit) takes it
  // out of the queue before setting `left`: so once `left` is set and
  // `active` is 0, no worker runs the job or ever will.
  uint32_t active = 0;                // workers in the job's claim loop
  bool left = false;
  ErrorSlot error;
  // The watchdog: set when the dispatch ran past its time limit; the workers
  // then abandon the threadgroups they run and the dispatch fails with
  // timeout_text.
  std::atomic<bool> timed_out{false};
  std::string timeout_text;  // written before timed_out is set
};

enum class State : uint8_t { Runnable, TgBarrier, SimdBarrier, Exchange, Exited, Failed, Faulted, TimedOut };

struct Worker;

struct Fiber {
  mlxn_emu_thread t;
  Context ctx;
  Worker* worker = nullptr;
  State state = State::Runnable;
  mlxn_emu_site site = {};
  const void* mine = nullptr;
  const void* all = nullptr;  // the gathered bytes of the last exchange
  uint32_t size = 0;
  uint32_t mask = 0;
  // Set while the fiber runs runtime code (a hook): neither the watchdog's
  // signal nor a fault abandons a fiber there (it may hold a lock, e.g.
  // malloc's or the error slot's).
  volatile sig_atomic_t in_hook = 0;
  std::vector<uint8_t> scratch;  // returned for out-of-bounds accesses
  int fault_signal = 0;          // State::Faulted: the signal, its si_code and address
  int fault_code = 0;
  void* fault_address = nullptr;
  uint32_t index = 0;            // in the threadgroup
};

struct StaticVar {
  uint32_t id;
  uint64_t offset;
  uint64_t size;
};

const mlxn_emu_hooks* hooks_table();

// Scheduler bookkeeping of one simdgroup, kept up to date as its lanes park
// and are released, so that releasing a simd collective costs O(lanes) and
// needs no scan of the threadgroup.
struct SimdGroup {
  uint32_t base = 0, lanes = 0;  // fibers [base, base + lanes)
  uint32_t runnable = 0;         // lanes in State::Runnable
  uint32_t parked = 0;           // bits: lanes parked at simd collectives
  bool mixed = false;            // parked lanes wait at more than one site or kind
  State kind = State::Exchange;  // of the first parked lane
  mlxn_emu_site site = {};       // of the first parked lane
  // The gathered bytes of the last exchange released in this simdgroup; its
  // lanes read them until their next hook call, and the next release happens
  // only when no lane of the simdgroup is runnable, so none is still reading.
  alignas(64) uint8_t gathered[kSimdWidth * 256];
};

// One OS thread of the pool. It owns the fiber stacks and the threadgroup
// memory of the threadgroup it runs.
struct Worker {
  Context sched;
  std::vector<std::unique_ptr<Stack>> stacks;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<SimdGroup>> sgs;
  // Threadgroup memory: dynamic bindings first, then static variables.
  alignas(64) uint8_t tg_memory[kMaxThreadgroupMemory + 64 * kMaxBindings];
  mlxn_emu_binding tg_bindings[kMaxBindings];
  uint64_t dynamic_bytes = 0;
  uint64_t static_bytes = 0;
  std::vector<StaticVar> statics;

  Job* job = nullptr;
  const Launch* launch = nullptr;
  // The OS thread's signal mask and floating-point environment outside any
  // handler: restored after a fiber left a signal handler by switching to the
  // scheduler. A handler that never returns never restores what it ran with:
  // abort() may raise SIGABRT with other signals blocked, and Linux runs a
  // handler with the default FP environment, the interrupted one being saved
  // in the signal frame that only a return from the handler restores.
  sigset_t signal_mask;
  fenv_t fp_env;
  uint64_t group_linear = 0;
  uint32_t group[3] = {0, 0, 0};
  uint32_t nthreads = 0;
  uint32_t nsimd = 0;
  bool group_failed = false;
  Rng rng{0};
  // The fiber that last gave control back to the scheduler (not the one the
  // scheduler resumed when that one handed over to the next: see leave).
  Fiber* last = nullptr;

  // Threadgroup-wide counts (see SimdGroup).
  uint32_t live = 0;          // threads not exited
  uint32_t at_barrier = 0;    // threads parked at threadgroup barriers
  const Fiber* barrier_first = nullptr;   // the first of them
  const Fiber* barrier_other = nullptr;   // one waiting at another site
  // Random schedule: runnable fibers, with each one's position in the list.
  std::vector<uint32_t> runnable;
  std::vector<uint32_t> runnable_pos;
  // Random schedule, per phase (from one barrier release to the next): in
  // priority mode the simdgroups run in the order of `priority`, one at a
  // time, so one simdgroup runs far ahead of the others.
  bool priority_mode = false;
  std::vector<uint32_t> priority;

  bool ensure_stacks(uint32_t n);
  void run_group(Job* j, uint64_t linear);
  void schedule();
  void resume(Fiber* f);
  void leave(Fiber* f);
  void after_resume(Fiber* f);
  bool release_simd();
  bool release_simdgroup(SimdGroup& g);
  void release_barrier();
  void new_phase();
  uint32_t pick_random();
  void make_runnable(uint32_t i);
  void fail_group(uint32_t thread, const std::string& msg);
  std::string where(const Fiber* f) const;
  uint32_t countdown();
};

void fiber_main(void* arg) {
  Fiber* f = static_cast<Fiber*>(arg);
  f->worker->launch->kernel->fn(&f->t);
  f->state = State::Exited;
  f->worker->leave(f);
  // Never resumed.
}

bool Worker::ensure_stacks(uint32_t n) {
  while (stacks.size() < n) {
    auto s = std::make_unique<Stack>();
    if (!s->allocate(kFiberStackBytes)) return false;
    stacks.push_back(std::move(s));
  }
  if (fibers.size() < n) fibers.resize(n);
  while (sgs.size() * kSimdWidth < n) sgs.push_back(std::make_unique<SimdGroup>());
  return true;
}

std::string Worker::where(const Fiber* f) const {
  return "thread " + xyz(f->t.thread_position_in_threadgroup) + " of threadgroup " + xyz(group);
}

void Worker::fail_group(uint32_t thread, const std::string& msg) {
  group_failed = true;
  job->error.offer(group_linear, thread, msg);
  job->failed.store(true, std::memory_order_relaxed);
}

// The fiber running on this OS thread, for the fault handler.
thread_local Fiber* tl_running = nullptr;

// A fiber that stops running (parked, exited, preempted) calls this. In the
// sequential schedule, when it is no longer runnable and the next fiber in
// index order is, it switches to that one directly: the scheduler's loop
// would resume exactly that fiber next, and going through the scheduler
// would cost a second context switch. Otherwise it switches to the scheduler.
void Worker::leave(Fiber* f) {
  if (!launch->schedule.random && f->state != State::Runnable && f->index + 1 < nthreads) {
    Fiber* g = &fibers[f->index + 1];
    if (g->state == State::Runnable && !group_failed && !job->timed_out.load(std::memory_order_relaxed)) {
      after_resume(f);
      tl_running = g;
      context_switch(&f->ctx, &g->ctx);
      return;  // resumed by whoever switched back to f, which set tl_running
    }
  }
  last = f;
  context_switch(&f->ctx, &sched);
}

// What a synchronous signal raised by kernel code means, for the dispatch's
// error.
std::string signal_text(int sig, int code) {
  switch (sig) {
    case SIGFPE:
      switch (code) {
        // x86-64 raises the same divide error for a zero divisor and for
        // INT_MIN / -1 (the quotient overflows).
        case FPE_INTDIV: return "integer division by zero or overflow (SIGFPE)";
        case FPE_INTOVF: return "integer overflow (SIGFPE)";
        case FPE_FLTDIV: return "floating-point division by zero (SIGFPE, a trapping FP exception)";
        case FPE_FLTOVF: return "floating-point overflow (SIGFPE, a trapping FP exception)";
        case FPE_FLTUND: return "floating-point underflow (SIGFPE, a trapping FP exception)";
        case FPE_FLTRES: return "inexact floating-point result (SIGFPE, a trapping FP exception)";
        case FPE_FLTINV: return "invalid floating-point operation (SIGFPE, a trapping FP exception)";
        default: return "arithmetic exception (SIGFPE, si_code " + std::to_string(code) + ")";
      }
    case SIGILL: return "illegal instruction (SIGILL: __builtin_trap, or code the CPU does not support)";
    case SIGTRAP: return "trap (SIGTRAP: a breakpoint such as __builtin_debugtrap, or __builtin_trap on aarch64)";
    case SIGABRT: return "abort (SIGABRT: abort() or a failed assert)";
    case SIGBUS: return "bus error (SIGBUS)";
    default: return "invalid memory access (SIGSEGV)";
  }
}

// Runs fiber f until control comes back to the scheduler: then `last` is the
// fiber that gave it back (f, or a later one f handed over to).
void Worker::resume(Fiber* f) {
  tl_running = f;
  context_switch(&sched, &f->ctx);
  tl_running = nullptr;
  f = last;
  if (f->state == State::TimedOut) {
    pthread_sigmask(SIG_SETMASK, &signal_mask, nullptr);
    fesetenv(&fp_env);
    fail_group(f->index, job->timeout_text + "; " + where(f) + " was running kernel code");
    return;
  }
  if (f->state == State::Faulted) {
    pthread_sigmask(SIG_SETMASK, &signal_mask, nullptr);
    fesetenv(&fp_env);
    const int sig = f->fault_signal;
    char addr_text[32];
    std::snprintf(addr_text, sizeof addr_text, "%p", f->fault_address);
    std::string what;
    if (sig == SIGSEGV || sig == SIGBUS) {
      const uint8_t* addr = static_cast<const uint8_t*>(f->fault_address);
      const uint8_t* stack = static_cast<const uint8_t*>(stacks[f->index]->base());
      if (addr < stack && addr >= stack - 65536)
        what = "stack overflow (each GPU thread has " + std::to_string(kFiberStackBytes / 1024) + " KiB of stack)";
      else
        what = std::string(sig == SIGBUS ? "bus error" : "invalid memory access") + " at address " + addr_text +
               " (an unchecked pointer, e.g. one taken with & from threadgroup memory?)";
    } else {
      // si_addr is the faulting instruction (0 for an x86-64 breakpoint).
      what = signal_text(sig, f->fault_code);
      if (f->fault_address && sig != SIGABRT) what += std::string(" at instruction ") + addr_text;
    }
    fail_group(f->index, "kernel '" + launch->kernel->name + "': " + what + " in " + where(f));
  }
}

// Synchronous signals raised by kernel code fail the dispatch instead of the
// process: SIGSEGV / SIGBUS (an unchecked raw pointer, a stack overflow into
// a fiber's guard page), SIGFPE (integer division by zero or INT_MIN / -1 on
// x86-64), SIGILL (__builtin_trap on x86-64), SIGTRAP (a breakpoint),
// SIGABRT (abort(), a failed assert). The handler, on the worker's alternate
// signal stack, marks the fiber Faulted and switches to the scheduler, never
// returning into the kernel. It does so only for a signal that the fiber's
// own code raised (see synchronous) while the fiber runs kernel code, not a
// hook: a hook may hold a lock (malloc's, the error slot's), and a fault
// there is the runtime's own bug. Everything else goes to the handler that
// was installed before (Bun's crash handler, say), as if ours were not there.
//
// abort() and assert are safe to leave this way with glibc: abort releases
// its lock before it raises SIGABRT and holds none while the handler runs;
// __assert_fail has finished printing (and released stderr's lock) before it
// calls abort. The signal mask the handler ran with is replaced by the
// worker's own when the scheduler gets control back (Worker::signal_mask).
constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT};
constexpr int kFaultSignalCount = int(sizeof kFaultSignals / sizeof kFaultSignals[0]);
struct sigaction g_prev_fault[kFaultSignalCount];

const struct sigaction* prev_fault_action(int sig) {
  for (int i = 0; i < kFaultSignalCount; ++i)
    if (kFaultSignals[i] == sig) return &g_prev_fault[i];
  return nullptr;
}

// Whether the signal comes from the instruction the thread executed (the
// kernel sets si_code > 0: a fault, a trap) or from the thread raising it at
// itself (raise, abort: tgkill from this process), not from kill(2) or
// another process.
bool synchronous(const siginfo_t* info) {
#if defined(__linux__)
  return info && (info->si_code > 0 || (info->si_code == SI_TKILL && info->si_pid == getpid()));
#else
  return info != nullptr;
#endif
}

void fault_handler(int sig, siginfo_t* info, void* uc) {
  Fiber* f = tl_running;
  if (f && !f->in_hook && synchronous(info)) {
    tl_running = nullptr;
    f->state = State::Faulted;
    f->fault_signal = sig;
    f->fault_code = info->si_code;
    f->fault_address = info->si_addr;
    f->worker->last = f;
    // SA_NODEFER keeps the signal unblocked although this handler never returns.
    context_switch(&f->ctx, &f->worker->sched);
  }
  const struct sigaction* prev = prev_fault_action(sig);
  if (prev && (prev->sa_flags & SA_SIGINFO)) {
    if (prev->sa_sigaction) return prev->sa_sigaction(sig, info, uc);
  } else if (prev && prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN && prev->sa_handler) {
    return prev->sa_handler(sig);
  }
  // No handler before ours: put the previous disposition back. A fault
  // returns to the faulting instruction, which raises the signal again and
  // terminates as it would have without us; a breakpoint (the instruction
  // after it would run) or a raised signal is raised again.
  if (prev) sigaction(sig, prev, nullptr);
  else signal(sig, SIG_DFL);
  const bool refaults = info && info->si_code > 0 && sig != SIGTRAP;
  if (!refaults) raise(sig);
}

void install_fault_handler() {
  if (const char* e = std::getenv("MLX_NATIVE_EMU_NO_SIGNALS"); e && *e == '1') return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kFaultSignalCount; ++i) sigaction(kFaultSignals[i], &sa, &g_prev_fault[i]);
}

// Each worker handles faults on its own alternate stack: a fiber that
// overflowed its stack has none left to run the handler on.
void install_alt_stack() {
  const size_t size = 64 * 1024;
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return;
  stack_t ss;
  ss.ss_sp = m;
  ss.ss_size = size;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
}

// The watchdog: a kernel that never reaches a hook (an infinite loop) keeps
// its worker in kernel code, so the dispatch's waiter, once the time limit is
// over, sends this signal to the workers that run the dispatch, again every
// 2 ms (at most one on its way to each worker) until they have all left it. On a fiber interrupted at an instruction
// of the kernel's own library the handler marks it TimedOut and switches to
// the scheduler, never returning into the kernel (as the fault handler does);
// also in libm, which kernels call for their math and which takes no locks.
// Anywhere else it returns and waits for the next signal: the scheduler, a
// hook or other code a kernel calls (libc, the dynamic loader resolving a
// thread-local on its first use) may hold a lock that an abandoned fiber
// would hold forever. Those places end the dispatch themselves: the
// scheduler checks Job::timed_out between fibers, every hook on its way back
// into kernel code (InHook), and the workers before each threadgroup.
int g_watchdog_signal = 0;
struct sigaction g_prev_watchdog;

// The instruction the signal interrupted, or 0 where unknown.
uintptr_t interrupted_pc(const void* uc) {
#if defined(__linux__) && defined(__x86_64__)
  return uintptr_t(static_cast<const ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__linux__) && defined(__aarch64__)
  return uintptr_t(static_cast<const ucontext_t*>(uc)->uc_mcontext.pc);
#else
  (void)uc;
  return 0;
#endif
}

// libm's executable segments (Pool() looks them up; empty when not found).
uintptr_t g_libm_lo = UINTPTR_MAX, g_libm_hi = UINTPTR_MAX;

bool in_kernel_code(const Job* job, const void* uc) {
  if (job->code_lo == UINTPTR_MAX) return true;  // the kernel's code range is unknown
  const uintptr_t pc = interrupted_pc(uc);
  return pc == 0 || (pc >= job->code_lo && pc < job->code_hi) || (pc >= g_libm_lo && pc < g_libm_hi);
}

// The worker's Slot::signaled: set by the waiter when it sends the signal,
// cleared by the handler, so that at most one signal is on its way to a
// worker. Real-time signals queue: a worker that got no CPU time for a while
// would otherwise take every signal sent meanwhile at once, each handler
// frame on top of the last, and overflow its alternate signal stack.
thread_local std::atomic<bool>* tl_watchdog_pending = nullptr;

void watchdog_handler(int sig, siginfo_t* info, void* uc) {
  if (std::atomic<bool>* pending = tl_watchdog_pending) pending->store(false, std::memory_order_relaxed);
  Fiber* f = tl_running;
  if (f && !f->in_hook && f->worker->job && f->worker->job->timed_out.load(std::memory_order_acquire) &&
      in_kernel_code(f->worker->job, uc)) {
    tl_running = nullptr;
    f->state = State::TimedOut;
    f->worker->last = f;
    context_switch(&f->ctx, &f->worker->sched);
  }
  const bool ours = info && info->si_code == SI_TKILL && info->si_pid == getpid();
  if (ours) return;
  if (g_prev_watchdog.sa_flags & SA_SIGINFO) {
    if (g_prev_watchdog.sa_sigaction) g_prev_watchdog.sa_sigaction(sig, info, uc);
  } else if (g_prev_watchdog.sa_handler != SIG_DFL && g_prev_watchdog.sa_handler != SIG_IGN &&
             g_prev_watchdog.sa_handler) {
    g_prev_watchdog.sa_handler(sig);
  }
}

// Takes a real-time signal that nothing in the process handles yet.
void install_watchdog_handler() {
  if (const char* e = std::getenv("MLX_NATIVE_EMU_NO_SIGNALS"); e && *e == '1') return;
  for (int sig = SIGRTMAX - 2; sig >= SIGRTMIN + 2; --sig) {
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) != 0) continue;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = watchdog_handler;
    // Blocked while the handler runs (no SA_NODEFER): a handler that
    // abandons its fiber leaves it blocked until the scheduler restores the
    // worker's mask (Worker::signal_mask).
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &g_prev_watchdog) == 0) {
      g_watchdog_signal = sig;
      return;
    }
  }
}

void Worker::run_group(Job* j, uint64_t linear) {
  job = j;
  launch = j->launch;
  const Launch& l = *launch;
  group_linear = linear;
  group[0] = uint32_t(linear % l.grid[0]);
  group[1] = uint32_t((linear / l.grid[0]) % l.grid[1]);
  group[2] = uint32_t(linear / (uint64_t(l.grid[0]) * l.grid[1]));
  nthreads = l.threads[0] * l.threads[1] * l.threads[2];
  group_failed = false;
  if (!ensure_stacks(nthreads)) {
    fail_group(0, "kernel '" + l.kernel->name + "': cannot map fiber stacks (out of memory)");
    return;
  }

  // Dynamic threadgroup memory: 16-byte aligned slices, filled with 0xFF so
  // that a read before any write gives NaN for floats instead of a lucky 0.
  uint64_t off = 0;
  for (uint32_t i = 0; i < kMaxBindings; ++i) {
    if (l.threadgroup_set & (1u << i)) {
      tg_bindings[i].ptr = tg_memory + off;
      tg_bindings[i].length = l.threadgroup_length[i];
      std::memset(tg_memory + off, 0xFF, l.threadgroup_length[i]);
      off += (l.threadgroup_length[i] + 15) & ~uint64_t(15);
    } else {
      tg_bindings[i].ptr = nullptr;
      tg_bindings[i].length = 0;
    }
  }
  dynamic_bytes = off;
  static_bytes = 0;
  statics.clear();

  if (l.schedule.random) rng = Rng(l.schedule.seed ^ (linear * 0xd1342543de82ef95ull));

  const uint32_t tx = l.threads[0], ty = l.threads[1];
  nsimd = (nthreads + kSimdWidth - 1) / kSimdWidth;
  for (uint32_t s = 0; s < nsimd; ++s) {
    SimdGroup& g = *sgs[s];
    g.base = s * kSimdWidth;
    g.lanes = std::min(kSimdWidth, nthreads - g.base);
    g.runnable = g.lanes;
    g.parked = 0;
    g.mixed = false;
  }
  live = nthreads;
  at_barrier = 0;
  barrier_first = barrier_other = nullptr;
  for (uint32_t i = 0; i < nthreads; ++i) {
    Fiber& f = fibers[i];
    f.worker = this;
    f.state = State::Runnable;
    f.index = i;
    f.in_hook = 0;
    mlxn_emu_thread& t = f.t;
    t.hooks = hooks_table();
    t.buffers = l.buffers;
    t.threadgroup = tg_bindings;
    t.kernel_name = l.kernel->name.c_str();
    t.thread_position_in_threadgroup[0] = i % tx;
    t.thread_position_in_threadgroup[1] = (i / tx) % ty;
    t.thread_position_in_threadgroup[2] = i / (tx * ty);
    for (int d = 0; d < 3; ++d) {
      t.threadgroup_position_in_grid[d] = group[d];
      t.threads_per_threadgroup[d] = l.threads[d];
      t.threadgroups_per_grid[d] = l.grid[d];
      t.threads_per_grid[d] = l.grid[d] * l.threads[d];
      t.thread_position_in_grid[d] = group[d] * l.threads[d] + t.thread_position_in_threadgroup[d];
    }
    t.thread_index_in_threadgroup = i;
    t.thread_index_in_simdgroup = i % kSimdWidth;
    t.simdgroup_index_in_threadgroup = i / kSimdWidth;
    t.simdgroups_per_threadgroup = nsimd;
    t.threads_per_simdgroup = kSimdWidth;
    t.random_schedule = l.schedule.random ? 1u : 0u;
    t.preempt_countdown = l.schedule.random ? countdown() : UINT32_MAX;
    t.runtime = &f;
    context_init(&f.ctx, stacks[i].get(), fiber_main, &f);
  }

  schedule();

  uint64_t used = static_bytes;
  uint64_t seen = l.kernel->static_threadgroup_bytes.load(std::memory_order_relaxed);
  while (used > seen &&
         !l.kernel->static_threadgroup_bytes.compare_exchange_weak(seen, used, std::memory_order_relaxed)) {
  }
}

// Random schedule: how many device/threadgroup accesses a thread makes before
// its next preemption point. Mostly short runs (1-8 accesses), so threads
// interleave finely; one in four runs is long (up to 256), so that a thread
// also gets far ahead of the others between two barriers.
uint32_t Worker::countdown() {
  const uint64_t r = rng.next();
  return (r & 3) == 0 ? 1 + uint32_t((r >> 8) % 256) : 1 + uint32_t((r >> 8) % 8);
}

void Worker::make_runnable(uint32_t i) {
  Fiber& f = fibers[i];
  f.state = State::Runnable;
  ++sgs[i / kSimdWidth]->runnable;
  if (launch->schedule.random) {
    runnable_pos[i] = uint32_t(runnable.size());
    runnable.push_back(i);
  }
}

// Random schedule: a new phase starts with the threadgroup and after each
// threadgroup barrier. Half the phases pick any runnable thread at each step
// (fine interleavings, within and across simdgroups); the other half run the
// simdgroups one after the other in a random order (a simdgroup runs ahead
// of the others through collectives and accesses until it blocks), with an
// occasional step of another simdgroup.
void Worker::new_phase() {
  priority_mode = nsimd > 1 && (rng.next() & 1);
  if (!priority_mode) return;
  priority.resize(nsimd);
  for (uint32_t s = 0; s < nsimd; ++s) priority[s] = s;
  for (uint32_t s = nsimd - 1; s > 0; --s) std::swap(priority[s], priority[rng.below(s + 1)]);
}

uint32_t Worker::pick_random() {
  if (priority_mode && rng.below(16) != 0) {
    for (uint32_t s : priority) {
      const SimdGroup& g = *sgs[s];
      if (g.runnable == 0) continue;
      uint32_t k = rng.below(g.runnable);
      for (uint32_t i = g.base; i < g.base + g.lanes; ++i)
        if (fibers[i].state == State::Runnable && k-- == 0) return i;
    }
  }
  return runnable[rng.below(uint32_t(runnable.size()))];
}

// Updates the counts after fiber f ran and stopped (parked, exited or was
// preempted). Random schedule: a simd collective whose simdgroup has no
// runnable lane left is released at once, so that simdgroup goes on while
// the others may still be behind.
void Worker::after_resume(Fiber* f) {
  if (f->state == State::Runnable || group_failed) return;
  SimdGroup& g = *sgs[f->index / kSimdWidth];
  --g.runnable;
  const bool random = launch->schedule.random;
  if (random) {
    uint32_t pos = runnable_pos[f->index];
    uint32_t last = runnable.back();
    runnable[pos] = last;
    runnable_pos[last] = pos;
    runnable.pop_back();
  }
  switch (f->state) {
    case State::Exited:
      --live;
      break;
    case State::TgBarrier:
      ++at_barrier;
      if (!barrier_first) barrier_first = f;
      else if (!barrier_other && !same_site(f->site, barrier_first->site)) barrier_other = f;
      break;
    case State::SimdBarrier:
    case State::Exchange:
      if (g.parked == 0) {
        g.kind = f->state;
        g.site = f->site;
        g.mixed = false;
      } else if (f->state != g.kind || !same_site(f->site, g.site)) {
        g.mixed = true;
      }
      g.parked |= 1u << (f->index - g.base);
      break;
    default:
      break;
  }
  if (random && g.runnable == 0 && g.parked != 0) release_simdgroup(g);
}

// Runs the threadgroup's fibers until all have exited or the group failed.
// Fibers run until they park (barrier, simd collective), exit, or (random
// schedule) are preempted. Sequential: fibers run in index order, each until
// it parks; when none is runnable, one simd collective per simdgroup whose
// lanes wait at one is released, else the threadgroup barrier if every live
// thread waits at the same one, else the dispatch fails naming two different
// sites. Random: see new_phase and after_resume.
void Worker::schedule() {
  const bool random = launch->schedule.random;
  if (random) {
    runnable.clear();
    runnable_pos.resize(nthreads);
    for (uint32_t i = 0; i < nthreads; ++i) {
      runnable_pos[i] = i;
      runnable.push_back(i);
    }
    new_phase();
  }
  for (;;) {
    if (!random) {
      for (uint32_t i = 0; i < nthreads && !group_failed; ++i) {
        Fiber& f = fibers[i];
        while (f.state == State::Runnable && !group_failed) {
          resume(&f);
          after_resume(last);
        }
      }
    } else {
      while (!runnable.empty() && !group_failed) {
        Fiber& f = fibers[pick_random()];
        resume(&f);
        after_resume(last);
      }
    }
    if (!group_failed && job->timed_out.load(std::memory_order_relaxed))
      fail_group(0, job->timeout_text + "; the threads of threadgroup " + xyz(group) +
                        " kept reaching barriers or simd collectives");
    if (group_failed) return;  // fibers are abandoned; their stacks are reused
    if (live == 0) return;
    if (release_simd()) continue;

    // Every live thread waits at a threadgroup barrier.
    if (barrier_other) {
      const Fiber* first = barrier_first;
      const Fiber* other = barrier_other;
      if (other->index < first->index) std::swap(first, other);
      fail_group(0, "kernel '" + launch->kernel->name + "': threadgroup_barrier divergence: " +
                        where(first) + " waits at " + site_str(first->site) + " while " +
                        where(other) + " waits at " + site_str(other->site) +
                        " (every live thread of a threadgroup must reach the same barrier)");
      return;
    }
    release_barrier();
  }
}

void Worker::release_barrier() {
  at_barrier = 0;
  barrier_first = barrier_other = nullptr;
  for (uint32_t i = 0; i < nthreads; ++i)
    if (fibers[i].state == State::TgBarrier) make_runnable(i);
  if (launch->schedule.random) new_phase();
}

// In each simdgroup whose lanes are parked at simd collectives, releases the
// lanes parked at the earliest such site (in source order) together.
// Returns whether any lane was released.
bool Worker::release_simd() {
  bool any = false;
  for (uint32_t s = 0; s < nsimd && !group_failed; ++s)
    if (sgs[s]->parked != 0) any |= release_simdgroup(*sgs[s]);
  return any;
}

// Releases the lanes of g parked at the earliest site (all of them when they
// wait at one site: the common case, with no scan), handing an exchange's
// lanes the gathered values.
bool Worker::release_simdgroup(SimdGroup& g) {
  uint32_t mask = g.parked;
  State kind = g.kind;
  mlxn_emu_site site = g.site;
  if (g.mixed) {
    const Fiber* pick = nullptr;
    for (uint32_t m = g.parked; m; m &= m - 1) {
      const Fiber& f = fibers[g.base + __builtin_ctz(m)];
      if (!pick || site_before(f.site, pick->site)) pick = &f;
    }
    kind = pick->state;
    site = pick->site;
    mask = 0;
    for (uint32_t m = g.parked; m; m &= m - 1) {
      const uint32_t lane = __builtin_ctz(m);
      const Fiber& f = fibers[g.base + lane];
      if (f.state == kind && same_site(f.site, site)) mask |= 1u << lane;
    }
  }
  if (kind == State::Exchange) {
    const uint32_t size = fibers[g.base + __builtin_ctz(mask)].size;
    for (uint32_t m = mask; m; m &= m - 1) {
      const uint32_t lane = __builtin_ctz(m);
      const Fiber& f = fibers[g.base + lane];
      if (f.size != size) {
        fail_group(g.base + lane, "kernel '" + launch->kernel->name + "': simd collective at " +
                                      site_str(site) + " exchanged different sizes across lanes");
        return true;
      }
    }
    if (mask != ~0u) std::memset(g.gathered, 0, size_t(size) * kSimdWidth);
    for (uint32_t m = mask; m; m &= m - 1) {
      const uint32_t lane = __builtin_ctz(m);
      std::memcpy(g.gathered + size_t(lane) * size, fibers[g.base + lane].mine, size);
    }
  }
  for (uint32_t m = mask; m; m &= m - 1) {
    const uint32_t i = g.base + __builtin_ctz(m);
    fibers[i].mask = mask;
    fibers[i].all = g.gathered;
    make_runnable(i);
  }
  g.parked &= ~mask;
  if (g.parked != 0) {
    // Recompute the first site and `mixed` among the lanes still parked.
    g.mixed = false;
    const Fiber* first = nullptr;
    for (uint32_t m = g.parked; m; m &= m - 1) {
      const Fiber& f = fibers[g.base + __builtin_ctz(m)];
      if (!first) {
        first = &f;
        g.kind = f.state;
        g.site = f.site;
      } else if (f.state != g.kind || !same_site(f.site, g.site)) {
        g.mixed = true;
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------- hooks --

inline Fiber* fiber_of(mlxn_emu_thread* t) { return static_cast<Fiber*>(t->runtime); }

inline void park(Fiber* f) { f->worker->leave(f); }

// Marks the fiber as running runtime code for the duration of a hook (the
// fault and watchdog handlers leave such a fiber alone). Every hook declares
// it first, so that it is destroyed last, when the hook's locks and
// allocations are released: if the dispatch is past its time limit by then,
// the fiber ends there instead of going back into kernel code. A kernel that
// loops forever through a hook (out-of-bounds accesses, preemption points)
// thus ends even when the watchdog's signals always land in the hook.
struct InHook {
  Fiber* f;
  explicit InHook(Fiber* fb) : f(fb) { f->in_hook = 1; std::atomic_signal_fence(std::memory_order_seq_cst); }
  ~InHook() {
    if (f->worker->job->timed_out.load(std::memory_order_relaxed)) [[unlikely]] {
      f->state = State::TimedOut;
      park(f);  // never resumed: the scheduler fails the threadgroup
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    f->in_hook = 0;
  }
};

// Parks the fiber of t at a barrier of this kind, reached at site.
inline void park_at_barrier(mlxn_emu_thread* t, mlxn_emu_site site, State barrier) {
  Fiber* f = fiber_of(t);
  InHook h(f);
  f->state = barrier;
  f->site = site;
  park(f);
}

void hook_threadgroup_barrier(mlxn_emu_thread* t, mlxn_emu_site site, uint32_t) { park_at_barrier(t, site, State::TgBarrier); }

void hook_simdgroup_barrier(mlxn_emu_thread* t, mlxn_emu_site site, uint32_t) { park_at_barrier(t, site, State::SimdBarrier); }

const void* hook_simd_exchange(mlxn_emu_thread* t, mlxn_emu_site site, const void* mine, uint32_t size,
                               uint32_t* mask) {
  Fiber* f = fiber_of(t);
  InHook h(f);
  f->state = State::Exchange;
  f->site = site;
  f->mine = mine;
  f->size = size;
  park(f);
  *mask = f->mask;
  return f->all;
}

[[noreturn]] void hook_fail(mlxn_emu_thread* t, const char* message, mlxn_emu_site site) {
  Fiber* f = fiber_of(t);
  f->in_hook = 1;
  Worker* w = f->worker;
  w->fail_group(t->thread_index_in_threadgroup,
                "kernel '" + w->launch->kernel->name + "': " + (message ? message : "failure") +
                    " at " + site_str(site) + " (" + w->where(f) + ")");
  f->state = State::Failed;
  park(f);
  __builtin_trap();  // a failed fiber is never resumed
}

void* hook_out_of_bounds(mlxn_emu_thread* t, uint32_t space, uint32_t binding, int64_t offset,
                         uint64_t size, uint64_t length, mlxn_emu_site site) {
  Fiber* f = fiber_of(t);
  InHook h(f);
  Worker* w = f->worker;
  std::string what;
  if (space == MLXN_EMU_SPACE_THREADGROUP && (binding & MLXN_EMU_BINDING_STATIC))
    what = "threadgroup variable #" + std::to_string(binding & ~MLXN_EMU_BINDING_STATIC) +
           " (declared in the kernel body)";
  else if (space == MLXN_EMU_SPACE_THREADGROUP)
    what = "threadgroup memory [[threadgroup(" + std::to_string(binding) + ")]]";
  else
    what = std::string(space_name(space)) + " buffer [[buffer(" + std::to_string(binding) + ")]]";
  w->job->error.offer(w->group_linear, t->thread_index_in_threadgroup,
                      "kernel '" + w->launch->kernel->name + "': out-of-bounds access to " + what +
                          " at byte offset " + std::to_string(offset) + " (access of " +
                          std::to_string(size) + " bytes, binding length " + std::to_string(length) +
                          ") at " + site_str(site) + " (" + w->where(f) + ")");
  if (f->scratch.size() < size) f->scratch.assign(std::max<uint64_t>(size, 256), 0);
  return f->scratch.data();
}

void hook_preempt(mlxn_emu_thread* t) {
  Fiber* f = fiber_of(t);
  InHook h(f);
  if (!t->random_schedule) {
    t->preempt_countdown = UINT32_MAX;
    return;
  }
  t->preempt_countdown = f->worker->countdown();
  park(f);  // still Runnable: the scheduler picks any runnable thread next
}

void* hook_threadgroup_static(mlxn_emu_thread* t, uint32_t id, uint64_t size, uint64_t align) {
  Fiber* f = fiber_of(t);
  InHook h(f);
  Worker* w = f->worker;
  for (const StaticVar& v : w->statics)
    if (v.id == id) return w->tg_memory + v.offset;
  // Each variable starts 16-byte aligned and takes its size rounded up to 16,
  // so that the total does not depend on the order the threads reach the
  // declarations in, and equals what the kernel library computes before the
  // first run (mlxn::static_threadgroup_bytes).
  if (align == 0 || (align & (align - 1)) != 0 || align < 16) align = 16;
  uint64_t off = (w->dynamic_bytes + w->static_bytes + align - 1) & ~(align - 1);
  uint64_t new_static = off + ((size + 15) & ~uint64_t(15)) - w->dynamic_bytes;
  if (w->dynamic_bytes + new_static > kMaxThreadgroupMemory) {
    w->fail_group(t->thread_index_in_threadgroup,
                  "kernel '" + w->launch->kernel->name +
                      "': threadgroup memory over the limit: " + std::to_string(w->dynamic_bytes) +
                      " bytes dynamic + " + std::to_string(new_static) + " bytes static > " +
                      std::to_string(kMaxThreadgroupMemory));
    f->state = State::Failed;
    park(f);
    __builtin_trap();
  }
  std::memset(w->tg_memory + off, 0, size);
  w->statics.push_back({id, off, size});
  w->static_bytes = new_static;
  return w->tg_memory + off;
}

const mlxn_emu_hooks kHooks = {
    hook_threadgroup_barrier, hook_simdgroup_barrier, hook_simd_exchange, hook_out_of_bounds,
    hook_preempt,             hook_threadgroup_static, hook_fail,
};

const mlxn_emu_hooks* hooks_table() { return &kHooks; }

// ----------------------------------------------------------------- pool --

// The executable segments of the loaded object that contains `addr` (when
// not null) or whose file name starts with `name` (when not null): from the
// lowest to the highest address of any of them. Unchanged when not found.
void code_range(const void* addr, const char* name, uintptr_t* lo, uintptr_t* hi) {
#if defined(__linux__)
  struct Search {
    uintptr_t addr;
    const char* name;
    uintptr_t lo, hi;
    bool found;
  } s{reinterpret_cast<uintptr_t>(addr), name, UINTPTR_MAX, 0, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* p) -> int {
        auto* s = static_cast<Search*>(p);
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        bool has = false;
        if (s->name && info->dlpi_name) {
          const char* slash = std::strrchr(info->dlpi_name, '/');
          const char* base = slash ? slash + 1 : info->dlpi_name;
          has = std::strncmp(base, s->name, std::strlen(s->name)) == 0;
        }
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          const uintptr_t b = info->dlpi_addr + ph.p_vaddr, e = b + ph.p_memsz;
          has |= s->addr != 0 && s->addr >= b && s->addr < e;
          lo = std::min(lo, b);
          hi = std::max(hi, e);
        }
        if (!has || hi == 0) return 0;
        s->lo = lo;
        s->hi = hi;
        s->found = true;
        return 1;
      },
      &s);
  if (s.found) {
    *lo = s.lo;
    *hi = s.hi;
  }
#else
  (void)addr;
  (void)name;
  (void)lo;
  (void)hi;
#endif
}

class Pool {
 public:
  static Pool& get() {
    // Never destroyed: its threads may outlive static destruction order.
    static Pool* pool = new Pool();
    return *pool;
  }

  uint32_t size() const { return uint32_t(threads_.size()); }

  std::string run(const Launch& l, bool* left_running) {
    auto job = std::make_shared<Job>();
    // The job owns a copy: after a time-out that cannot stop a worker, the
    // worker may still run the kernel when this returns.
    job->launch_copy = l;
    job->launch = &job->launch_copy;
    job->total = uint64_t(l.grid[0]) * l.grid[1] * l.grid[2];  // check_launch: no overflow
    if (job->total == 0) return std::string();
    lookup_code_range(l.kernel, job.get());
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lock(job->mu);
    auto done = [&] { return job->left && job->active == 0; };
    const uint64_t ms = l.schedule.timeout_ms;
    if (ms == 0) {
      job->cv.wait(lock, done);
    } else if (!job->cv.wait_for(lock, std::chrono::milliseconds(ms), done)) {
      job->timeout_text = "kernel '" + l.kernel->name + "': the dispatch did not finish within " +
                          std::to_string(ms) + " ms (MLX_NATIVE_EMU_TIMEOUT_MS, option timeout_ms)";
      // No worker starts another threadgroup; those running end at their
      // next hook, scheduler step or watchdog signal. A job still queued
      // (behind another encoder's) leaves the queue: no worker joins it now.
      job->failed.store(true, std::memory_order_relaxed);
      job->timed_out.store(true, std::memory_order_release);
      lock.unlock();
      {
        std::lock_guard<std::mutex> ql(mu_);
        auto it = std::find(queue_.begin(), queue_.end(), job);
        if (it != queue_.end()) queue_.erase(it);
        std::lock_guard<std::mutex> jl(job->mu);
        job->left = true;
      }
      lock.lock();
      // Signal the workers that run it until they have left it. Past twice
      // the limit, give up and leave a worker that is still in the dispatch
      // running (it holds the job, so its launch stays valid): that happens
      // without the signal handler (MLX_NATIVE_EMU_NO_SIGNALS=1), where
      // nothing stops a kernel that never reaches a hook, and with it only
      // when a worker got no CPU time or a kernel spends nearly all its time
      // outside its own code (in libc, say) for the whole grace period.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      while (!done()) {
        lock.unlock();
        signal_workers(job.get());
        lock.lock();
        job->cv.wait_for(lock, std::chrono::milliseconds(2), done);
        if (!done() && std::chrono::steady_clock::now() >= give_up) {
          if (left_running) *left_running = true;
          if (!g_watchdog_signal)
            return job->timeout_text + "; a worker thread was still running the kernel at twice the limit and "
                   "nothing can stop it (MLX_NATIVE_EMU_NO_SIGNALS=1): it is lost to the pool";
          // Someone must go on signalling the worker, or it would be lost.
          std::thread([this, job] { signal_until_left(job); }).detach();
          return job->timeout_text + "; a worker thread was still running the kernel at twice the limit: "
                 "it leaves the dispatch when it next takes the watchdog signal in kernel code";
        }
      }
      if (job->error.set && job->error.text.rfind(job->timeout_text, 0) == 0) return job->error.text;
      return job->timeout_text;
    }
    return job->error.set ? job->error.text : std::string();
  }

 private:
  Pool() {
    uint32_t n = std::max(1u, std::thread::hardware_concurrency());
    if (const char* e = std::getenv("MLX_NATIVE_EMU_THREADS")) {
      long v = std::strtol(e, nullptr, 10);
      if (v > 0 && v <= 4096) n = uint32_t(v);
    }
    install_fault_handler();
    code_range(nullptr, "libm.so", &g_libm_lo, &g_libm_hi);
    install_watchdog_handler();
    slots_ = std::vector<Slot>(n);
    for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this, i] { loop(&slots_[i]); });
    for (uint32_t i = 0; i < n; ++i) {
      slots_[i].handle = threads_[i].native_handle();
      threads_[i].detach();
    }
  }

  // Signals the workers of a timed-out job every 2 ms until none runs it.
  void signal_until_left(const std::shared_ptr<Job>& job) {
    std::unique_lock<std::mutex> lock(job->mu);
    auto done = [&] { return job->left && job->active == 0; };
    while (!done()) {
      lock.unlock();
      signal_workers(job.get());
      lock.lock();
      job->cv.wait_for(lock, std::chrono::milliseconds(2), done);
    }
  }

  // A worker thread and the job it runs now.
  struct Slot {
    pthread_t handle{};
    std::atomic<Job*> job{nullptr};
    std::atomic<bool> signaled{false};  // a watchdog signal is on its way (tl_watchdog_pending)
  };

  void signal_workers(Job* job) {
    if (!g_watchdog_signal) return;
    for (Slot& s : slots_)
      if (s.job.load() == job && !s.signaled.exchange(true)) pthread_kill(s.handle, g_watchdog_signal);
  }

  void loop(Slot* slot) {
    install_alt_stack();
    tl_running = nullptr;  // allocates this thread's TLS block outside any signal handler
    tl_watchdog_pending = &slot->signaled;
    auto worker = std::make_unique<Worker>();
    pthread_sigmask(SIG_SETMASK, nullptr, &worker->signal_mask);
    fegetenv(&worker->fp_env);
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = queue_.front();
        std::lock_guard<std::mutex> jl(job->mu);
        ++job->active;
      }
      slot->job.store(job.get());
      // Stops at the end of the grid, or at the first error or the time
      // limit: a relaxed load per threadgroup.
      while (!job->failed.load(std::memory_order_relaxed)) {
        const uint64_t i = job->next.fetch_add(1, std::memory_order_relaxed);
        if (i >= job->total) break;
        worker->run_group(job.get(), i);
      }
      slot->job.store(nullptr);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
      }
      std::lock_guard<std::mutex> lock(job->mu);
      job->left = true;
      if (--job->active == 0) job->cv.notify_all();
    }
  }

  // The kernel's code range, looked up once per kernel (Kernel::code_lo/hi).
  static void lookup_code_range(Kernel* k, Job* job) {
    uintptr_t hi = k->code_hi.load(std::memory_order_acquire);
    if (hi == 0) {
      uintptr_t lo = UINTPTR_MAX;
      hi = UINTPTR_MAX;
      code_range(reinterpret_cast<const void*>(k->fn), nullptr, &lo, &hi);
      k->code_lo.store(lo, std::memory_order_relaxed);
      k->code_hi.store(hi, std::memory_order_release);
    }
    job->code_lo = k->code_lo.load(std::memory_order_relaxed);
    job->code_hi = hi;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::thread> threads_;
  std::vector<Slot> slots_;
};

}  // namespace

uint32_t worker_count() { return Pool::get().size(); }

uint64_t dynamic_threadgroup_bytes(const Launch& l) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < kMaxBindings; ++i)
    if (l.threadgroup_set & (1u << i)) total += (l.threadgroup_length[i] + 15) & ~uint64_t(15);
  return total;
}

std::string check_launch(const Launch& l) {
  return check_launch(*l.kernel, l.grid, l.threads, l.buffer_set, l.threadgroup_set,
                      dynamic_threadgroup_bytes(l));
}

std::string check_launch(const Kernel& k, const uint32_t grid[3], const uint32_t threads[3],
                         uint32_t buffer_set, uint32_t threadgroup_set, uint64_t dyn) {
  // A function, not a string: the success path allocates nothing.
  auto who = [&] { return "kernel '" + k.name + "': "; };
  for (int d = 0; d < 3; ++d) {
    if (grid[d] == 0) return who() + "threadgroups per grid must be positive (got " + xyz(grid) + ")";
    if (threads[d] == 0)
      return who() + "threads per threadgroup must be positive (got " + xyz(threads) + ")";
    // thread_position_in_grid and threads_per_grid are uint3: as on Metal,
    // the threads per grid on each axis must fit in 32 bits.
    if (uint64_t(grid[d]) * threads[d] > UINT32_MAX)
      return who() + "grid of " + xyz(grid) + " threadgroups of " + xyz(threads) + " threads has " +
             std::to_string(uint64_t(grid[d]) * threads[d]) + " threads on axis " + "xyz"[d] +
             ", more than the limit of 2^32-1 (thread_position_in_grid is a uint)";
  }
  const uint64_t n = uint64_t(threads[0]) * threads[1] * threads[2];
  if (n > kMaxThreadsPerThreadgroup)
    return who() + "threads per threadgroup " + xyz(threads) + " = " + std::to_string(n) +
           " exceeds the device limit of " + std::to_string(kMaxThreadsPerThreadgroup);
  if (n > k.max_threads)
    return who() + "threads per threadgroup " + xyz(threads) + " = " + std::to_string(n) +
           " exceeds the pipeline's maximum of " + std::to_string(k.max_threads);
  const uint64_t stat = k.static_threadgroup_bytes.load(std::memory_order_relaxed);
  if (dyn + stat > kMaxThreadgroupMemory)
    return who() + "threadgroup memory " + std::to_string(dyn) + " bytes dynamic + " +
           std::to_string(stat) + " bytes static exceeds the device limit of " +
           std::to_string(kMaxThreadgroupMemory) + " bytes";
  return check_grid_and_bindings(k, grid, threads, buffer_set, threadgroup_set);
}

std::string check_grid_and_bindings(const Kernel& k, const uint32_t grid[3], const uint32_t threads[3],
                                    uint32_t buffer_set, uint32_t threadgroup_set) {
  auto who = [&] { return "kernel '" + k.name + "': "; };
  const uint64_t n = uint64_t(threads[0]) * threads[1] * threads[2];
  // The executor numbers threadgroups with a uint64_t (kMaxThreadgroupsPerGrid)
  // and nothing may count the grid's threads past 64 bits.
  uint64_t groups = 0, grid_threads = 0;
  const bool groups_overflow = __builtin_mul_overflow(uint64_t(grid[0]), uint64_t(grid[1]), &groups) ||
                               __builtin_mul_overflow(groups, uint64_t(grid[2]), &groups);
  if (groups_overflow || groups > kMaxThreadgroupsPerGrid)
    return who() + "grid of " + xyz(grid) + " threadgroups = " +
           (groups_overflow ? std::string("2^64 or more") : std::to_string(groups)) +
           " threadgroups exceeds the emulator's limit of 2^63";
  if (__builtin_mul_overflow(groups, n, &grid_threads))
    return who() + "grid of " + xyz(grid) + " threadgroups of " + xyz(threads) +
           " threads = 2^64 or more threads exceeds the emulator's limit of 2^64-1";
  for (uint32_t idx : k.buffer_indices)
    if (idx >= kMaxBindings || !(buffer_set & (1u << idx)))
      return who() + "[[buffer(" + std::to_string(idx) + ")]] is not bound";
  for (uint32_t idx : k.threadgroup_indices)
    if (idx >= kMaxBindings || !(threadgroup_set & (1u << idx)))
      return who() + "[[threadgroup(" + std::to_string(idx) + ")]] has no threadgroup memory length";
  return std::string();
}

std::string execute(const Launch& l, bool* left_running) { return Pool::get().run(l, left_running); }

}  // namespace mlxn::emu
