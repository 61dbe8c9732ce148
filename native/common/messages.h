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

}  // namespace mlxn::common
