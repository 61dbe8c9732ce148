// Small helpers shared by the emulator runtime: status messages (those of
// native/common/messages.h), hashing, environment lookups.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../common/messages.h"
#include "../include/mlx_native.h"

namespace mlxn::emu {

using mlxn::common::ok_msg;
using mlxn::common::set_msg;
using mlxn::common::write_string;

// 128-bit FNV-1a style hash (two independent 64-bit lanes), good enough to key
// an on-disk cache whose entries are content-addressed.
struct Hasher {
  uint64_t a = 0xcbf29ce484222325ull;
  uint64_t b = 0x84222325cbf29ce4ull;
  void add(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      a = (a ^ p[i]) * 0x100000001b3ull;
      b = (b ^ p[i]) * 0x00000100000001b3ull ^ (b >> 29);
    }
  }
  void add(const std::string& s) {
    uint64_t n = s.size();
    add(&n, sizeof n);
    add(s.data(), s.size());
  }
  std::string hex() const {
    static const char* digits = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
      out[i] = digits[(a >> (60 - 4 * i)) & 15];
      out[16 + i] = digits[(b >> (60 - 4 * i)) & 15];
    }
    return out;
  }
};

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

}  // namespace mlxn::emu
