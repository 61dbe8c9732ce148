// Execution of one dispatch on the CPU: threadgroups spread over a pool of OS
// threads; inside a threadgroup, one fiber per GPU thread, scheduled
// cooperatively, with barriers and simd collectives matched by call site.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "../include/mlx_native.h"
#include "shim/mlxn_emu_kernel_abi.h"

namespace mlxn::emu {

// Apple GPU limits, enforced so that a kernel that runs here fits on Metal.
constexpr uint32_t kMaxThreadsPerThreadgroup = 1024;
constexpr uint64_t kMaxThreadgroupMemory = 32768;
constexpr uint32_t kSimdWidth = MLXN_EMU_SIMD_WIDTH;
constexpr uint32_t kMaxBindings = MLXN_EMU_MAX_BINDINGS;
// Usable stack of each fiber (one per GPU thread).
constexpr size_t kFiberStackBytes = 256 * 1024;

using KernelFn = void (*)(mlxn_emu_thread*);

// A kernel entry point ready to run: what a pipeline holds.
struct Kernel {
  std::string name;
  KernelFn fn = nullptr;
  std::vector<uint32_t> buffer_indices;       // [[buffer(n)]] the kernel declares
  std::vector<uint32_t> threadgroup_indices;  // [[threadgroup(n)]] the kernel declares
  uint32_t max_threads = kMaxThreadsPerThreadgroup;
  // Static threadgroup memory (bytes): what the kernel library computes when
  // loaded (mlxn_emu_kernel_static_threadgroup_<name>), raised to the largest
  // a run used if that is more (declarations in #define bodies are counted
  // only from runs).
  std::atomic<uint64_t> static_threadgroup_bytes{0};
  // The executable segments of the shared object that holds `fn`, found on
  // the first run: the watchdog abandons a fiber only at an instruction in
  // this range (kernel code takes no locks; libc, the dynamic loader and the
  // runtime may). code_hi == 0: not looked up yet; code_lo == code_hi ==
  // UINTPTR_MAX: unknown (no check).
  std::atomic<uintptr_t> code_lo{0}, code_hi{0};
};

// How a dispatch runs: the interleaving of its threads and its time limit.
struct Schedule {
  bool random = false;
  uint64_t seed = 0x5eed;
  // Wall-clock limit of one dispatch in ms (0: none). Past it the dispatch
  // fails, within twice the limit: no further threadgroup starts, and threads
  // in kernel code are abandoned (see execute).
  uint64_t timeout_ms = 120000;
};

// One dispatch, validated (check_launch) before it is executed.
struct Launch {
  Kernel* kernel = nullptr;
  uint32_t grid[3] = {1, 1, 1};     // threadgroups per grid
  uint32_t threads[3] = {1, 1, 1};  // threads per threadgroup
  mlxn_emu_binding buffers[kMaxBindings] = {};
  // Dynamic threadgroup memory: length per index (ptr unused here); a length of
  // 0 with `threadgroup_set` false means unbound.
  uint64_t threadgroup_length[kMaxBindings] = {};
  uint32_t threadgroup_set = 0;  // bit i: [[threadgroup(i)]] has a length
  uint32_t buffer_set = 0;       // bit i: [[buffer(i)]] is bound
  Schedule schedule;
};

// Dynamic threadgroup memory a launch uses, each binding rounded up to 16
// bytes as Metal requires.
uint64_t dynamic_threadgroup_bytes(const Launch& l);

// The most threadgroups a grid may have: the linear threadgroup index is a
// uint64_t that the workers claim with fetch_add, which may go a few past
// the total, so the total keeps the top bit clear.
constexpr uint64_t kMaxThreadgroupsPerGrid = uint64_t(1) << 63;

// Checks limits and bindings (threads per threadgroup, threads per grid on
// each axis within 32 bits as on Metal, total threadgroups and threads within
// what the executor indexes, threadgroup memory, every declared binding
// present). Returns "" when the launch may run, else the reason.
std::string check_launch(const Kernel& k, const uint32_t grid[3], const uint32_t threads[3],
                         uint32_t buffer_set, uint32_t threadgroup_set, uint64_t dynamic_bytes);
std::string check_launch(const Launch& l);
// The part of check_launch that a dispatch block's decoder and the pipeline's
// limits leave (mlx_native_block.h, api.cpp): the total threadgroups and
// threads within what the executor indexes, every declared binding present.
// Takes sizes already checked to be positive with 32-bit threads per grid on
// each axis.
std::string check_grid_and_bindings(const Kernel& k, const uint32_t grid[3], const uint32_t threads[3],
                                    uint32_t buffer_set, uint32_t threadgroup_set);

// Runs the launch to completion on the worker pool; returns "" on success or
// the first execution error (out-of-bounds access, barrier divergence,
// threadgroup memory over the limit, a kernel-reported failure, the time
// limit l.schedule.timeout_ms, a synchronous signal raised by kernel code:
// SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT). Past the time limit no
// worker starts another threadgroup of the launch and the workers abandon its
// fibers: a fiber in kernel code is interrupted by a signal, one in a hook
// ends itself when the hook returns, so the pool stays whole; with
// MLX_NATIVE_EMU_NO_SIGNALS=1 a worker stuck in kernel code stays stuck and is
// lost to the pool, and kernel faults end the process.
// *left_running (when given) is set when the dispatch gave up at twice its
// time limit with a worker still inside the kernel: the launch's memory must
// then outlive the call.
std::string execute(const Launch& l, bool* left_running = nullptr);

// Number of OS threads that execute threadgroups (MLX_NATIVE_EMU_THREADS,
// default the number of cores).
uint32_t worker_count();

}  // namespace mlxn::emu
