/*
 * The interface between a kernel library that the emulator compiled from Metal
 * source (the translated kernels + the CPU metal_stdlib shim) and the emulator
 * runtime that runs it (fibers, scheduler, checks).
 *
 * The runtime calls one exported entry per kernel once per GPU thread, each on
 * its own fiber:
 *     extern "C" void mlxn_emu_kernel_<host_name>(mlxn_emu_thread* t);
 * and checks the library with
 *     extern "C" uint32_t mlxn_emu_kernel_abi(void);   // == MLXN_EMU_KERNEL_ABI
 * Per kernel, the bytes of threadgroup memory its `threadgroup` variables
 * (declared in its body and in the functions it calls) take, each rounded up
 * to 16, as hooks->threadgroup_static allocates them:
 *     extern "C" uint64_t mlxn_emu_kernel_static_threadgroup_<host_name>(void);
 * The kernel code reaches the runtime only through t->hooks, so the kernel
 * library needs no symbol of the runtime's.
 *
 * Fibers of one threadgroup always run on one OS thread, one at a time, and
 * switch only inside hook calls. The shim keeps the running thread's
 * mlxn_emu_thread* in a thread_local and restores it after every hook call.
 */
#ifndef MLXN_EMU_KERNEL_ABI_H
#define MLXN_EMU_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLXN_EMU_KERNEL_ABI 2u
#define MLXN_EMU_MAX_BINDINGS 31u
#define MLXN_EMU_SIMD_WIDTH 32u

/* Where in the .metal source a sync point or an access is. */
typedef struct mlxn_emu_site {
  const char* file;
  uint32_t line;
  uint32_t column;
} mlxn_emu_site;

/* A bound range of memory; ptr == 0 when the index is not bound. */
typedef struct mlxn_emu_binding {
  uint8_t* ptr;
  uint64_t length;
} mlxn_emu_binding;

/* Address spaces, for reports. */
#define MLXN_EMU_SPACE_DEVICE      1u
#define MLXN_EMU_SPACE_CONSTANT    2u
#define MLXN_EMU_SPACE_THREADGROUP 3u

/* The binding number that an out_of_bounds report carries for a threadgroup
 * variable declared in a kernel body: this bit | its threadgroup_static id. */
#define MLXN_EMU_BINDING_STATIC 0x80000000u

typedef struct mlxn_emu_thread mlxn_emu_thread;

typedef struct mlxn_emu_hooks {
  /* Blocks until every live thread of the threadgroup reaches a threadgroup
   * barrier. If they wait at different sites, the dispatch fails naming both
   * sites and the threads do not return (the runtime unwinds them). */
  void (*threadgroup_barrier)(mlxn_emu_thread* t, mlxn_emu_site site, uint32_t mem_flags);
  /* Same, over the live threads of the simdgroup. */
  void (*simdgroup_barrier)(mlxn_emu_thread* t, mlxn_emu_site site, uint32_t mem_flags);
  /* A simd collective. Lanes of the simdgroup that call it at the same site
   * are the active lanes; each gives `size` bytes (mine); once the lanes are
   * released, each active lane gets a pointer to all active lanes' bytes,
   * lane l's at [l * size] (inactive lanes' slots are zero), and *mask holds
   * the active lanes. The gathered bytes are shared by the simdgroup's lanes
   * and stay valid until the calling lane's next hook call. size <= 256. */
  const void* (*simd_exchange)(mlxn_emu_thread* t, mlxn_emu_site site,
                               const void* mine, uint32_t size, uint32_t* mask);
  /* An access outside its binding or outside threadgroup memory. The runtime
   * records the first such error of the dispatch (kernel, space, binding,
   * byte offset, access size, binding length, site) and returns scratch
   * memory of at least `size` bytes so the thread can go on harmlessly. */
  void* (*out_of_bounds)(mlxn_emu_thread* t, uint32_t space, uint32_t binding,
                         int64_t offset, uint64_t size, uint64_t length,
                         mlxn_emu_site site);
  /* Random schedule: the shim calls this when t->preempt_countdown reaches 0
   * at a device- or threadgroup-memory access; the runtime may switch to
   * another thread and re-arms the countdown. */
  void (*preempt)(mlxn_emu_thread* t);
  /* Storage of a `threadgroup` variable declared in a kernel body: the same
   * zero-initialized memory for every thread of the threadgroup, keyed by id.
   * Counts towards the threadgroup-memory limit; over it the dispatch fails. */
  void* (*threadgroup_static)(mlxn_emu_thread* t, uint32_t id, uint64_t size, uint64_t align);
  /* Ends the dispatch with an error message (does not return). */
  void (*fail)(mlxn_emu_thread* t, const char* message, mlxn_emu_site site);
} mlxn_emu_hooks;

struct mlxn_emu_thread {
  const mlxn_emu_hooks* hooks;
  const mlxn_emu_binding* buffers;      /* [MLXN_EMU_MAX_BINDINGS], incl. inline bytes */
  const mlxn_emu_binding* threadgroup;  /* [MLXN_EMU_MAX_BINDINGS] dynamic threadgroup memory */
  const char* kernel_name;
  /* Metal builtins. */
  uint32_t thread_position_in_grid[3];
  uint32_t threadgroup_position_in_grid[3];
  uint32_t thread_position_in_threadgroup[3];
  uint32_t threads_per_threadgroup[3];
  uint32_t threadgroups_per_grid[3];
  uint32_t threads_per_grid[3];
  uint32_t thread_index_in_threadgroup;
  uint32_t thread_index_in_simdgroup;
  uint32_t simdgroup_index_in_threadgroup;
  uint32_t simdgroups_per_threadgroup;
  uint32_t threads_per_simdgroup;
  /* Random schedule: decremented by the shim at each device- and
   * threadgroup-memory access; UINT32_MAX and never decremented in the
   * sequential schedule. */
  uint32_t preempt_countdown;
  uint32_t random_schedule;
  void* runtime; /* opaque to kernel code */
};

#ifdef __cplusplus
}
#endif
#endif
