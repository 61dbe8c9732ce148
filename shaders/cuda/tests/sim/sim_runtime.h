// A CPU simulation of the CUDA execution model, to check a kernel's logic
// (indexing, mma fragment layouts, the cp.async pipeline, barriers) on a
// machine without a GPU: each CUDA thread a std::thread, blocks one at a
// time, warp collectives (shuffles, ldmatrix, mma.sync m16n8k16) exchanging
// through per-warp slots between warp barriers, following the PTX ISA's
// fragment layouts; cp.async copies queued per thread and performed at
// cp.async.wait_group, so a kernel that reads a stage before waiting for it
// sees stale bytes; dynamic shared memory filled with garbage. The CUDA
// headers give the f16 / bf16 conversions in host mode. It says nothing
// about speed, and a kernel relying on anything not modelled here (other
// PTX, warp-divergent collectives, memory ordering between blocks) is out
// of its reach. Votes, __match_any_sync and __reduce_add_sync take every
// lane's value and keep those of `mask`. Hopper's wgmma (common.cuh's
// MLXN_WGMMA helpers) is modelled from the PTX ISA (below), so the sm_90a
// path compiles here unless MLXN_SIM_NO_WGMMA is defined (then the kernels
// take their other path, as a build without sm_90a would). Dynamic shared
// memory lies at byte 528 of a simulated shared window whose address 0 is
// 1024-byte aligned, so shared addresses (smem_addr) and their alignment
// behave as on the device. build.py assembles a family's program for it.
#pragma once
#ifndef MLXN_SIM_NO_WGMMA
#define MLXN_SIM_WGMMA 1
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <vector_types.h>
#include <vector_functions.h>
#include <barrier>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <memory>
#include <atomic>
#include <vector>
#include <deque>
#include <cmath>

#undef __device__
#undef __global__
#undef __shared__
#undef __launch_bounds__
#undef __forceinline__
#undef __noinline__
#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __launch_bounds__(...)

struct SimDim { unsigned x = 1, y = 1, z = 1; };
inline thread_local SimDim threadIdx, blockIdx;
inline SimDim blockDim, gridDim;

// A named barrier (bar.sync / bar.arrive with a thread count): arrivals
// counted to n complete a generation and wake its waiters.
struct SimNamedBar {
  std::mutex m;
  std::condition_variable cv;
  unsigned count = 0, gen = 0;
};
struct SimBlock {
  std::barrier<>* block = nullptr;
  // The 16 named barriers (0 is __syncthreads' own).
  std::shared_ptr<SimNamedBar[]> named;
  std::vector<std::barrier<>*> warps;
  // Per-warp exchange slots: 32 lanes x 64 bytes.
  std::vector<unsigned char> slots;
  // The shared window: `shared` is its address 0 (1024-byte aligned inside
  // `window`); dynamic shared memory starts at kSimDynOffset, dyn_bytes long.
  std::vector<unsigned char> window;
  unsigned char* shared = nullptr;
  size_t shared_len = 0, dyn_bytes = 0;
};
// Where dynamic shared memory starts in the window: a multiple of 16 (the
// kernels' __align__(16)), not of 1024, as when static shared memory comes first.
constexpr size_t kSimDynOffset = 528;
// The block of the calling thread: sim_launch runs one block at a time,
// sim_launch_resident every block of the grid at once, each with its own.
inline SimBlock sim_block_default;
inline thread_local SimBlock* sim_block_of = &sim_block_default;
#define sim_block (*sim_block_of)

// Warps are 32 consecutive threads of the block, counted x first, then y, then z.
inline unsigned sim_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline unsigned sim_lane() { return sim_thread() & 31u; }
inline unsigned sim_warp() { return sim_thread() >> 5; }
inline unsigned char* sim_slot(unsigned lane) { return &sim_block.slots[(sim_warp() * 32 + lane) * 64]; }
inline void sim_warp_sync() { sim_block.warps[sim_warp()]->arrive_and_wait(); }

inline void __syncthreads() { sim_block.block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { sim_warp_sync(); }

template <class T> inline T sim_exchange(T v, unsigned src) {
  static_assert(sizeof(T) <= 64, "slot");
  sim_warp_sync();
  std::memcpy(sim_slot(sim_lane()), &v, sizeof(T));
  sim_warp_sync();
  T r;
  std::memcpy(&r, sim_slot(src), sizeof(T));
  return r;
}
inline float __shfl_xor_sync(unsigned, float v, unsigned o) { return sim_exchange(v, sim_lane() ^ o); }
inline float __shfl_down_sync(unsigned, float v, unsigned o) { unsigned s = sim_lane() + o; return sim_exchange(v, s < 32 ? s : sim_lane()); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, unsigned o) { return sim_exchange(v, sim_lane() ^ o); }
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned o) { unsigned s = sim_lane() + o; return sim_exchange(v, s < 32 ? s : sim_lane()); }
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned o) { return sim_exchange(v, sim_lane() >= o ? sim_lane() - o : sim_lane()); }
template <class T> inline T __shfl_sync(unsigned, T v, int src) { return sim_exchange(v, unsigned(src) & 31u); }

// Vote, match and reduce: every lane of the warp calls them (the kernels'
// collectives are warp-uniform); `mask` names the lanes whose values count.
inline unsigned sim_lane_values(unsigned v, unsigned* all) {
  sim_warp_sync();
  std::memcpy(sim_slot(sim_lane()), &v, sizeof(v));
  sim_warp_sync();
  for (unsigned l = 0; l < 32; ++l) std::memcpy(&all[l], sim_slot(l), sizeof(unsigned));
  sim_warp_sync();  // every lane has read the slots before any is overwritten
  return v;
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  unsigned all[32];
  sim_lane_values(pred ? 1u : 0u, all);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l) if ((mask >> l) & 1u && all[l]) r |= 1u << l;
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline unsigned __match_any_sync(unsigned mask, unsigned v) {
  unsigned all[32];
  sim_lane_values(v, all);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l) if ((mask >> l) & 1u && all[l] == v) r |= 1u << l;
  return r;
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  unsigned all[32];
  sim_lane_values(v, all);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l) if ((mask >> l) & 1u) r += all[l];
  return r;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(unsigned(v)); }
// __dp4a(a, b, c): c plus the dot product of a's and b's four signed bytes.
inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 4; ++k) c += int(static_cast<signed char>(a >> (8 * k))) * int(static_cast<signed char>(b >> (8 * k)));
  return c;
}
// __float2int_rn: round to nearest, ties to even (the default rounding mode).
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
// Fences and back-off: the simulation's threads share one memory, so a
// fence is a sequentially consistent one and a sleep a yield.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
template <class T> inline T __ldcg(const T* p) { return *reinterpret_cast<const volatile T*>(p); }
// A vector's lanes read one by one (a volatile float4 has no copy).
inline float4 __ldcg(const float4* p) {
  const volatile float* f = reinterpret_cast<const volatile float*>(p);
  return make_float4(f[0], f[1], f[2], f[3]);
}
template <class T> inline void __stcs(T* p, T v) { *p = v; }
inline unsigned ld_acquire_gpu(const unsigned* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
// Atomics: the threads of a block run at once, so these are real ones.
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicMin(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}

template <class T> inline T __ldg(const T* p) { return *p; }
// The fast intrinsics, computed exactly here (the simulation checks logic, not rounding).
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T> inline T __ldcs(const T* p) { return *p; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }
inline void sim_fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}
inline void sim_named_bar(unsigned id, unsigned n, bool wait) {
  if (id == 0 || id > 15 || n % 32 != 0) sim_fail("bar.sync / bar.arrive: barrier 1..15 over a multiple of 32 threads");
  SimNamedBar& b = sim_block.named[id];
  std::unique_lock<std::mutex> l(b.m);
  const unsigned g = b.gen;
  if (++b.count == n) {
    b.count = 0;
    ++b.gen;
    b.cv.notify_all();
    return;
  }
  if (wait) b.cv.wait(l, [&] { return b.gen != g; });
}
inline void bar_sync(unsigned id, unsigned n) { sim_named_bar(id, n, true); }
inline void bar_arrive(unsigned id, unsigned n) { sim_named_bar(id, n, false); }
// A pointer into dynamic shared memory as a shared address (its offset in the window).
inline unsigned smem_addr(const void* p) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c < sim_block.shared || c >= sim_block.shared + sim_block.shared_len) sim_fail("smem_addr: not dynamic shared memory");
  return unsigned(c - sim_block.shared);
}
inline size_t __cvta_generic_to_shared(const void* p) { return smem_addr(p); }

inline unsigned char* sim_dynamic_smem() { return sim_block.shared + kSimDynOffset; }
// %dynamic_smem_size: what the launch gave.
inline unsigned dynamic_smem_bytes() { return unsigned(sim_block.dyn_bytes); }

// ---- common.cuh's programmatic-launch wait and L2 prefetches ----
// One simulated launch runs alone and the CPU has no L2 to ask: the wait
// returns, the prefetches fetch nothing, and every grid counts as within the
// SMs so that the prefetching entries' index arithmetic runs.
inline void mlxn_entry() {}
inline void mlxn_held_entry() {}
inline void mlxn_prefetch_l2(const void*, unsigned long long) {}
inline bool mlxn_grid_within_sms() { return true; }

// ---- the tensor-core and cp.async helpers of common.cuh ----
typedef unsigned int sim_u32;

// ldmatrix .x4: lanes 8j..8j+7 give the row addresses of matrix j; lane l
// receives, of each matrix, row l/4, b16 columns 2(l%4) and 2(l%4)+1 (trans:
// rows 2(l%4), 2(l%4)+1 of column l/4).
inline void sim_ldsm(const void* p, sim_u32& r0, sim_u32& r1, sim_u32& r2, sim_u32& r3, bool trans) {
  const unsigned l = sim_lane();
  sim_warp_sync();
  const void* mine = p;
  std::memcpy(sim_slot(l), &mine, sizeof(mine));
  sim_warp_sync();
  sim_u32 out[4];
  for (unsigned j = 0; j < 4; ++j) {
    auto row = [&](unsigned r) { const unsigned char* a; std::memcpy(&a, sim_slot(8 * j + r), sizeof(a)); return a; };
    if (!trans) {
      std::memcpy(&out[j], row(l / 4) + 4 * (l % 4), 4);
    } else {
      uint16_t lo, hi;
      std::memcpy(&lo, row(2 * (l % 4)) + 2 * (l / 4), 2);
      std::memcpy(&hi, row(2 * (l % 4) + 1) + 2 * (l / 4), 2);
      out[j] = sim_u32(lo) | (sim_u32(hi) << 16);
    }
  }
  r0 = out[0]; r1 = out[1]; r2 = out[2]; r3 = out[3];
}
inline void ldsm_x4(const void* p, sim_u32& r0, sim_u32& r1, sim_u32& r2, sim_u32& r3) { sim_ldsm(p, r0, r1, r2, r3, false); }
inline void ldsm_x4_trans(const void* p, sim_u32& r0, sim_u32& r1, sim_u32& r2, sim_u32& r3) { sim_ldsm(p, r0, r1, r2, r3, true); }

inline float sim_b16(uint16_t h, bool bf) {
  if (bf) { return __uint_as_float(sim_u32(h) << 16); }
  __half x; std::memcpy(&x, &h, 2); return __half2float(x);
}
// mma.sync m16n8k16 row.col, f32 accumulate: the PTX fragment layouts.
inline void sim_mma(float (&d)[4], const sim_u32 (&a)[4], sim_u32 b0, sim_u32 b1, bool bf) {
  struct In { sim_u32 a[4]; sim_u32 b[2]; };
  const unsigned l = sim_lane();
  In mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  sim_warp_sync();
  std::memcpy(sim_slot(l), &mine, sizeof(mine));
  sim_warp_sync();
  float A[16][16], B[16][8];
  for (unsigned ln = 0; ln < 32; ++ln) {
    In in; std::memcpy(&in, sim_slot(ln), sizeof(in));
    const unsigned g = ln / 4, t = ln % 4;
    for (unsigned h = 0; h < 2; ++h) {
      A[g][2 * t + h] = sim_b16(uint16_t(in.a[0] >> (16 * h)), bf);
      A[g + 8][2 * t + h] = sim_b16(uint16_t(in.a[1] >> (16 * h)), bf);
      A[g][2 * t + 8 + h] = sim_b16(uint16_t(in.a[2] >> (16 * h)), bf);
      A[g + 8][2 * t + 8 + h] = sim_b16(uint16_t(in.a[3] >> (16 * h)), bf);
      B[2 * t + h][g] = sim_b16(uint16_t(in.b[0] >> (16 * h)), bf);
      B[2 * t + 8 + h][g] = sim_b16(uint16_t(in.b[1] >> (16 * h)), bf);
    }
  }
  sim_warp_sync();  // every lane has read the slots before any is overwritten
  const unsigned g = l / 4, t = l % 4;
  for (unsigned e = 0; e < 4; ++e) {
    const unsigned row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float s = d[e];
    for (unsigned k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[e] = s;
  }
}
inline void mma_bf16(float (&d)[4], const sim_u32 (&a)[4], sim_u32 b0, sim_u32 b1) { sim_mma(d, a, b0, b1, true); }
inline void mma_f16(float (&d)[4], const sim_u32 (&a)[4], sim_u32 b0, sim_u32 b1) { sim_mma(d, a, b0, b1, false); }

// ex2.approx.ftz: 2^x, subnormal results flushed to 0.
inline float ex2_approx(float x) {
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}

// tanh.approx.f32: the exact tanh rounded to f32 (the hardware's error, up
// to about 2^-11 relative, is not modelled).
inline float tanh_approx(float x) { return std::tanh(x); }
inline unsigned opaque_u32(unsigned v) { return v; }
// prmt.b32 d, w, 0, sel (sext_byte): byte k of d is byte (sel >> 4k) & 7
// of w (bytes 4-7 zero), or, where bit 3 of that nibble is set, that byte's
// sign bit replicated.
inline int sext_byte(unsigned w, unsigned sel) {
  const uint64_t v = uint64_t(w);
  unsigned r = 0;
  for (unsigned k = 0; k < 4; ++k) {
    const unsigned n = (sel >> (4 * k)) & 15u;
    unsigned b = unsigned((v >> (8 * (n & 7u))) & 0xffu);
    if (n & 8u) b = (b & 0x80u) ? 0xffu : 0u;
    r |= b << (8 * k);
  }
  return int(r);
}
template <unsigned MASK> inline unsigned and_or(unsigned v, unsigned c) { return (v & MASK) | c; }

// max.NaN.f32: the larger, the canonical NaN where either is NaN.
inline float fmax_nan(float a, float b) {
  if (a != a || b != b) { const sim_u32 q = 0x7fffffffu; float y; std::memcpy(&y, &q, 4); return y; }
  return std::fmax(a, b);
}

// fma.rn .bf16x2 / .f16x2: per element a * b + c, exact in double for
// 16-bit operands, then rounded to the type.
inline sim_u32 sim_fma2(sim_u32 a, sim_u32 b, sim_u32 c, bool bf) {
  sim_u32 d = 0;
  for (unsigned h = 0; h < 2; ++h) {
    const double v = double(sim_b16(uint16_t(a >> (16 * h)), bf)) * double(sim_b16(uint16_t(b >> (16 * h)), bf)) +
                     double(sim_b16(uint16_t(c >> (16 * h)), bf));
    uint16_t r;
    if (bf) { const __nv_bfloat16 x = __double2bfloat16(v); std::memcpy(&r, &x, 2); }
    else { const __half x = __double2half(v); std::memcpy(&r, &x, 2); }
    d |= sim_u32(r) << (16 * h);
  }
  return d;
}
inline sim_u32 fma2_bf16(sim_u32 a, sim_u32 b, sim_u32 c) { return sim_fma2(a, b, c, true); }
inline sim_u32 fma2_f16(sim_u32 a, sim_u32 b, sim_u32 c) { return sim_fma2(a, b, c, false); }

// __byte_perm(x, y, s): byte k of the result is byte (s >> 4k) & 7 of the
// eight bytes of x (0-3) and y (4-7).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = uint64_t(x) | (uint64_t(y) << 32);
  unsigned r = 0;
  for (unsigned k = 0; k < 4; ++k) r |= unsigned((v >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return r;
}

// cp.async: queued per thread, grouped by commit, performed at wait_group.
struct SimCopy { void* dst; const void* src; bool live; unsigned bytes; };
inline thread_local std::deque<std::vector<SimCopy>> sim_groups;
inline thread_local std::vector<SimCopy> sim_open;
inline void sim_cp_async(void* dst, const void* src, bool live, unsigned bytes) {
  if ((reinterpret_cast<uintptr_t>(dst) | (live ? reinterpret_cast<uintptr_t>(src) : 0)) & (bytes - 1)) { std::fprintf(stderr, "cp.async misaligned\n"); std::abort(); }
  // A destination in the shared window lies inside what the launch gave
  // (on a GPU a copy past it faults); static __shared__ arrays lie outside.
  const auto* d = static_cast<const unsigned char*>(dst);
  const auto& w = sim_block.window;
  if (d >= w.data() && d < w.data() + w.size()) {
    const unsigned char* dyn = sim_block.shared + kSimDynOffset;
    if (d < dyn || d + bytes > dyn + sim_block.dyn_bytes) sim_fail("cp.async: destination outside the launch's dynamic shared memory");
  }
  sim_open.push_back({dst, src, live, bytes});
}
inline void cp_async16(void* dst, const void* src, bool live) { sim_cp_async(dst, src, live, 16); }
inline void cp_async4(void* dst, const void* src, bool live) { sim_cp_async(dst, src, live, 4); }
inline void cp_async_commit() { sim_groups.push_back(std::move(sim_open)); sim_open.clear(); }
template <int N> inline void cp_async_wait() {
  while (sim_groups.size() > size_t(N)) {
    for (auto& c : sim_groups.front()) {
      if (c.live) std::memcpy(c.dst, c.src, c.bytes); else std::memset(c.dst, 0, c.bytes);
    }
    sim_groups.pop_front();
  }
}

// Every copy this thread queued, performed now (their groups stay, empty,
// so that wait_group counts as before).
inline void sim_copies_land() {
  auto land = [](std::vector<SimCopy>& v) {
    for (auto& c : v) {
      if (c.live) std::memcpy(c.dst, c.src, c.bytes); else std::memset(c.dst, 0, c.bytes);
    }
    v.clear();
  };
  for (auto& g : sim_groups) land(g);
  land(sim_open);
}

// ---- mbarriers (common.cuh's mbar_* helpers) ----
// An mbarrier's 64 bits here: pending arrivals (bits 0-19), the count a
// phase needs (20-39), the current phase's parity (40), initialized (41),
// transaction bytes still expected (42-62). A phase completes when both its
// pending arrivals and its bytes are 0. An arrival past a phase's count,
// more bytes than announced, or a use before init fails.
constexpr unsigned long long kSimMbarInit = 1ull << 41;
constexpr unsigned long long kSimMbarTxOne = 1ull << 42;
inline void mbar_init(unsigned long long* bar, unsigned count) {
  if (count == 0 || count >= (1u << 20)) sim_fail("mbarrier: count out of range");
  std::atomic_ref<unsigned long long>(*bar).store(kSimMbarInit | (static_cast<unsigned long long>(count) << 20) | count);
}
// The barrier after `arrivals` arrivals and `tx` announced (positive) or
// completed (negative) bytes, the phase completed where both reach 0.
inline void sim_mbar_update(unsigned long long* bar, unsigned arrivals, long long tx) {
  std::atomic_ref<unsigned long long> a(*bar);
  unsigned long long v = a.load();
  for (;;) {
    if (!(v & kSimMbarInit)) sim_fail("mbarrier: used before init");
    unsigned long long pending = v & 0xfffffull;
    const unsigned long long count = (v >> 20) & 0xfffffull;
    long long bytes = static_cast<long long>(v >> 42);
    if (arrivals > pending) sim_fail("mbarrier: arrival past the phase's count");
    pending -= arrivals;
    bytes += tx;
    if (bytes < 0) sim_fail("mbarrier: more bytes completed than announced");
    if (bytes >= (1ll << 21)) sim_fail("mbarrier: transaction count out of range");
    unsigned long long next = (v & (kSimMbarInit | (1ull << 40) | (0xfffffull << 20))) | pending |
                              (static_cast<unsigned long long>(bytes) << 42);
    if (pending == 0 && bytes == 0) next = ((next ^ (1ull << 40)) & ~0xfffffull) | count;
    if (a.compare_exchange_weak(v, next)) return;
  }
}
inline void mbar_arrive(unsigned long long* bar) { sim_mbar_update(bar, 1, 0); }
inline void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) { sim_mbar_update(bar, 1, bytes); }
// Returns once the phase of parity `parity` has completed: the barrier's
// current phase has the other parity.
inline void mbar_wait(unsigned long long* bar, unsigned parity) {
  std::atomic_ref<unsigned long long> a(*bar);
  for (;;) {
    const unsigned long long v = a.load();
    if (!(v & kSimMbarInit)) sim_fail("mbarrier: wait before init");
    if (((v >> 40) & 1ull) != (parity & 1u)) return;
    std::this_thread::yield();
  }
}

// ---- TMA (common.cuh's tma_* helpers) ----
// The simulation's tensor map: what the backend's descriptor says (the
// driver that launches a kernel fills one where the op binds a
// TENSOR_MAP), element (i0, i1) at base + i0 esize + i1 stride1.
struct SimTensorMap {
  const unsigned char* base;
  unsigned esize;
  unsigned long long dims[2];
  unsigned long long stride1;  // bytes
  unsigned box[2];
  unsigned swizzle;            // 0 or 128
};
inline void tmap_acquire(const void*) {}
// The box at (c0, c1) into dst at once (the earliest a GPU could land it),
// zeros past the dims, then its bytes completed on bar. With a 128-byte
// swizzle a box row is 128 bytes and the destination 1024-byte aligned in
// the block's shared memory, and 16-byte chunk ch of box row r lands at
// chunk ch ^ (r % 8) of its row, as the hardware's address-bit swizzle
// places it.
inline void tma_load_2d(void* dst, const void* map, int c0, int c1, unsigned long long* bar) {
  const SimTensorMap& m = *static_cast<const SimTensorMap*>(map);
  const unsigned row_bytes = m.box[0] * m.esize;
  auto* d = static_cast<unsigned char*>(dst);
  if (m.swizzle != 0) {
    if (m.swizzle != 128 || row_bytes != 128) sim_fail("tma: the model has the 128-byte swizzle of 128-byte box rows only");
    if ((d - sim_block.shared) % 1024 != 0) sim_fail("tma: a 128-byte swizzled box must start 1024-byte aligned");
  }
  for (unsigned r = 0; r < m.box[1]; ++r) {
    for (unsigned ch = 0; ch < row_bytes / 16; ++ch) {
      unsigned char* out = d + r * row_bytes + 16 * (m.swizzle ? (ch ^ (r % 8)) : ch);
      for (unsigned x = 0; x < 16; x += m.esize) {
        const long long i0 = static_cast<long long>(c0) + (16 * ch + x) / m.esize, i1 = static_cast<long long>(c1) + r;
        if (i0 < 0 || i1 < 0 || static_cast<unsigned long long>(i0) >= m.dims[0] || static_cast<unsigned long long>(i1) >= m.dims[1])
          std::memset(out + x, 0, m.esize);
        else
          std::memcpy(out + x, m.base + i0 * m.esize + i1 * m.stride1, m.esize);
      }
    }
  }
  sim_mbar_update(bar, 0, -static_cast<long long>(row_bytes * m.box[1]));
}

// The thread's copies land now (the earliest a GPU could land them), then
// its arrival.
inline void cp_async_mbar_arrive(unsigned long long* bar) {
  sim_copies_land();
  mbar_arrive(bar);
}
// Register reallocation changes nothing the simulation models.
template <int N> inline void setmaxnreg_inc() { static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg"); }
template <int N> inline void setmaxnreg_dec() { static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg"); }

// ---- Hopper's wgmma (common.cuh's helpers under MLXN_WGMMA) ----
//
// The model, as the PTX ISA documents wgmma.mma_async m64nNk16 with both
// operands in shared memory, K-major, 16-bit floats, f32 accumulators:
//   - descriptor: start address bits 0-13 (>> 4), leading byte offset bits
//     16-29, stride byte offset (SBO) bits 32-45 (>> 4), base offset bits
//     49-51, layout bits 62-63 (1: 128B swizzle; the only one modelled,
//     with base offset 0 and a start address in the first 128-byte row of its
//     1024-byte pattern, which is what the kernels use; anything else aborts).
//   - element (r, k), k < 16, of the 64-row A or N-row B operand: the
//     canonical K-major 128B layout ((8, m), (8, 2)) : ((64, SBO), (1, 8)) in
//     16-bit elements, i.e. byte start + (r % 8) 128 + (r / 8) SBO + 2 k, then
//     the 128B swizzle of the shared address: bits 4-6 ^= bits 7-9.
//   - accumulators: thread t of the warpgroup (warp w = t / 32 % 4, lane l)
//     holds d[i] = D[16 w + l / 4 + 8 ((i / 2) % 2)][8 (i / 4) + 2 (l % 4) + i % 2].
//   - asynchrony: wgmma are queued per thread, grouped by commit_group, and
//     performed at wait_group (each thread its own d[i], reading shared
//     memory then), so a stage overwritten before its wait, or accumulators
//     read before it, show as wrong results. A wgmma needs a wgmma.fence
//     since the thread's last wait_group (the PTX rule for accumulators
//     touched between them), and the same descriptors on every lane of the
//     warp (.aligned); the block's threads must be whole warpgroups.
//   - the RS form (A from registers, B MN-major: imm-trans-b = 1, or
//     K-major as the SS form's B for wgmma_rsk_*), as
//     FlashAttention's P V uses it: A's 64 x 16 fragment, warp w % 4 holding
//     rows 16 w .. 16 w + 15 as mma.sync m16n8k16's A (a[0] (g, 2t..2t+1),
//     a[1] (g + 8, ...), a[2] (g, 2t+8..), a[3] (g + 8, 2t+8..), g = lane / 4,
//     t = lane % 4), read from the lanes' registers at wait_group (so a
//     kernel that rewrites them before its wait sees wrong results); B's
//     element (n, k) of the canonical MN-major 128B layout ((8, 8, m), (8, k))
//     : ((1, 8, LBO), (64, SBO)) in 16-bit elements, i.e. byte start +
//     2 (n % 64) + (n / 64) LBO + 128 (k % 8) + (k / 8) SBO, then the swizzle.
// Not modelled: the proxy fence (fence.proxy.async is a no-op here; a
// missing one would not show) and the hardware's own order of summation.
struct SimWgmma { float* d; unsigned regs; uint64_t a, b; bool bf; bool rs = false; const sim_u32* ap[32] = {}; bool bmn = false; };
inline thread_local std::vector<SimWgmma> sim_wg_open;
inline thread_local std::deque<std::vector<SimWgmma>> sim_wg_groups;
inline thread_local bool sim_wg_fenced = false;

inline float sim_wg_elem(uint64_t desc, unsigned row, unsigned k, bool bf, bool mn = false) {
  const uint64_t start = (desc & 0x3fffu) << 4, sbo = ((desc >> 32) & 0x3fffu) << 4, lbo = ((desc >> 16) & 0x3fffu) << 4;
  if ((desc >> 62) != 1) sim_fail("wgmma: only the 128B-swizzle layout is modelled");
  if (((desc >> 49) & 7u) != 0 || ((start >> 7) & 7u) != 0) sim_fail("wgmma: base offset and start row other than 0 are not modelled");
  const uint64_t addr = mn ? start + 2 * (row & 63u) + (row >> 6) * lbo + 128 * (k & 7u) + (k >> 3) * sbo
                           : start + (row & 7u) * 128 + (row >> 3) * sbo + 2 * k;
  const uint64_t phys = addr ^ (((addr >> 7) & 7u) << 4);
  if (phys + 2 > sim_block.shared_len) sim_fail("wgmma: operand outside shared memory");
  uint16_t h;
  std::memcpy(&h, sim_block.shared + phys, 2);
  return sim_b16(h, bf);
}
// Element (row 16 w + g + 8 hi, k) of an RS operand: from lane 4 g + (k % 8) / 2's a[hi + 2 (k / 8)].
inline float sim_wg_reg(const SimWgmma& op, unsigned l, unsigned hi, unsigned k) {
  const sim_u32 v = op.ap[4 * (l / 4) + (k & 7u) / 2][hi + 2 * (k >> 3)];
  return sim_b16(uint16_t(v >> (16 * (k & 1u))), op.bf);
}
inline void sim_wg_perform(const SimWgmma& op) {
  const unsigned t = sim_thread() & 127u, w = t >> 5, l = t & 31u;
  for (unsigned i = 0; i < op.regs; ++i) {
    const unsigned hi = (i >> 1) & 1u;
    const unsigned row = 16 * w + l / 4 + 8 * hi, col = 8 * (i >> 2) + 2 * (l & 3u) + (i & 1u);
    float s = op.d[i];
    for (unsigned k = 0; k < 16; ++k) {
      const float av = op.rs ? sim_wg_reg(op, l, hi, k) : sim_wg_elem(op.a, row, k, op.bf);
      s += av * sim_wg_elem(op.b, col, k, op.bf, op.bmn);
    }
    op.d[i] = s;
  }
}
template <int R>
inline void sim_wgmma(float (&d)[R], uint64_t a, uint64_t b, bool bf) {
  static_assert(R % 4 == 0 && R >= 4 && R <= 128, "m64nNk16 with N a multiple of 8 from 8 to 256 (the PTX ISA's 16-bit shapes)");
  if ((blockDim.x * blockDim.y * blockDim.z) % 128 != 0) sim_fail("wgmma: the block is not whole warpgroups");
  if (!sim_wg_fenced) sim_fail("wgmma: issued without a wgmma.fence since the last wait_group");
  struct Desc { uint64_t a, b; };
  const Desc lane0 = sim_exchange(Desc{a, b}, 0);
  if (lane0.a != a || lane0.b != b) sim_fail("wgmma: descriptors differ across the warp");
  sim_wg_open.push_back({d, unsigned(R), a, b, bf});
}
template <int R> inline void wgmma_bf16(float (&d)[R], uint64_t a, uint64_t b) { sim_wgmma(d, a, b, true); }
template <int R> inline void wgmma_f16(float (&d)[R], uint64_t a, uint64_t b) { sim_wgmma(d, a, b, false); }
// The RS form: every lane's register array is noted, to be read at the wait.
template <int R>
inline void sim_wgmma_rs(float (&d)[R], const sim_u32 (&a)[4], uint64_t b, bool bf, bool bmn = true) {
  static_assert(R % 4 == 0 && R >= 4 && R <= 128, "m64nNk16 with N a multiple of 8 from 8 to 256");
  if ((blockDim.x * blockDim.y * blockDim.z) % 128 != 0) sim_fail("wgmma: the block is not whole warpgroups");
  if (!sim_wg_fenced) sim_fail("wgmma: issued without a wgmma.fence since the last wait_group");
  const uint64_t b0 = sim_exchange(b, 0);
  if (b0 != b) sim_fail("wgmma: descriptors differ across the warp");
  SimWgmma op{d, unsigned(R), 0, b, bf, true};
  op.bmn = bmn;
  const sim_u32* mine = a;
  sim_warp_sync();
  std::memcpy(sim_slot(sim_lane()), &mine, sizeof(mine));
  sim_warp_sync();
  for (unsigned l = 0; l < 32; ++l) std::memcpy(&op.ap[l], sim_slot(l), sizeof(mine));
  sim_warp_sync();
  sim_wg_open.push_back(op);
}
template <int R> inline void wgmma_rs_bf16(float (&d)[R], const sim_u32 (&a)[4], uint64_t b) { sim_wgmma_rs(d, a, b, true); }
template <int R> inline void wgmma_rs_f16(float (&d)[R], const sim_u32 (&a)[4], uint64_t b) { sim_wgmma_rs(d, a, b, false); }
// The RS form with B K-major (common.cuh's wgmma_rsk_*).
template <int R> inline void wgmma_rsk_bf16(float (&d)[R], const sim_u32 (&a)[4], uint64_t b) { sim_wgmma_rs(d, a, b, true, false); }
template <int R> inline void wgmma_rsk_f16(float (&d)[R], const sim_u32 (&a)[4], uint64_t b) { sim_wgmma_rs(d, a, b, false, false); }
inline void wgmma_fence() { sim_wg_fenced = true; }
inline void wgmma_commit() {
  sim_wg_groups.push_back(std::move(sim_wg_open));
  sim_wg_open.clear();
}
// Performs the groups past the newest N. RS operands are read from the warp's
// registers as they stand at this wait (every lane of the warp waits
// together: .sync.aligned), and no lane goes on before every lane's part of
// the groups is done (as on the GPU, where the wait returns to the warp as
// one: a lane may then speak for its warp, e.g. arrive on a barrier that
// frees the operands' shared memory).
template <int N> inline void wgmma_wait() {
  bool rs = false;
  for (size_t gi = 0; gi + size_t(N) < sim_wg_groups.size(); ++gi)
    for (const SimWgmma& op : sim_wg_groups[gi]) rs = rs || op.rs;
  if (rs) sim_warp_sync();
  while (sim_wg_groups.size() > size_t(N)) {
    for (const SimWgmma& op : sim_wg_groups.front()) sim_wg_perform(op);
    sim_wg_groups.pop_front();
  }
  sim_warp_sync();
  sim_wg_fenced = false;
}
inline void fence_proxy_async_smem() {}
template <int N> inline void acc_fence(float (&)[N]) {}
template <int N> inline void reg_fence(sim_u32 (&)[N][4]) {}

// Runs kernel(args...) over the grid, blocks one at a time.
template <class F>
inline void sim_launch(SimDim grid, SimDim block, size_t smem, F&& kernel) {
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bb(n);
        std::vector<std::barrier<>*> ws;
        for (unsigned w = 0; w < (n + 31) / 32; ++w) ws.push_back(new std::barrier<>(std::min(32u, n - 32 * w)));
        sim_block.block = &bb;
        sim_block.warps = ws;
        sim_block.named.reset(new SimNamedBar[16]);
        sim_block.slots.assign(((n + 31) / 32) * 32 * 64, 0);
        sim_block.window.assign(1024 + kSimDynOffset + smem + 16, 0xAB);  // garbage, so unwritten reads show
        sim_block.shared = sim_block.window.data() + ((1024 - reinterpret_cast<uintptr_t>(sim_block.window.data()) % 1024) % 1024);
        sim_block.shared_len = kSimDynOffset + smem + 16;
        sim_block.dyn_bytes = smem;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < n; ++t) {
          ts.emplace_back([&, t] {
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            blockIdx = {bx, by, bz};
            sim_groups.clear();
            sim_open.clear();
            sim_wg_groups.clear();
            sim_wg_open.clear();
            sim_wg_fenced = false;
            kernel();
            if (!sim_wg_groups.empty() || !sim_wg_open.empty()) sim_fail("wgmma: the kernel ended with wgmma not waited for");
            if (!sim_groups.empty() || !sim_open.empty()) {
              // Copies never waited on: a kernel bug unless nothing reads them.
              sim_groups.clear();
              sim_open.clear();
            }
            sim_block.warps[t / 32]->arrive_and_drop();
            sim_block.block->arrive_and_drop();
          });
        }
        for (auto& th : ts) th.join();
        for (auto* w : ws) delete w;
      }
}

// Runs kernel(args...) with every block of the grid at once (a kernel whose
// blocks wait for each other, as on a GPU where all are resident), each
// block with its own shared memory and barriers. Keep grid x block small:
// one host thread a simulated thread.
template <class F>
inline void sim_launch_resident(SimDim grid, SimDim block, size_t smem, F&& kernel) {
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  const unsigned nb = grid.x * grid.y * grid.z;
  std::vector<SimBlock> blocks(nb);
  std::vector<std::unique_ptr<std::barrier<>>> bars;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (unsigned b = 0; b < nb; ++b) {
    SimBlock& sb = blocks[b];
    bars.push_back(std::make_unique<std::barrier<>>(n));
    sb.block = bars.back().get();
    sb.named.reset(new SimNamedBar[16]);
    for (unsigned w = 0; w < (n + 31) / 32; ++w) {
      warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w)));
      sb.warps.push_back(warps.back().get());
    }
    sb.slots.assign(((n + 31) / 32) * 32 * 64, 0);
    sb.window.assign(1024 + kSimDynOffset + smem + 16, 0xAB);
    sb.shared = sb.window.data() + ((1024 - reinterpret_cast<uintptr_t>(sb.window.data()) % 1024) % 1024);
    sb.shared_len = kSimDynOffset + smem + 16;
    sb.dyn_bytes = smem;
  }
  std::vector<std::thread> ts;
  for (unsigned b = 0; b < nb; ++b)
    for (unsigned t = 0; t < n; ++t)
      ts.emplace_back([&, b, t] {
        SimBlock& sb = blocks[b];
        sim_block_of = &sb;
        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        blockIdx = {b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
        kernel();
        sb.warps[t / 32]->arrive_and_drop();
        sb.block->arrive_and_drop();
      });
  for (auto& th : ts) th.join();
}
