// test_util.cpp: checks of the GPU-free parts of the cuda backend (util.cpp):
// hashing, function constants as -D options, the disk cache, and kernel names
// read from a CUBIN and from PTX. Runs anywhere; the image checks need the
// fixtures that build.sh makes with nvcc, and are skipped without them.
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

using namespace mlxn_cuda;

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    ++checks;                                              \
    if (!(cond)) {                                         \
      ++failures;                                          \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
      std::printf(__VA_ARGS__);                            \
      std::printf("\n");                                   \
    }                                                      \
  } while (0)

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

int main(int argc, char** argv) {
  // FNV-1a 128: the empty string hashes to the offset basis.
  CHECK(fnv1a128_hex("") == "6c62272e07bb014262b821756295c58d", "fnv of empty: %s",
        fnv1a128_hex("").c_str());
  CHECK(fnv1a128_hex("a") != fnv1a128_hex("b"), "fnv distinguishes inputs");
  CHECK(fnv1a128_hex("a").size() == 32, "fnv hex length");

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

  // The disk cache: round trip, whole-key check, torn files read as misses.
  char dir[] = "/tmp/mlxn-cache-test-XXXXXX";
  CHECK(mkdtemp(dir) != nullptr, "mkdtemp");
  const std::string sub = std::string(dir) + "/a/b";  // made on first store
  std::string key("options\nsource with a NUL\0inside", 31), image("\x7f" "ELF....", 8), got;
  CHECK(!cache_load(sub, key, &got), "miss before store");
  cache_store(sub, key, image);
  CHECK(cache_load(sub, key, &got) && got == image, "hit after store");
  CHECK(!cache_load(sub, key + "x", &got), "another key misses");
  const std::string file = sub + "/" + fnv1a128_hex(key) + ".bin";
  CHECK(truncate(file.c_str(), 20) == 0, "truncate");
  CHECK(!cache_load(sub, key, &got), "a torn entry misses");
  CHECK(!cache_load("", key, &got), "caching off");
  setenv("MLX_NATIVE_CUDA_CACHE", "off", 1);
  CHECK(cache_dir().empty(), "MLX_NATIVE_CUDA_CACHE=off");
  setenv("MLX_NATIVE_CUDA_CACHE", "/x/y", 1);
  CHECK(cache_dir() == "/x/y", "MLX_NATIVE_CUDA_CACHE=/x/y");
  unsetenv("MLX_NATIVE_CUDA_CACHE");
  setenv("HOME", "/home/someone", 1);
  CHECK(cache_dir() == "/home/someone/.cache/mlx-native/cuda", "default cache dir: %s",
        cache_dir().c_str());
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
  } else {
    std::printf("SKIP kernel names from images: no fixtures (nvcc absent)\n");
  }

  std::printf("%s: %d checks, %d failed\n", failures ? "FAILED" : "PASSED", checks, failures);
  return failures ? 1 : 0;
}
