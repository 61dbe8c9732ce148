// The status messages of the C ABI (native/include/mlx_native.h: a call
// that takes msg / msg_cap writes its refusal there, NUL-terminated, or ""
// on success), shared by native/emu and native/cuda. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "../include/mlx_native.h"

namespace mlxn::common {

// Writes `text` NUL-terminated into msg (truncated to cap) and returns code.
inline mlxn_status set_msg(char* msg, uint64_t cap, mlxn_status code, const std::string& text) {
  if (msg && cap > 0) {
    const size_t n = text.size() < cap - 1 ? text.size() : size_t(cap - 1);
    std::memcpy(msg, text.data(), n);
    msg[n] = '\0';
  }
  return code;
}

// Writes "" into msg and returns MLXN_OK.
inline mlxn_status ok_msg(char* msg, uint64_t cap) {
  if (msg && cap > 0) msg[0] = '\0';
  return MLXN_OK;
}

// Writes `s` NUL-terminated into out (truncated to cap; nothing where out is
// null or cap is 0) and returns s's length in bytes without the NUL: the
// C ABI's string getters (mlxn_device_name, mlxn_library_kernel_names), whose
// caller retries with a cap above the length where it was not.
inline uint64_t write_string(const std::string& s, char* out, uint64_t cap) {
  if (out && cap > 0) {
    const size_t n = s.size() < cap - 1 ? s.size() : size_t(cap - 1);
    std::memcpy(out, s.data(), n);
    out[n] = '\0';
  }
  return s.size();
}

}  // namespace mlxn::common
