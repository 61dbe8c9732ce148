// test_util.cpp: checks of the GPU-free parts of the cuda backend (util.cpp):
// hashing, function constants as -D options, the disk cache, kernel names read
// from a CUBIN and from PTX, and kernel parameter sizes read from CUBINs. Runs
// anywhere; the image checks need the fixtures that build.sh makes with nvcc,
// and are skipped without them.
// Usage: test_util [fixture-dir]
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../include/mlx_native.h"
#include "../src/util.h"
#include "../../common/private_cache.h"
#include "../../common/tests/check.h"

using namespace mlxn_cuda;


static std::string define(uint32_t index, uint32_t type, uint32_t bits) {
  std::string out, err;
  if (!constant_define(index, type, bits, &out, &err)) return "ERROR: " + err;
  return out;
}

static bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  return true;
}

static std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

static std::string sizes_text(const std::string& image, bool is_ptx, const std::string& kernel) {
  std::vector<uint32_t> sizes;
  if (!kernel_param_sizes_of_image(image, is_ptx, kernel, &sizes)) return "unknown";
  std::string s = "(";
  for (uint32_t v : sizes) s += (s.size() > 1 ? "," : "") + std::to_string(v);
  return s + ")";
}

template <typename T>
static T at(const std::string& img, uint64_t off) {
  T v{};
  if (off + sizeof(T) <= img.size()) std::memcpy(&v, img.data() + off, sizeof(T));
  return v;
}

// Offset and size of the named section of a 64-bit ELF image, read
// independently of util.cpp; false when absent.
static bool find_section(const std::string& img, const std::string& name, uint64_t* off,
                         uint64_t* size) {
  const uint64_t shoff = at<uint64_t>(img, 0x28);
  const uint16_t shentsize = at<uint16_t>(img, 0x3A), shnum = at<uint16_t>(img, 0x3C),
                 shstrndx = at<uint16_t>(img, 0x3E);
  const uint64_t names = at<uint64_t>(img, shoff + uint64_t(shstrndx) * shentsize + 24);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t sh = shoff + uint64_t(i) * shentsize;
    const uint64_t n = names + at<uint32_t>(img, sh);
    if (n < img.size() && img.compare(n, name.size() + 1, name.c_str(), name.size() + 1) == 0) {
      *off = at<uint64_t>(img, sh + 24);
      *size = at<uint64_t>(img, sh + 32);
      return true;
    }
  }
  return false;
}

// Offset of the first record with this format and attribute in a .nv.info
// section (records: format u8, attribute u8, u16, then for format 4 a payload
// of that u16's size), or 0 when there is none.
static uint64_t find_record(const std::string& img, uint64_t off, uint64_t size, uint8_t fmt,
                            uint8_t attr) {
  for (uint64_t o = off; o + 4 <= off + size;) {
    const uint8_t f = static_cast<uint8_t>(img[o]), a = static_cast<uint8_t>(img[o + 1]);
    if (f == fmt && a == attr) return o;
    o += 4 + (f == 4 ? at<uint16_t>(img, o + 2) : 0);
  }
  return 0;
}

// Parameter sizes read from CUBINs that nvcc made of params_fixture.cu for one
// architecture, and refusals of .nv.info sections altered to read wrongly.
static void check_param_sizes(const std::string& path, const std::string& arch) {
  std::string img;
  if (!read_file(path, &img)) {
    std::printf("SKIP parameter sizes for %s: no %s (this nvcc cannot make it)\n", arch.c_str(),
                path.c_str());
    return;
  }
  const struct {
    const char* kernel;
    const char* want;
  } cases[] = {
      {"p0", "()"},
      {"p1", "(8)"},
      {"p5", "(8,8,8,8,8)"},
      {"p9", "(8,8,8,8,8,8,8,8,8)"},
      {"mixed", "(8,4,12,8,1,8)"},
      {"big", "(8,20000)"},
      {"missing", "unknown"},
  };
  for (const auto& c : cases) {
    const std::string got = sizes_text(img, false, c.kernel);
    CHECK(got == c.want, "%s %s: parameter sizes %s, want %s", arch.c_str(), c.kernel,
          got.c_str(), c.want);
  }
  uint64_t off = 0, size = 0;
  CHECK(find_section(img, ".nv.info.big", &off, &size) && find_record(img, off, size, 4, 0x45),
        "%s big: described by EIATTR_KPARAM_INFO_V2 (0x45)", arch.c_str());
  CHECK(find_section(img, ".nv.info.p5", &off, &size) && find_record(img, off, size, 4, 0x17),
        "%s p5: described by EIATTR_KPARAM_INFO (0x17)", arch.c_str());

  // Alterations of p5's section, each of which the parser must refuse.
  const uint64_t kparam = find_record(img, off, size, 4, 0x17);
  const uint64_t total = find_record(img, off, size, 3, 0x19);
  CHECK(kparam != 0 && total != 0 && at<uint16_t>(img, total + 2) == 40,
        "%s p5: EIATTR_CBANK_PARAM_SIZE is 40", arch.c_str());
  if (kparam == 0 || total == 0) return;
  std::string bad = img;
  bad[total + 2] = 41;  // the parameters' end disagrees with the last parameter
  CHECK(sizes_text(bad, false, "p5") == "unknown", "%s p5: wrong CBANK_PARAM_SIZE refused",
        arch.c_str());
  bad = img;
  bad[kparam + 1] = 0x7f;  // one parameter's record becomes another attribute
  CHECK(sizes_text(bad, false, "p5") == "unknown", "%s p5: a missing parameter refused",
        arch.c_str());
  bad = img;
  const uint16_t ord = at<uint16_t>(img, kparam + 8);
  const uint16_t dup = ord == 0 ? 1 : 0;
  std::memcpy(&bad[kparam + 8], &dup, 2);  // two parameters with one ordinal
  CHECK(sizes_text(bad, false, "p5") == "unknown", "%s p5: a duplicate ordinal refused",
        arch.c_str());
  bad = img;
  bad[total] = 0x09;  // a record format the parser does not know
  CHECK(sizes_text(bad, false, "p5") == "unknown", "%s p5: an unknown record format refused",
        arch.c_str());
  bad = img;
  bad[off + 2] = bad[off + 3] = '\xff';  // the first record claims a payload past the section
  CHECK(img[off] == 4 && sizes_text(bad, false, "p5") == "unknown",
        "%s p5: a record past the section refused", arch.c_str());
  CHECK(sizes_text(img.substr(0, off + size / 2), false, "p5") == "unknown",
        "%s p5: a cut image refused", arch.c_str());
  CHECK(sizes_text(img, true, "p5") == "unknown", "%s: an image read as PTX says nothing",
        arch.c_str());
}

int main(int argc, char** argv) {
  // SHA-256 (native/common/private_cache.h), FIPS 180-4 test vectors.
  using mlxn::cache::Sha256;
  using mlxn::cache::sha256;
  CHECK(Sha256::hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sha256 of empty");
  CHECK(Sha256::hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256 of abc");
  CHECK(Sha256::hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "sha256 of the two-block vector");
  CHECK(Sha256::hex(sha256(std::string(1000000, 'a'))) ==
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "sha256 of a million a");

  struct {
    uint32_t index, type, bits;
    const char* want;
  } defs[] = {
      {0, MLXN_CONST_BOOL, 1, "-DMLXN_FC_0=1"},
      {1, MLXN_CONST_BOOL, 0, "-DMLXN_FC_1=0"},
      {2, MLXN_CONST_I32, static_cast<uint32_t>(-7), "-DMLXN_FC_2=(-7)"},
      {3, MLXN_CONST_I32, 0x80000000u, "-DMLXN_FC_3=(-2147483647-1)"},
      {4, MLXN_CONST_U32, 4000000000u, "-DMLXN_FC_4=4000000000u"},
      {5, MLXN_CONST_F32, 0xC0200000u, "-DMLXN_FC_5=(-0x1.4p+1f)"},  // -2.5
      {6, MLXN_CONST_F32, 0x00000000u, "-DMLXN_FC_6=(0x0p+0f)"},
      {7, MLXN_CONST_F32, 0x7F800000u, "-DMLXN_FC_7=(__int_as_float(0x7f800000u))"},
      {8, MLXN_CONST_F32, 0x7FC00001u, "-DMLXN_FC_8=(__int_as_float(0x7fc00001u))"},
      {9, MLXN_CONST_F16, 0x3E00u, "-DMLXN_FC_9=(0x1.8p+0f)"},   // 1.5
      {10, MLXN_CONST_F16, 0x0001u, "-DMLXN_FC_10=(0x1p-24f)"},  // smallest subnormal
      {11, MLXN_CONST_F16, 0xFC00u, "-DMLXN_FC_11=(__int_as_float(0xff800000u))"},
      {12, MLXN_CONST_I16, 0xFFFDu, "-DMLXN_FC_12=(-3)"},
      {13, MLXN_CONST_U16, 0xFFFFu, "-DMLXN_FC_13=65535u"},
      {14, MLXN_CONST_F32, 0x3DCCCCCDu, "-DMLXN_FC_14=(0x1.99999ap-4f)"},  // 0.1f
  };
  for (const auto& d : defs) {
    const std::string got = define(d.index, d.type, d.bits);
    CHECK(got == d.want, "constant %u: got %s, want %s", d.index, got.c_str(), d.want);
  }
  CHECK(define(0, MLXN_CONST_BOOL, 2).rfind("ERROR", 0) == 0, "bool bits 2 refused");
  CHECK(define(0, 0, 0).rfind("ERROR", 0) == 0, "type 0 refused");
  CHECK(define(0, 8, 0).rfind("ERROR", 0) == 0, "type 8 refused");

  // The disk cache: a private folder, round trip, whole-key and content
  // checks, torn, altered and linked entries read as misses.
  char dir[] = "/tmp/mlxn-cache-test-XXXXXX";
  CHECK(mkdtemp(dir) != nullptr, "mkdtemp");
  const std::string sub = std::string(dir) + "/a/b";  // made by cache_dir, 0700
  setenv("MLX_NATIVE_CUDA_CACHE", sub.c_str(), 1);
  const std::string cdir = cache_dir();
  CHECK(!cdir.empty(), "a private cache folder is made: %s", sub.c_str());
  struct stat st;
  CHECK(stat(sub.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700, "made 0700");
  std::string key("options\nsource with a NUL\0inside", 31), image("\x7f" "ELF....", 8), got;
  CHECK(!cache_load(cdir, key, &got), "miss before store");
  cache_store(cdir, key, image);
  CHECK(cache_load(cdir, key, &got) && got == image, "hit after store");
  CHECK(!cache_load(cdir, key + "x", &got), "another key misses");
  const std::string file = cdir + "/" + Sha256::hex(sha256(key)) + ".bin";
  CHECK(stat(file.c_str(), &st) == 0 && (st.st_mode & 0777) == 0600, "entry 0600");
  {
    std::string data;
    CHECK(read_file(file, &data), "read entry");
    data.back() ^= 1;  // one payload bit: same length, other content
    FILE* f = std::fopen(file.c_str(), "wb");
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
    CHECK(!cache_load(cdir, key, &got), "an altered entry misses");
    cache_store(cdir, key, image);
    CHECK(cache_load(cdir, key, &got) && got == image, "a store replaces it");
  }
  CHECK(truncate(file.c_str(), 20) == 0, "truncate");
  CHECK(!cache_load(cdir, key, &got), "a torn entry misses");
  {
    const std::string victim = std::string(dir) + "/victim";
    FILE* f = std::fopen(victim.c_str(), "wb");
    std::fputs("untouched", f);
    std::fclose(f);
    unlink(file.c_str());
    CHECK(symlink(victim.c_str(), file.c_str()) == 0, "plant a link");
    CHECK(!cache_load(cdir, key, &got), "a linked entry is not followed");
    cache_store(cdir, key, image);
    std::string v;
    CHECK(read_file(victim, &v) && v == "untouched", "the link's target is untouched");
    CHECK(cache_load(cdir, key, &got) && got == image, "the store replaced the link");
  }
  CHECK(!cache_load("", key, &got), "caching off");
  CHECK(chmod(sub.c_str(), 0777) == 0, "chmod 0777");
  CHECK(cache_dir().empty(), "a folder others can write is not used");
  CHECK(chmod(sub.c_str(), 0755) == 0 && cache_dir() == cdir, "one others can only read is made private");
  CHECK(stat(sub.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700, "tightened to 0700");
  setenv("MLX_NATIVE_CUDA_CACHE", "relative/dir", 1);
  CHECK(cache_dir().empty(), "a relative folder is not used");
  setenv("MLX_NATIVE_CUDA_CACHE", "off", 1);
  CHECK(cache_dir().empty(), "MLX_NATIVE_CUDA_CACHE=off");
  unsetenv("MLX_NATIVE_CUDA_CACHE");
  setenv("HOME", dir, 1);
  unsetenv("XDG_CACHE_HOME");
  CHECK(cache_dir() == std::string(dir) + "/.cache/mlx-native/cuda", "default cache dir: %s", cache_dir().c_str());
  std::string cmd = std::string("rm -rf ") + dir;
  CHECK(std::system(cmd.c_str()) == 0, "cleanup");

  // Kernel names from images nvcc made of fixture.cu.
  CHECK(kernel_names_of_image("not an image", false).empty(), "garbage has no names");
  const std::string fixtures = argc > 1 ? argv[1] : "";
  std::string cubin, ptx;
  if (!fixtures.empty() && read_file(fixtures + "/fixture.cubin", &cubin) &&
      read_file(fixtures + "/fixture.ptx", &ptx)) {
    const std::string want = "_Z6templ1ILi3EEvPf,alpha,beta";
    CHECK(join(kernel_names_of_image(cubin, false)) == want, "cubin names: %s",
          join(kernel_names_of_image(cubin, false)).c_str());
    CHECK(join(kernel_names_of_image(ptx, true)) == want, "ptx names: %s",
          join(kernel_names_of_image(ptx, true)).c_str());
    CHECK(kernel_names_of_image(cubin.substr(0, 100), false).empty(), "a cut cubin has no names");
    CHECK(sizes_text(cubin, false, "alpha") == "(8,8)", "alpha: %s",
          sizes_text(cubin, false, "alpha").c_str());
    CHECK(sizes_text(cubin, false, "beta") == "(8)", "beta: %s",
          sizes_text(cubin, false, "beta").c_str());
    CHECK(sizes_text(cubin, false, "_Z6templ1ILi3EEvPf") == "(8)", "templ1<3>: %s",
          sizes_text(cubin, false, "_Z6templ1ILi3EEvPf").c_str());
    CHECK(sizes_text(cubin, false, "twice") == "unknown", "a device function has no sizes");
    CHECK(sizes_text(ptx, true, "alpha") == "unknown", "PTX says no sizes");
    for (const char* arch : {"sm_80", "sm_90a", "sm_100a"})
      check_param_sizes(fixtures + "/params_" + arch + ".cubin", arch);
  } else {
    std::printf("SKIP kernel names and parameter sizes from images: no fixtures (nvcc absent)\n");
  }
  CHECK(sizes_text("not an image", false, "alpha") == "unknown", "garbage has no sizes");

  std::printf("%s: %d checks, %d failed\n", failures ? "FAILED" : "PASSED", checks, failures);
  return failures ? 1 : 0;
}
