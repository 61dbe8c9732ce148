// Core of the CPU metal_stdlib shim: scalar types, the running thread's
// context, call sites, and the hook-call discipline.
//
// Fibers switch only inside hook calls (mlxn_emu_kernel_abi.h), so every hook
// call goes through mlxn::call_hook-style code that saves the current
// mlxn_emu_thread* before the call and writes it back after: the fiber that
// resumes is the one whose pointer must be current.
#ifndef MLXN_CORE_H
#define MLXN_CORE_H

#include <stdint.h>
#include <stddef.h>
#include <source_location>
#include <type_traits>

#include "mlxn_emu_kernel_abi.h"

// Metal's scalar type names live in the global namespace (as in MSL).
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
// half: IEEE binary16, rounded after every operation (the library is built
// with -ffloat16-excess-precision=none). bfloat: bfloat16, conversions from
// float round to nearest even; arithmetic rounds after every operation
// (-fbfloat16-excess-precision=none).
typedef _Float16 half;
typedef __bf16 bfloat;

// Conversions to bfloat compile to calls of these compiler-runtime functions,
// which the host's libgcc may lack (it has them only from GCC 13). Defined
// here (weak, hidden, kept even when unreferenced in the IR: the backend
// emits the calls), so each kernel library carries its own: round to
// nearest even, NaN stays a quiet NaN.
extern "C" {
__attribute__((weak, used, visibility("hidden"))) __bf16 __truncsfbf2(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  uint16_t h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h = uint16_t((u >> 16) | 0x40u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    h = uint16_t(u >> 16);
  }
  return __builtin_bit_cast(__bf16, h);
}
// From double through float: the double is first rounded to float, so a
// value within half a float ulp of a bfloat tie can round differently from
// a direct conversion (kernels convert from float, which is exact here).
__attribute__((weak, used, visibility("hidden"))) __bf16 __truncdfbf2(double d) {
  return __truncsfbf2(float(d));
}
}

namespace mlxn {

// The GPU thread that runs on this OS thread right now. The entry wrapper
// sets it; hook calls restore it (another fiber may have run meanwhile).
inline thread_local mlxn_emu_thread* current_thread = nullptr;

inline mlxn_emu_thread* cur() { return current_thread; }

// Source position of a sync point or access, as the kernel's .metal file
// names it (the translated file carries #line directives).
using srcloc = std::source_location;

inline mlxn_emu_site to_site(const srcloc& l) {
  mlxn_emu_site s;
  s.file = l.file_name();
  s.line = l.line();
  s.column = l.column();
  return s;
}

[[noreturn]] inline void fail(const char* message, const srcloc& l = srcloc::current()) {
  mlxn_emu_thread* t = cur();
  t->hooks->fail(t, message, to_site(l));
  __builtin_unreachable();
}

// Scalar classification used by the vector and math templates.
template <class T> struct is_scalar_t : std::false_type {};
#define MLXN_SCALAR(T) template <> struct is_scalar_t<T> : std::true_type {};
MLXN_SCALAR(bool)
MLXN_SCALAR(char)
MLXN_SCALAR(signed char)
MLXN_SCALAR(unsigned char)
MLXN_SCALAR(short)
MLXN_SCALAR(unsigned short)
MLXN_SCALAR(int)
MLXN_SCALAR(unsigned int)
MLXN_SCALAR(long)
MLXN_SCALAR(unsigned long)
MLXN_SCALAR(long long)
MLXN_SCALAR(unsigned long long)
MLXN_SCALAR(_Float16)
MLXN_SCALAR(__bf16)
MLXN_SCALAR(float)
MLXN_SCALAR(double)
#undef MLXN_SCALAR
template <class T>
inline constexpr bool is_scalar = is_scalar_t<std::remove_cv_t<std::remove_reference_t<T>>>::value;

template <class T>
inline constexpr bool is_float_scalar =
    std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat> ||
    std::is_same_v<T, double>;

}  // namespace mlxn

#endif
