#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

namespace mlxn::emu {

static size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

Stack::~Stack() {
  if (mapping_) munmap(mapping_, mapping_size_);
}

bool Stack::allocate(size_t usable_bytes) {
  const size_t page = page_size();
  usable_bytes = (usable_bytes + page - 1) / page * page;
  const size_t total = usable_bytes + page;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
  flags |= MAP_NORESERVE;
#endif
#ifdef MAP_STACK
  flags |= MAP_STACK;
#endif
  void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (m == MAP_FAILED) return false;
  // The lowest page is the guard: a stack overflow faults instead of
  // silently corrupting the neighbouring fiber's stack.
  if (mprotect(m, page, PROT_NONE) != 0) {
    munmap(m, total);
    return false;
  }
  mapping_ = m;
  mapping_size_ = total;
  usable_ = static_cast<uint8_t*>(m) + page;
  usable_size_ = usable_bytes;
  return true;
}

}  // namespace mlxn::emu

#if !MLXN_EMU_UCONTEXT

// mlxn_emu_ctx_switch(void** save_sp, void* new_sp): pushes the callee-saved
// registers, stores the stack pointer in *save_sp, loads new_sp and pops the
// registers saved there. mlxn_emu_ctx_start is where a new fiber "returns" to
// on its first switch: the entry function and its argument were placed in
// callee-saved registers by context_init.
#if defined(__APPLE__)
#define MLXN_SYM(x) "_" #x
#define MLXN_FUNC_TYPE(x) ""
#define MLXN_FUNC_SIZE(x) ""
#else
#define MLXN_SYM(x) #x
#define MLXN_FUNC_TYPE(x) ".type " #x ",@function\n"
#define MLXN_FUNC_SIZE(x) ".size " #x ",.-" #x "\n"
#endif
// The start of a global function x in the asm below.
#define MLXN_FUNC_BEGIN(x) ".globl " MLXN_SYM(x) "\n" MLXN_FUNC_TYPE(x) ".p2align 4\n" MLXN_SYM(x) ":\n"

extern "C" void mlxn_emu_ctx_switch(void** save_sp, void* new_sp);
extern "C" void mlxn_emu_ctx_start();

#if defined(__x86_64__)
asm(".text\n"
    MLXN_FUNC_BEGIN(mlxn_emu_ctx_switch)
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    MLXN_FUNC_SIZE(mlxn_emu_ctx_switch)
    MLXN_FUNC_BEGIN(mlxn_emu_ctx_start)
    "  movq %r12, %rdi\n"
    "  callq *%rbx\n"
    "  ud2\n"
    MLXN_FUNC_SIZE(mlxn_emu_ctx_start));
#elif defined(__aarch64__)
asm(".text\n"
    MLXN_FUNC_BEGIN(mlxn_emu_ctx_switch)
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x2, sp\n"
    "  str x2, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n"
    MLXN_FUNC_SIZE(mlxn_emu_ctx_switch)
    MLXN_FUNC_BEGIN(mlxn_emu_ctx_start)
    "  mov x0, x20\n"
    "  blr x19\n"
    "  brk #0\n"
    MLXN_FUNC_SIZE(mlxn_emu_ctx_start));
#endif

namespace mlxn::emu {

void context_init(Context* ctx, Stack* stack, FiberEntry entry, void* arg) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack->base()) + stack->size();
  top &= ~uintptr_t(15);
#if defined(__x86_64__)
  // Frame popped by mlxn_emu_ctx_switch: r15 r14 r13 r12 rbx rbp, then the
  // return address. After those 7 words rsp = top - 16, 16-byte aligned, as
  // the call in mlxn_emu_ctx_start requires.
  void** sp = reinterpret_cast<void**>(top - 16 - 7 * sizeof(void*));
  sp[0] = nullptr;                                      // r15
  sp[1] = nullptr;                                      // r14
  sp[2] = nullptr;                                      // r13
  sp[3] = arg;                                          // r12
  sp[4] = reinterpret_cast<void*>(entry);               // rbx
  sp[5] = nullptr;                                      // rbp
  sp[6] = reinterpret_cast<void*>(&mlxn_emu_ctx_start); // return address
  ctx->sp = sp;
#else
  // Frame loaded by mlxn_emu_ctx_switch: x19..x30 then d8..d15 (160 bytes).
  void** sp = reinterpret_cast<void**>(top - 160);
  for (int i = 0; i < 20; ++i) sp[i] = nullptr;
  sp[0] = reinterpret_cast<void*>(entry);               // x19
  sp[1] = arg;                                          // x20
  sp[11] = reinterpret_cast<void*>(&mlxn_emu_ctx_start); // x30 (lr)
  ctx->sp = sp;
#endif
}

void context_switch(Context* from, Context* to) { mlxn_emu_ctx_switch(&from->sp, to->sp); }

}  // namespace mlxn::emu

#else  // ucontext fallback

namespace mlxn::emu {

struct StartArgs {
  FiberEntry entry;
  void* arg;
};

static void ucontext_trampoline(unsigned hi, unsigned lo) {
  uintptr_t p = (uintptr_t(hi) << 32) | uintptr_t(lo);
  StartArgs* a = reinterpret_cast<StartArgs*>(p);
  a->entry(a->arg);
  std::abort();  // entry switches away and is never resumed past its end
}

void context_init(Context* ctx, Stack* stack, FiberEntry entry, void* arg) {
  // The start arguments live at the top of the fiber's own stack.
  uintptr_t top = reinterpret_cast<uintptr_t>(stack->base()) + stack->size();
  top = (top - sizeof(StartArgs)) & ~uintptr_t(15);
  StartArgs* a = reinterpret_cast<StartArgs*>(top);
  a->entry = entry;
  a->arg = arg;
  getcontext(&ctx->uc);
  ctx->uc.uc_stack.ss_sp = stack->base();
  ctx->uc.uc_stack.ss_size = top - reinterpret_cast<uintptr_t>(stack->base()) - 16;
  ctx->uc.uc_link = nullptr;
  uintptr_t p = reinterpret_cast<uintptr_t>(a);
  makecontext(&ctx->uc, reinterpret_cast<void (*)()>(ucontext_trampoline), 2,
              unsigned(p >> 32), unsigned(p & 0xffffffffu));
}

void context_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }

}  // namespace mlxn::emu

#endif
