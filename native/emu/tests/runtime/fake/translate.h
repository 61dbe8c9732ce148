// The translator's interface (native/emu/translate.h), declared here so that
// the runtime tests build before and independently of the real translator.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mlxn::emu {
struct FunctionConstant { uint32_t index; uint32_t type; uint32_t bits; };
struct KernelInfo {
  std::string host_name;
  std::string symbol;
  std::vector<uint32_t> buffer_indices;
  std::vector<uint32_t> threadgroup_indices;
  uint32_t max_total_threads_per_threadgroup = 0;
};
struct Translation { std::string cpp; std::vector<KernelInfo> kernels; };
bool translate(const std::string& source, const std::string& name,
               const std::vector<FunctionConstant>& constants, Translation* out, std::string* error);
extern const char* const kCompileFlags[];
}  // namespace mlxn::emu
