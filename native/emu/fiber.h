// Fibers: one per emulated GPU thread. A fiber runs on its own mmap'd stack
// (with a guard page below it) and gives control back only by switching to
// the scheduler context explicitly; there is no preemption by the OS.
//
// The context switch is hand-written assembly for x86-64 and aarch64 (it saves
// only the callee-saved registers, so a switch costs a few nanoseconds);
// other targets use ucontext.
#pragma once

#include <cstddef>
#include <cstdint>

#if !defined(__x86_64__) && !defined(__aarch64__)
#define MLXN_EMU_UCONTEXT 1
#include <ucontext.h>
#endif

namespace mlxn::emu {

// A saved execution context.
struct Context {
#if MLXN_EMU_UCONTEXT
  ucontext_t uc;
#else
  void* sp = nullptr;
#endif
};

// Stack memory for a fiber: [guard page][usable stack]. Reused across runs.
class Stack {
 public:
  Stack() = default;
  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  // Maps the stack; false when the mapping fails.
  bool allocate(size_t usable_bytes);
  void* base() const { return usable_; }
  size_t size() const { return usable_size_; }

 private:
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  void* usable_ = nullptr;
  size_t usable_size_ = 0;
};

using FiberEntry = void (*)(void* arg);

// Prepares `ctx` so that the first switch to it calls entry(arg) on `stack`.
// entry must never return: it ends by switching to another context.
void context_init(Context* ctx, Stack* stack, FiberEntry entry, void* arg);

// Saves the current context into `from` and resumes `to`.
void context_switch(Context* from, Context* to);

}  // namespace mlxn::emu
