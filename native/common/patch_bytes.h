// The rules of mlxn_encoder_patch_bytes (native/include/mlx_native.h) on
// what it patches, with the words of each refusal, shared by native/emu and
// native/cuda: each backend lists a recorded dispatch's bytes bindings and
// copies the data where these checks point. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlxn::common {

// "" when dispatch_index names one of the `count` recorded dispatches; else the refusal.
inline std::string patch_dispatch_refusal(const std::string& fn, uint64_t count, uint64_t dispatch_index) {
  if (dispatch_index < count) return "";
  return fn + ": dispatch_index must be below " + std::to_string(count) + ", the recorded dispatch count (got " +
         std::to_string(dispatch_index) + ")";
}

// A bytes binding of a recorded dispatch: its binding index and recorded length.
struct BytesBinding {
  uint32_t index;
  uint64_t length;
};

// "" when binding_index is one of `bytes`, the bytes bindings of dispatch
// dispatch_index (of kernel `kernel`), len its recorded length and data
// non-null where len > 0, with *which its position in `bytes`; else the refusal.
inline std::string patch_binding_refusal(const std::string& fn, uint64_t dispatch_index, const std::string& kernel,
                                         const std::vector<BytesBinding>& bytes, uint32_t binding_index, uint64_t len,
                                         const void* data, size_t* which) {
  const BytesBinding* hit = nullptr;
  std::string have;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i].index == binding_index) {
      hit = &bytes[i];
      *which = i;
    }
    have += (have.empty() ? "" : ", ") + std::to_string(bytes[i].index);
  }
  if (!hit)
    return fn + ": binding_index must be a bytes binding of dispatch " + std::to_string(dispatch_index) + " (kernel '" + kernel +
           "': " + (have.empty() ? "none" : have) + ") (got " + std::to_string(binding_index) + ")";
  if (len != hit->length)
    return fn + ": len must be " + std::to_string(hit->length) + ", the recorded length (got " + std::to_string(len) + ")";
  if (!data && len > 0) return fn + ": data must be non-NULL (got NULL)";
  return "";
}

}  // namespace mlxn::common
