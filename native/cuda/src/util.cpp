// util.cpp: see util.h.
#include "util.h"

#include "../../common/private_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "../../include/mlx_native.h"

namespace mlxn_cuda {

namespace {

template <typename T>
bool get(const std::string& s, uint64_t off, T* out) {
  if (off > s.size() || s.size() - off < sizeof(T)) return false;
  std::memcpy(out, s.data() + off, sizeof(T));
  return true;
}

struct Section {
  uint32_t name, type, link;
  uint64_t off, size, entsize;
};

// The section headers of a 64-bit ELF image and the index of its section-name
// table; false when the image is not such a file or a header lies outside it.
bool sections_of_elf(const std::string& img, std::vector<Section>* out, uint16_t* shstrndx) {
  if (img.size() < 64 || std::memcmp(img.data(), "\x7f" "ELF", 4) != 0 || img[4] != 2)
    return false;  // not a 64-bit ELF file
  uint64_t shoff;
  uint16_t shentsize, shnum;
  if (!get(img, 0x28, &shoff) || !get(img, 0x3A, &shentsize) || !get(img, 0x3C, &shnum) ||
      !get(img, 0x3E, shstrndx))
    return false;
  if (shentsize < 64) return false;
  out->clear();
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t sh = shoff + static_cast<uint64_t>(i) * shentsize;
    Section s;
    if (!get(img, sh, &s.name) || !get(img, sh + 4, &s.type) || !get(img, sh + 24, &s.off) ||
        !get(img, sh + 32, &s.size) || !get(img, sh + 40, &s.link) ||
        !get(img, sh + 56, &s.entsize))
      return false;
    out->push_back(s);
  }
  return true;
}

// Whether a section's bytes lie inside the image.
bool inside(const std::string& img, const Section& s) {
  return s.off <= img.size() && img.size() - s.off >= s.size;
}

std::vector<std::string> names_of_elf(const std::string& img) {
  std::vector<std::string> names;
  std::vector<Section> secs;
  uint16_t shstrndx;
  if (!sections_of_elf(img, &secs, &shstrndx)) return names;
  for (const Section& sym : secs) {
    if (sym.type != 2 /* SHT_SYMTAB */ || sym.entsize < 24) continue;
    if (sym.link >= secs.size()) return names;
    const Section& str = secs[sym.link];
    if (!inside(img, str)) return names;
    for (uint64_t s = 0; s + sym.entsize <= sym.size; s += sym.entsize) {
      uint32_t name;
      uint8_t info, other;
      if (!get(img, sym.off + s, &name) || !get(img, sym.off + s + 4, &info) ||
          !get(img, sym.off + s + 5, &other))
        return names;
      const bool func = (info & 0xF) == 2;          // STT_FUNC
      const bool global = (info >> 4) != 0;         // not STB_LOCAL
      const bool entry = (other & 0x10) != 0;       // STO_CUDA_ENTRY
      if (!func || !global || !entry || name >= str.size) continue;
      const char* p = img.data() + str.off + name;
      names.emplace_back(p, strnlen(p, str.size - name));
    }
  }
  return names;
}

// The records of a kernel's .nv.info.<kernel> section that say what its
// parameters are. Each record is a format byte, an attribute byte and a u16:
// format 0x04 (EIFMT_SVAL) is followed by a payload of that u16's size;
// 0x01 (EIFMT_NVAL), 0x02 (EIFMT_BVAL) and 0x03 (EIFMT_HVAL) hold their value,
// if any, in those 4 bytes. Parameters are described by
//   EIATTR_KPARAM_INFO    (0x17) u32 index, u16 ordinal, u16 offset, u32 flags
//                                 whose bits 18..31 are the size in bytes;
//   EIATTR_KPARAM_INFO_V2 (0x45) the same but with the size in the u32's low
//                                 16 bits (flags above), which nvcc 13.0 writes
//                                 instead for all parameters of a kernel whose
//                                 parameters take more than about 4 KiB;
// one record per parameter, in any order. EIATTR_CBANK_PARAM_SIZE (0x19, HVAL)
// is the bytes the parameters occupy: the end of the last one.
bool param_sizes_of_elf(const std::string& img, const std::string& kernel,
                        std::vector<uint32_t>* sizes) {
  std::vector<Section> secs;
  uint16_t shstrndx;
  if (!sections_of_elf(img, &secs, &shstrndx) || shstrndx >= secs.size()) return false;
  const Section& names = secs[shstrndx];
  if (!inside(img, names)) return false;
  const std::string want = ".nv.info." + kernel;
  const Section* info = nullptr;
  for (const Section& s : secs) {
    if (s.name >= names.size || names.size - s.name < want.size() + 1) continue;
    if (img.compare(names.off + s.name, want.size() + 1, want.c_str(), want.size() + 1) == 0) {
      info = &s;
      break;
    }
  }
  if (!info || !inside(img, *info)) return false;

  struct Param {
    uint16_t ordinal, offset;
    uint32_t size;
  };
  std::vector<Param> params;
  bool have_total = false;
  uint32_t total = 0;
  const uint64_t end = info->off + info->size;
  uint64_t o = info->off;
  while (o < end) {
    if (end - o < 4) return false;
    const uint8_t fmt = static_cast<uint8_t>(img[o]), attr = static_cast<uint8_t>(img[o + 1]);
    uint16_t v = 0;
    get(img, o + 2, &v);
    if (fmt == 0x04) {
      if (end - o - 4 < v) return false;
      if (attr == 0x17 || attr == 0x45) {
        Param p{};
        uint32_t word = 0;
        if (v < 12) return false;
        get(img, o + 8, &p.ordinal);
        get(img, o + 10, &p.offset);
        get(img, o + 12, &word);
        p.size = attr == 0x17 ? word >> 18 : word & 0xFFFF;
        params.push_back(p);
      }
      o += 4 + static_cast<uint64_t>(v);
    } else if (fmt == 0x01 || fmt == 0x02 || fmt == 0x03) {
      if (fmt == 0x03 && attr == 0x19) {
        have_total = true;
        total = v;
      }
      o += 4;
    } else {
      return false;  // a record format this parser does not know
    }
  }
  // Ordinals must be 0..n-1, each once, and the last parameter must end where
  // EIATTR_CBANK_PARAM_SIZE says (a kernel without parameters has no such
  // record): anything else means records this parser does not read.
  std::vector<uint32_t> by_ordinal(params.size(), 0);
  std::vector<bool> seen(params.size(), false);
  uint64_t last_end = 0;
  for (const Param& p : params) {
    if (p.ordinal >= params.size() || seen[p.ordinal]) return false;
    seen[p.ordinal] = true;
    by_ordinal[p.ordinal] = p.size;
    last_end = std::max<uint64_t>(last_end, static_cast<uint64_t>(p.offset) + p.size);
  }
  if (params.empty() ? have_total && total != 0 : !have_total || total != last_end)
    return false;
  *sizes = by_ordinal;
  return true;
}

std::vector<std::string> names_of_ptx(const std::string& ptx) {
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string::npos) {
    pos += 6;
    if (pos >= ptx.size() || (ptx[pos] != ' ' && ptx[pos] != '\t')) continue;
    while (pos < ptx.size() && (ptx[pos] == ' ' || ptx[pos] == '\t')) ++pos;
    size_t end = pos;
    while (end < ptx.size() && ptx[end] != '(' && ptx[end] != ' ' && ptx[end] != '\t' &&
           ptx[end] != '\n' && ptx[end] != '\r')
      ++end;
    if (end > pos) names.push_back(ptx.substr(pos, end - pos));
    pos = end;
  }
  return names;
}

// Finite values as exact hex-float literals (constant expressions); infinities
// and NaN, which have no literal, through the __int_as_float intrinsic with the
// value's own f32 bits (NaN payloads kept), usable in device code.
std::string float_literal(float v) {
  char buf[64];
  if (std::isnan(v) || std::isinf(v)) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    std::snprintf(buf, sizeof buf, "(__int_as_float(0x%08xu))", bits);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "(%af)", static_cast<double>(v));
  return buf;
}

double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(man), -24);
  else if (exp == 31) v = man ? std::nan("") : INFINITY;
  else v = std::ldexp(static_cast<double>(man | 0x400), exp - 25);
  return sign ? -v : v;
}


}  // namespace

std::vector<std::string> kernel_names_of_image(const std::string& image, bool is_ptx) {
  std::vector<std::string> n = is_ptx ? names_of_ptx(image) : names_of_elf(image);
  std::sort(n.begin(), n.end());
  n.erase(std::unique(n.begin(), n.end()), n.end());
  return n;
}

bool kernel_param_sizes_of_image(const std::string& image, bool is_ptx,
                                 const std::string& kernel, std::vector<uint32_t>* sizes) {
  return !is_ptx && param_sizes_of_elf(image, kernel, sizes);
}

bool constant_define(uint32_t index, uint32_t type, uint32_t bits, std::string* out,
                     std::string* err) {
  std::string v;
  switch (type) {
    case MLXN_CONST_BOOL:
      if (bits > 1) {
        *err = "function constant " + std::to_string(index) + ": bool bits must be 0 or 1 (got " +
               std::to_string(bits) + ")";
        return false;
      }
      v = bits ? "1" : "0";
      break;
    case MLXN_CONST_I32: {
      int32_t x;
      std::memcpy(&x, &bits, 4);
      v = x == INT32_MIN ? "(-2147483647-1)" : "(" + std::to_string(x) + ")";
      break;
    }
    case MLXN_CONST_U32: v = std::to_string(bits) + "u"; break;
    case MLXN_CONST_F32: {
      float f;
      std::memcpy(&f, &bits, 4);
      v = float_literal(f);
      break;
    }
    case MLXN_CONST_F16: v = float_literal(static_cast<float>(half_to_double(static_cast<uint16_t>(bits)))); break;
    case MLXN_CONST_I16: v = "(" + std::to_string(static_cast<int16_t>(bits & 0xFFFF)) + ")"; break;
    case MLXN_CONST_U16: v = std::to_string(bits & 0xFFFF) + "u"; break;
    default:
      *err = "function constant " + std::to_string(index) + ": unknown type " +
             std::to_string(type) + " (expected MLXN_CONST_BOOL..MLXN_CONST_U16, 1..7)";
      return false;
  }
  *out = "-DMLXN_FC_" + std::to_string(index) + "=" + v;
  return true;
}

std::string cache_dir() {
  std::string want;
  const char* env = std::getenv("MLX_NATIVE_CUDA_CACHE");
  if (env && *env) {
    if (std::strcmp(env, "off") == 0) return std::string();
    want = env;
  } else if (std::string base = mlxn::cache::user_cache_base(); !base.empty()) {
    want = base + "/mlx-native/cuda";
  }
  std::string why;
  // A folder that is not private is not used: compiles are not cached then.
  return want.empty() ? std::string() : mlxn::cache::private_dir(want, &why);
}

namespace {
std::string entry_name(const std::string& key) {
  return mlxn::cache::Sha256::hex(mlxn::cache::sha256(key)) + ".bin";
}
}  // namespace

bool cache_load(const std::string& dir, const std::string& key, std::string* image) {
  return mlxn::cache::load_entry(dir, entry_name(key), key, image);
}

void cache_store(const std::string& dir, const std::string& key, const std::string& image) {
  mlxn::cache::store_entry(dir, entry_name(key), key, image);
}

}  // namespace mlxn_cuda
