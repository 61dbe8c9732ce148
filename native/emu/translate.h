// Metal Shading Language -> C++ translation for the emulator.
//
// translate() rewrites a .metal source into C++ that compiles against the CPU
// metal_stdlib in shim/ (see shim/metal_stdlib) and exports, per kernel,
//     extern "C" void mlxn_emu_kernel_<host_name>(mlxn_emu_thread*);
// plus extern "C" uint32_t mlxn_emu_kernel_abi(void) (shim/mlxn_emu_kernel_abi.h).
//
// It is a token rewriter (comments and string literals are skipped, layout is
// kept): the body keeps the .metal file's line numbers through #line, so
// clang's diagnostics and the sync-point sites name the .metal file and line.
// What it rewrites:
//   - `device`/`constant`/`threadgroup` pointers -> mlxn::dptr<T, space>
//     (checked); `thread` is dropped; references lose the address space
//     (`constant T&` becomes `const T&`); static_cast/reinterpret_cast to such
//     pointers -> mlxn::ptr_cast;
//   - `threadgroup T x[N]...;` in function bodies -> storage from the runtime
//     (hooks->threadgroup_static), one id per declaration; per kernel an
//     exported mlxn_emu_kernel_static_threadgroup_<host_name>() sums the
//     sizes of the declarations in its body and in the functions it calls
//     (found by name, transitively; those in #define bodies are not counted);
//   - `&x[i]` -> mlxn::elem_addr(x, i): on a checked pointer, the checked
//     pointer x + i;
//   - `constant T x [[function_constant(i)]];` -> a constexpr with the value
//     from `constants` (zero when not given);
//     is_function_constant_defined(x) -> true/false;
//   - `constant` program-scope variables -> const;
//   - floating literals: no suffix -> float (`1.0` is a float in MSL), `h` ->
//     half, `bf` -> bfloat;
//   - kernels: attributes are stripped from the parameters and a wrapper per
//     entry point builds the arguments (mlxn::run_kernel); template kernels
//     are entry points through `template [[host_name("x")]] kernel T f<...>;`
//     instantiations, which are removed (the wrapper calls f<...> itself).
#ifndef MLXN_EMU_TRANSLATE_H
#define MLXN_EMU_TRANSLATE_H

#include <stdint.h>

#include <string>
#include <vector>

namespace mlxn::emu {

struct FunctionConstant {
  uint32_t index;
  uint32_t type;  // MLXN_CONST_* (mlx_native.h)
  uint32_t bits;  // the value in its own type's bit pattern (bool: 0 or 1)
};

struct KernelInfo {
  std::string host_name;                      // name pipelines are created by
  std::string symbol;                         // "mlxn_emu_kernel_" + host_name
  std::vector<uint32_t> buffer_indices;       // [[buffer(n)]] params, in order
  std::vector<uint32_t> threadgroup_indices;  // [[threadgroup(n)]] params, in order
  uint32_t max_total_threads_per_threadgroup = 0;  // 0 if not declared
};

struct Translation {
  std::string cpp;
  std::vector<KernelInfo> kernels;
};

// Returns false and sets *error ("<name>:<line>:<col>: <message>") for source
// it cannot translate. name is the file name diagnostics cite.
bool translate(const std::string& source, const std::string& name,
               const std::vector<FunctionConstant>& constants, Translation* out,
               std::string* error);

// Flags for compiling the translated C++ into the kernel library, in this
// order, followed by the caller's: -I <native/emu/shim>, the input file, and
// -o <library.so>. Null-terminated.
//   -std=c++20                 std::source_location, concepts
//   -O1                        fast to compile, fast enough to run
//   -fPIC -shared              a library for dlopen
//   -fno-exceptions -fno-rtti  nothing is thrown across the hooks
//   -fvisibility=hidden        only the mlxn_emu_kernel_* entries (marked
//                              default) and mlxn_emu_kernel_abi are exported
//   -ffp-contract=off          every float operation rounds on its own, so
//                              results do not depend on the host's FMA
//   -fno-math-errno            math builtins compile to instructions
//   -Xclang -f(b)float16-excess-precision=none
//                              half and bfloat round after every operation
//                              (the clang 19 driver accepts them only as
//                              -Xclang options)
//   -Wno-unknown-attributes    attributes MSL has and clang does not
//   -ferror-limit=20           keep diagnostics short
extern const char* const kCompileFlags[];

}  // namespace mlxn::emu

#endif
