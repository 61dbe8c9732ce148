// util.h: the parts of the CUDA backend that need no GPU: hashing, the
// on-disk cache of compiled images, kernel entry names and parameter sizes read
// from an image, and function-constant records turned into -D options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlxn_cuda {


// Kernel entry names of a compiled image, sorted: for a CUBIN (an ELF file)
// the global function symbols marked STO_CUDA_ENTRY; for PTX the `.entry`
// directives. Empty when the image cannot be parsed.
std::vector<std::string> kernel_names_of_image(const std::string& image, bool is_ptx);

// The sizes in bytes of the parameters of the entry `kernel`, in declaration
// order, read from a CUBIN's .nv.info.<kernel> section (the EIATTR_KPARAM_INFO
// records nvcc and NVRTC write; see util.cpp). False, with *sizes untouched,
// when the image does not say: PTX (the driver compiles it; the parameters are
// not read from its text), no such section, or records this parser does not
// read or that disagree with each other.
bool kernel_param_sizes_of_image(const std::string& image, bool is_ptx,
                                 const std::string& kernel, std::vector<uint32_t>* sizes);

// One function-constant record as the NVRTC option "-DMLXN_FC_<index>=<value>".
// bool: 0 or 1; i32/i16: signed decimal; u32/u16: decimal with a `u` suffix;
// f32/f16: a parenthesised float literal (hex-float, exact); infinities and
// NaN as __int_as_float(<bits>) (device code only: they have no literal). An unknown type, or a bool
// whose bits are neither 0 nor 1, returns false with *err set.
bool constant_define(uint32_t index, uint32_t type, uint32_t bits, std::string* out,
                     std::string* err);

// The cache folder: MLX_NATIVE_CUDA_CACHE, else <user cache>/mlx-native/cuda
// ($XDG_CACHE_HOME, $HOME/.cache or the user database's home), used only when
// it is private (native/common/private_cache.h); "" when caching is off
// (MLX_NATIVE_CUDA_CACHE=off), no folder is known, or it is not private.
std::string cache_dir();

// Cache entries are files <dir>/<sha256(key)>.bin in the format of
// native/common/private_cache.h: the full key and the SHA-256 of the image,
// both checked on load, so a collision, a torn or an altered file reads as a
// miss (and is replaced by the next store). Stores write an exclusive
// temporary file and rename it. Failures are silent: the cache only saves
// compile time.
bool cache_load(const std::string& dir, const std::string& key, std::string* image);
void cache_store(const std::string& dir, const std::string& key, const std::string& image);

}  // namespace mlxn_cuda
