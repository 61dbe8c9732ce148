// Run-time compilation of Metal source for the emulator: translate to C++,
// compile with clang++ against the CPU metal_stdlib shim into a shared
// object (cached on disk by content), load it with dlopen.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../include/mlx_native.h"
#include "executor.h"

namespace mlxn::emu {

// A shim header embedded into the runtime library at build time
// (scripts/build-emu.sh generates the table from native/emu/shim/).
struct EmbeddedFile {
  const char* path;  // relative to the shim directory
  const char* data;
  unsigned long size;
};
extern const EmbeddedFile kShimFiles[];
extern const unsigned long kShimFileCount;

// Loaded kernel code: the dlopen handle and one Kernel per entry point.
struct Code {
  void* handle = nullptr;
  int memfd = -1;  // the memory file the library was loaded from (Linux)
  std::vector<std::unique_ptr<Kernel>> kernels;
  ~Code();
  Kernel* find(const std::string& name) const;
};

struct ConstantValue {
  uint32_t index, type, bits;
};

// Compiles `source` (named `name` in diagnostics). On failure returns the
// status (MLXN_ERR_SHADER_COMPILATION for errors in the source, with the
// compiler's text) and fills *error.
mlxn_status compile_metal(const std::string& source, const std::string& name,
                          const std::vector<ConstantValue>& constants, std::shared_ptr<Code>* out,
                          std::string* error);

// The directory the emulator caches compiled kernels in.
std::string cache_dir();

}  // namespace mlxn::emu
