/*
 * test_cuda.c: end-to-end test of libmlx_native_cuda.so through its C ABI.
 *
 * dlopen's the library (argv[1], default build/cuda/libmlx_native_cuda.so),
 * compiles CUDA source at run time, and checks buffers, dispatch with buffer +
 * inline bytes + threadgroup memory bindings, function constants, the disk
 * cache, commit/status/wait, GPU time, and the error paths (compile error,
 * unknown kernel, malformed dispatch blocks, a faulting kernel).
 * With no CUDA device it checks what needs none and reports the rest skipped.
 * Exit status: 0 when every check passed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../include/mlx_native.h"
#include "../../common/tests/check.h"

#define SYMBOLS(X)                                                                              \
  X(mlxn_abi_version) X(mlxn_backend_name) X(mlxn_device_count) X(mlxn_device_open)            \
  X(mlxn_device_close) X(mlxn_device_name) X(mlxn_device_limit) X(mlxn_device_set_option)      \
  X(mlxn_buffer_alloc) X(mlxn_buffer_release) X(mlxn_buffer_length) X(mlxn_buffer_host_ptr)    \
  X(mlxn_buffer_write) X(mlxn_buffer_read) X(mlxn_library_compile) X(mlxn_library_release)     \
  X(mlxn_library_kernel_names) X(mlxn_pipeline_create) X(mlxn_pipeline_release)                \
  X(mlxn_pipeline_max_threads) X(mlxn_pipeline_static_threadgroup_memory)                      \
  X(mlxn_encoder_create) X(mlxn_encoder_release) X(mlxn_encoder_dispatch)                      \
  X(mlxn_encoder_barrier) X(mlxn_encoder_commit) X(mlxn_encoder_wait) X(mlxn_encoder_status)   \
  X(mlxn_encoder_gpu_time_ns) X(mlxn_library_compile_start) X(mlxn_compile_job_done)          \
  X(mlxn_compile_job_finish) X(mlxn_encoder_create_replayable) X(mlxn_encoder_replay)          \
  X(mlxn_encoder_patch_bytes) X(mlxn_encoder_flush)

#define DECLARE(name) static __typeof__(&name) f_##name;
SYMBOLS(DECLARE)

static char msg[16384];
#define CAP ((uint64_t)sizeof msg)

/* A call that must succeed; on failure prints the backend's message. */
#define OK(call) CHECK((call) == MLXN_OK, "%s -> %s", #call, msg)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- dispatch block builder ---- */
typedef struct {
  uint8_t data[4096];
  uint32_t n, payload;
  uint8_t pay[1024];
} Block;

static void blk_begin(Block* b, mlxn_pipeline* p, uint32_t gx, uint32_t gy, uint32_t gz,
                      uint32_t tx, uint32_t ty, uint32_t tz) {
  memset(b, 0, sizeof *b);
  uint64_t h = (uint64_t)(uintptr_t)p;
  uint32_t dims[6] = {gx, gy, gz, tx, ty, tz};
  memcpy(b->data, &h, 8);
  memcpy(b->data + 8, dims, 24);
}
static void blk_bind(Block* b, uint32_t kind, uint32_t index, uint64_t a, uint64_t bb) {
  uint8_t* r = b->data + 48 + 24 * b->n;
  memcpy(r, &kind, 4);
  memcpy(r + 4, &index, 4);
  memcpy(r + 8, &a, 8);
  memcpy(r + 16, &bb, 8);
  b->n++;
}
static void blk_buffer(Block* b, uint32_t index, mlxn_buffer* buf, uint64_t offset) {
  blk_bind(b, MLXN_BIND_BUFFER, index, (uint64_t)(uintptr_t)buf, offset);
}
static void blk_bytes(Block* b, uint32_t index, const void* data, uint32_t len) {
  blk_bind(b, MLXN_BIND_BYTES, index, b->payload, len);
  memcpy(b->pay + b->payload, data, len);
  b->payload += len;
}
static void blk_tg(Block* b, uint32_t index, uint64_t len) {
  blk_bind(b, MLXN_BIND_THREADGROUP_MEMORY, index, len, 0);
}
/* Finishes the block (header counts, payload appended); returns its length. */
static uint64_t blk_end(Block* b) {
  memcpy(b->data + 32, &b->n, 4);
  memcpy(b->data + 36, &b->payload, 4);
  memcpy(b->data + 48 + 24 * b->n, b->pay, b->payload);
  return 48 + 24 * (uint64_t)b->n + b->payload;
}

/* The spin kernel's block: one thread spins `cycles` clocks, then writes 1 to `flag`. */
static uint64_t spin_block(Block* b, mlxn_pipeline* spin, const unsigned long long* cycles, mlxn_buffer* flag) {
  blk_begin(b, spin, 1, 1, 1, 1, 1, 1);
  blk_bytes(b, 0, cycles, 8);
  blk_buffer(b, 1, flag, 0);
  return blk_end(b);
}

static int count_cache_files(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".bin") && !strstr(e->d_name, ".tmp")) ++n;
  closedir(d);
  return n;
}

/* ---- kernels ---- */
static const char* kSource =
    "#include <cuda_fp16.h>\n" /* needs the CUDA include path */
    "struct Params { float scale; float bias; unsigned n; };\n"
    "// y[i] = x[block-reversed i] * scale + bias + MLXN_FC_0, through dynamic shared memory\n"
    "extern \"C\" __global__ void scale_rev(const float* x, const Params* p, float* y) {\n"
    "  extern __shared__ float tile[];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  tile[threadIdx.x] = i < p->n ? x[i] : 0.0f;\n"
    "  __syncthreads();\n"
    "  unsigned j = blockDim.x - 1 - threadIdx.x;\n"
    "  if (i < p->n) y[i] = tile[j] * p->scale + p->bias + (float)MLXN_FC_0;\n"
    "}\n"
    "// z[i] = y[i] + 1, through 1 KiB of static shared memory\n"
    "extern \"C\" __global__ void add_one(const float* y, float* z, const unsigned* n) {\n"
    "  __shared__ float pad[256];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  pad[threadIdx.x % 256] = i < *n ? y[i] : 0.0f;\n"
    "  __syncthreads();\n"
    "  if (i < *n) z[i] = pad[threadIdx.x % 256] + 1.0f;\n"
    "}\n"
    "// Fills two threadgroup bindings (dynamic shared memory, summed) and reads them back.\n"
    "extern \"C\" __global__ void big_smem(unsigned* out, const unsigned* words) {\n"
    "  extern __shared__ unsigned sm[];\n"
    "  unsigned w = *words;\n"
    "  for (unsigned k = threadIdx.x; k < w; k += blockDim.x) sm[k] = k * 2654435761u + blockIdx.x;\n"
    "  __syncthreads();\n"
    "  unsigned s = 0;\n"
    "  for (unsigned k = blockDim.x - 1 - threadIdx.x; k < w; k += blockDim.x) s += sm[k];\n"
    "  out[blockIdx.x * blockDim.x + threadIdx.x] = s;\n"
    "}\n"
    "// Writes every function constant's value (as bits) so the host can check them.\n"
    "extern \"C\" __global__ void fc_probe(unsigned* u) {\n"
    "  u[0] = (unsigned)(MLXN_FC_1);\n"
    "  u[1] = (unsigned)(int)(MLXN_FC_2);\n"
    "  u[2] = MLXN_FC_3;\n"
    "  u[3] = __float_as_uint(MLXN_FC_4);\n"
    "  u[4] = __float_as_uint(MLXN_FC_5);\n"
    "  u[5] = (unsigned)(int)(MLXN_FC_6);\n"
    "  u[6] = MLXN_FC_7;\n"
    "  u[7] = __float_as_uint(MLXN_FC_8);\n"
    "  u[8] = (MLXN_FC_9 != MLXN_FC_9) ? 1u : 0u;\n"
    "  u[9] = (unsigned)(MLXN_FC_10);\n"
    "#if MLXN_FC_1 && MLXN_FC_3 == 4000000000u && MLXN_FC_2 == -7\n"
    "  u[10] = 77u;\n"
    "#else\n"
    "  u[10] = 0u;\n"
    "#endif\n"
    "  __half h = __float2half(MLXN_FC_5);\n"
    "  u[11] = (unsigned)__half_as_ushort(h);\n"
    "}\n"
    "// Spins for *cycles clock cycles: keeps a commit pending long enough to observe it.\n"
    "extern \"C\" __global__ void spin(const unsigned long long* cycles, unsigned* out) {\n"
    "  long long t0 = clock64();\n"
    "  while ((unsigned long long)(clock64() - t0) < *cycles) {}\n"
    "  out[0] = 1u;\n"
    "}\n"
    "// Stores to an unmapped address: an execution error.\n"
    "extern \"C\" __global__ void fault(float* p) {\n"
    "  *(volatile float*)((unsigned long long)(p != 0) * 16ull) = 1.0f;\n"
    "}\n";

/* A TMA copy (compute capability 9.0 on): thread 0 moves the box at
 * (coords[0], coords[1]) of the tensor map into 1024-byte aligned shared
 * memory, completing on an mbarrier; every thread then copies the box's raw
 * shared bytes to out (so the host sees the swizzle), *words u32 words. */
static const char* kTmaSource =
    "extern \"C\" __global__ void tma_box(const void* map, const int* coords, unsigned* out, const unsigned* words) {\n"
    "  __shared__ __align__(1024) unsigned tile[2048];\n"
    "  __shared__ __align__(8) unsigned long long bar;\n"
    "  const unsigned t = (unsigned)__cvta_generic_to_shared(tile), b = (unsigned)__cvta_generic_to_shared(&bar);\n"
    "  const unsigned bytes = *words * 4u;\n"
    "  if (threadIdx.x == 0) {\n"
    "    asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\" :: \"r\"(b) : \"memory\");\n"
    "    asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
    "    asm volatile(\"fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\" :: \"l\"(map) : \"memory\");\n"
    "    asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"(b), \"r\"(bytes) : \"memory\");\n"
    "    asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\"\n"
    "                 :: \"r\"(t), \"l\"(map), \"r\"(coords[0]), \"r\"(coords[1]), \"r\"(b) : \"memory\");\n"
    "  }\n"
    "  __syncthreads();\n"
    "  asm volatile(\"{\\n.reg .pred p;\\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\\n@!p bra W;\\n}\" :: \"r\"(b) : \"memory\");\n"
    "  for (unsigned i = threadIdx.x; i < *words; i += blockDim.x) out[i] = tile[i];\n"
    "}\n";

/* A tensor map's descriptor (mlx_native.h): bf16 [rows, cols], rows `stride` bytes apart. */
static void tmap_desc(uint8_t* d, uint64_t offset, uint64_t cols, uint64_t rows, uint64_t stride, uint32_t box_cols,
                      uint32_t box_rows, uint32_t swizzle) {
  const uint32_t dtype = MLXN_TMAP_DTYPE_BF16, rank = 2, l2 = 128;
  memset(d, 0, MLXN_TMAP_DESC_BYTES);
  memcpy(d + MLXN_TMAP_OFFSET, &offset, 8);
  memcpy(d + MLXN_TMAP_DTYPE, &dtype, 4);
  memcpy(d + MLXN_TMAP_RANK, &rank, 4);
  memcpy(d + MLXN_TMAP_DIMS, &cols, 8);
  memcpy(d + MLXN_TMAP_DIMS + 8, &rows, 8);
  memcpy(d + MLXN_TMAP_STRIDES, &stride, 8);
  memcpy(d + MLXN_TMAP_BOX, &box_cols, 4);
  memcpy(d + MLXN_TMAP_BOX + 4, &box_rows, 4);
  memcpy(d + MLXN_TMAP_SWIZZLE, &swizzle, 4);
  memcpy(d + MLXN_TMAP_L2, &l2, 4);
}
static void blk_tmap(Block* b, uint32_t index, mlxn_buffer* buf, const uint8_t* desc) {
  b->payload = (b->payload + 15) & ~15u;
  blk_bind(b, MLXN_BIND_TENSOR_MAP, index, (uint64_t)(uintptr_t)buf, b->payload);
  memcpy(b->pay + b->payload, desc, MLXN_TMAP_DESC_BYTES);
  b->payload += MLXN_TMAP_DESC_BYTES;
}
/* tma_box's block: the map over `src`, the box's coordinates, `out` from byte `at`, `words` u32 words. */
static uint64_t tma_block(Block* b, mlxn_pipeline* p, mlxn_buffer* src, const uint8_t* desc, const int* coords, mlxn_buffer* out,
                          uint64_t at, const uint32_t* words) {
  blk_begin(b, p, 1, 1, 1, 128, 1, 1);
  blk_tmap(b, 0, src, desc);
  blk_bytes(b, 1, coords, 8);
  blk_buffer(b, 2, out, at);
  blk_bytes(b, 3, words, 4);
  return blk_end(b);
}

/* Tensor maps end to end: the boxes TMA copies (swizzled and not, zeros
 * past the dims), the buffer held by the recorded work, every refusal
 * before anything is recorded. */
static void tensor_map_tests(mlxn_device* dev) {
  enum { COLS = 200, ROWS = 100, STRIDE = 512, OFF = 256 }; /* bf16 [100, 200], rows padded to 256 elements */
  const uint64_t blen = OFF + (uint64_t)ROWS * STRIDE;
  static uint16_t host[(OFF + ROWS * STRIDE) / 2];
  static unsigned got[2048];
  mlxn_library* lib = NULL;
  mlxn_pipeline* p = NULL;
  mlxn_buffer *src = NULL, *out = NULL;
  mlxn_encoder* enc = NULL;
  Block b;
  uint8_t d[MLXN_TMAP_DESC_BYTES];
  int st;
  for (uint64_t i = 0; i < blen / 2; ++i) host[i] = (uint16_t)(i * 2654435761u >> 7) | 1u; /* never 0 */
  OK(f_mlxn_library_compile(dev, kTmaSource, strlen(kTmaSource), "tma.cu", NULL, 0, &lib, msg, CAP));
  OK(f_mlxn_pipeline_create(lib, "tma_box", &p, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, blen, &src, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, sizeof got, &out, msg, CAP));
  OK(f_mlxn_buffer_write(src, 0, host, blen, msg, CAP));
  OK(f_mlxn_encoder_create(dev, &enc, msg, CAP));
  /* Two boxes of 64 columns x 8 rows: (64, 96) with 128-byte swizzle (rows 100-103 past the dims), and
   * (160, 0) unswizzled (columns 200-223 past the dims). The source is released once recorded: the
   * recorded work holds it. */
  const int coords[2][2] = {{64, 96}, {160, 0}};
  const uint32_t swz[2] = {128, 0}, words = 64 * 8 * 2 / 4;
  for (int c = 0; c < 2; ++c) {
    tmap_desc(d, OFF, COLS, ROWS, STRIDE, 64, 8, swz[c]);
    OK(f_mlxn_encoder_dispatch(enc, b.data, tma_block(&b, p, src, d, coords[c], out, (uint64_t)c * 1024, &words), msg, CAP));
  }
  f_mlxn_buffer_release(src);
  OK(f_mlxn_encoder_commit(enc, msg, CAP));
  OK(f_mlxn_encoder_wait(enc, msg, CAP));
  OK(f_mlxn_buffer_read(out, 0, got, 2048, msg, CAP));
  {
    int bad = 0;
    const uint8_t* g = (const uint8_t*)got;
    for (int c = 0; c < 2; ++c)
      for (int r = 0; r < 8; ++r)
        for (int ch = 0; ch < 8; ++ch) {
          /* 16-byte chunk ch of box row r: at chunk ch ^ (r % 8) of its 128-byte row when swizzled. */
          const int at = c * 1024 + r * 128 + 16 * (swz[c] ? (ch ^ (r & 7)) : ch);
          for (int e = 0; e < 8; ++e) {
            const int row = coords[c][1] + r, col = coords[c][0] + ch * 8 + e;
            const uint16_t want = row < ROWS && col < COLS ? host[(OFF + row * STRIDE) / 2 + col] : 0;
            uint16_t v;
            memcpy(&v, g + at + 2 * e, 2);
            bad += v != want;
          }
        }
    CHECK(bad == 0, "tensor map boxes (swizzled, plain, zeros past the dims): %d elements wrong", bad);
    printf("tensor maps: two boxes of 64 x 8 bf16 copied by TMA, %d elements wrong\n", bad);
  }
  /* Refusals, each before anything is recorded. */
  OK(f_mlxn_buffer_alloc(dev, blen, &src, msg, CAP));
  {
    const struct { uint64_t off, rows, stride; uint32_t box; const char* want; } bad[] = {
        {OFF, ROWS + 1, STRIDE, 8,
         "dispatch: kernel 'tma_box': binding 0 (tensor map [[buffer(0)]]): the elements the dims and strides reach "
         "must end within the buffer's 51456 bytes (got an end at byte 51856)"},
        {OFF + 8, ROWS, STRIDE, 8,
         "dispatch: kernel 'tma_box': binding 0 (tensor map [[buffer(0)]]): the buffer's address plus offset must be "
         "a multiple of 16"},
        {OFF, ROWS, STRIDE + 8, 8,
         "dispatch: kernel 'tma_box': binding 0 (tensor map [[buffer(0)]]): strides[0] must be a multiple of 16 below "
         "2^40 bytes (got 520)"},
        {OFF, ROWS, STRIDE, 300,
         "dispatch: kernel 'tma_box': binding 0 (tensor map [[buffer(0)]]): box[1] must be 1 to 256 (got 300)"},
    };
    for (unsigned k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
      tmap_desc(d, bad[k].off, COLS, bad[k].rows, bad[k].stride, 64, bad[k].box, 128);
      st = f_mlxn_encoder_dispatch(enc, b.data, tma_block(&b, p, src, d, coords[0], out, 0, &words), msg, CAP);
      CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strncmp(msg, bad[k].want, strlen(bad[k].want)) == 0,
            "tensor map refusal %u: %d %s", k, st, msg);
    }
    /* A buffer too short for the map. */
    tmap_desc(d, OFF, COLS, ROWS, STRIDE, 64, 8, 128);
    st = f_mlxn_encoder_dispatch(enc, b.data, tma_block(&b, p, out, d, coords[0], out, 0, &words), msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "end within the buffer's 8192 bytes"),
          "tensor map over a too-short buffer: %d %s", st, msg);
    OK(f_mlxn_encoder_commit(enc, msg, CAP)); /* nothing was recorded: an empty commit */
    OK(f_mlxn_encoder_wait(enc, msg, CAP));
  }
  /* A replayable encoder: the map is not a bytes binding that patch could change. */
  {
    mlxn_encoder* rep = NULL;
    OK(f_mlxn_encoder_create_replayable(dev, &rep, msg, CAP));
    tmap_desc(d, OFF, COLS, ROWS, STRIDE, 64, 8, 128);
    OK(f_mlxn_encoder_dispatch(rep, b.data, tma_block(&b, p, src, d, coords[0], out, 0, &words), msg, CAP));
    OK(f_mlxn_encoder_commit(rep, msg, CAP));
    OK(f_mlxn_encoder_wait(rep, msg, CAP));
    st = f_mlxn_encoder_patch_bytes(rep, 0, 0, d, MLXN_TMAP_DESC_BYTES, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "binding_index must be a bytes binding of dispatch 0 (kernel 'tma_box': 1, 3)"),
          "patch of a tensor map: %d %s", st, msg);
    OK(f_mlxn_encoder_replay(rep, msg, CAP));
    OK(f_mlxn_encoder_wait(rep, msg, CAP));
    f_mlxn_encoder_release(rep);
  }
  f_mlxn_encoder_release(enc);
  f_mlxn_pipeline_release(p);
  f_mlxn_library_release(lib);
  f_mlxn_buffer_release(src);
  f_mlxn_buffer_release(out);
}

typedef struct { uint32_t index, type, bits; } Const;

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "build/cuda/libmlx_native_cuda.so";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("FAIL cannot dlopen %s: %s\n", path, dlerror());
    return 1;
  }
#define LOAD(name)                                                    \
  f_##name = (__typeof__(&name))dlsym(lib, #name);                    \
  if (!f_##name) {                                                    \
    printf("FAIL %s does not export %s\n", path, #name);              \
    return 1;                                                         \
  }
  SYMBOLS(LOAD)

  CHECK(f_mlxn_abi_version() == MLXN_ABI_VERSION, "abi version %u", f_mlxn_abi_version());
  CHECK(strcmp(f_mlxn_backend_name(), "cuda") == 0, "backend name %s", f_mlxn_backend_name());
  const uint32_t ndev = f_mlxn_device_count();
  printf("devices: %u\n", ndev);
  if (ndev == 0) {
    mlxn_device* d = NULL;
    CHECK(f_mlxn_device_open(0, &d, msg, CAP) == MLXN_ERR_DEVICE_NOT_FOUND && d == NULL,
          "device_open with no device: %s", msg);
    printf("SKIP: no CUDA device; only the device-free checks ran\n");
    printf("%s: %d checks, %d failed\n", failures ? "FAILED" : "PASSED", checks, failures);
    return failures ? 1 : 0;
  }

  /* The disk cache goes to a fresh folder, so hits and misses are known. */
  char cache_dir[] = "/tmp/mlxn-cuda-cache-XXXXXX";
  CHECK(mkdtemp(cache_dir) != NULL, "mkdtemp");
  setenv("MLX_NATIVE_CUDA_CACHE", cache_dir, 1);

  mlxn_device* dev = NULL;
  CHECK(f_mlxn_device_open(ndev, &dev, msg, CAP) == MLXN_ERR_DEVICE_NOT_FOUND, "ordinal past count");
  OK(f_mlxn_device_open(0, &dev, msg, CAP));
  if (!dev) return 1;
  char name[256];
  uint64_t nlen = f_mlxn_device_name(dev, name, sizeof name);
  CHECK(nlen > 0 && nlen == strlen(name), "device name '%s' len %llu", name, (unsigned long long)nlen);
  const uint64_t max_threads = f_mlxn_device_limit(dev, MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP);
  const uint64_t max_tg_mem = f_mlxn_device_limit(dev, MLXN_LIMIT_MAX_THREADGROUP_MEMORY);
  printf("device: %s; max threads %llu, threadgroup memory %llu, simd %llu, buffer %llu, shared %llu\n",
         name, (unsigned long long)max_threads, (unsigned long long)max_tg_mem,
         (unsigned long long)f_mlxn_device_limit(dev, MLXN_LIMIT_SIMD_WIDTH),
         (unsigned long long)f_mlxn_device_limit(dev, MLXN_LIMIT_MAX_BUFFER_LENGTH),
         (unsigned long long)f_mlxn_device_limit(dev, MLXN_LIMIT_SHARED_MEMORY));
  CHECK(max_threads >= 1024, "max threads %llu", (unsigned long long)max_threads);
  CHECK(max_tg_mem > 48 * 1024, "max threadgroup memory %llu", (unsigned long long)max_tg_mem);
  CHECK(f_mlxn_device_limit(dev, MLXN_LIMIT_SIMD_WIDTH) == 32, "simd width");
  CHECK(f_mlxn_device_limit(dev, MLXN_LIMIT_MAX_BUFFER_LENGTH) > (1ull << 30), "buffer length");
  CHECK(f_mlxn_device_limit(dev, MLXN_LIMIT_SHARED_MEMORY) == 0, "shared memory flag");
  CHECK(f_mlxn_device_limit(dev, MLXN_LIMIT_COMPUTE_CAPABILITY) >= 50, "compute capability %llu",
        (unsigned long long)f_mlxn_device_limit(dev, MLXN_LIMIT_COMPUTE_CAPABILITY));
  CHECK(f_mlxn_device_limit(dev, MLXN_LIMIT_MULTIPROCESSORS) >= 1, "multiprocessors");
  CHECK(f_mlxn_device_limit(dev, 99) == 0, "unknown limit key");
  CHECK(f_mlxn_device_set_option(dev, "schedule", "random", msg, CAP) == MLXN_ERR_INVALID_ARGUMENT,
        "set_option must refuse unknown keys");
  /* The backend's options (each on or off): a value other than those refused by name, both taken, left on. */
  static const char* const options[] = {"pdl", "concurrent"};
  for (size_t i = 0; i < sizeof options / sizeof options[0]; ++i) {
    char want[64];
    snprintf(want, sizeof want, "%s must be on or off", options[i]);
    CHECK(f_mlxn_device_set_option(dev, options[i], "maybe", msg, CAP) == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, want) != NULL,
          "set_option must refuse a %s value other than on / off (got '%s')", options[i], msg);
    CHECK(f_mlxn_device_set_option(dev, options[i], "off", msg, CAP) == MLXN_OK &&
              f_mlxn_device_set_option(dev, options[i], "on", msg, CAP) == MLXN_OK,
          "set_option %s on / off: %s", options[i], msg);
  }

  /* ---- buffers ---- */
  enum { N = 4096, TG = 128, XOFF = 16 };
  mlxn_buffer *x = NULL, *y = NULL, *y2 = NULL, *z = NULL, *probe = NULL, *big = NULL,
              *flag = NULL, *zero = NULL;
  OK(f_mlxn_buffer_alloc(dev, (N + XOFF) * 4, &x, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, N * 4, &y, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, N * 4, &y2, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, N * 4, &z, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, 64 * 4, &probe, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, 8 * 1024 * 4, &big, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, 4, &flag, msg, CAP));
  OK(f_mlxn_buffer_alloc(dev, 0, &zero, msg, CAP));
  CHECK(f_mlxn_buffer_length(x) == (N + XOFF) * 4, "buffer length");
  CHECK(f_mlxn_buffer_host_ptr(x) == NULL, "host_ptr must be NULL on cuda");
  {
    static float r[N + XOFF];
    for (int i = 0; i < N + XOFF; ++i) r[i] = -1.0f;
    OK(f_mlxn_buffer_read(x, 0, r, sizeof r, msg, CAP));
    int nonzero = 0;
    for (int i = 0; i < N + XOFF; ++i) nonzero += r[i] != 0.0f;
    CHECK(nonzero == 0, "new buffer not zero-filled (%d nonzero)", nonzero);
    CHECK(f_mlxn_buffer_write(x, 8, r, sizeof r, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT,
          "write past the end");
    CHECK(f_mlxn_buffer_read(x, (N + XOFF) * 4 + 1, r, 0, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT,
          "read offset past the end");
  }
  static float hx[N];
  for (int i = 0; i < N; ++i) hx[i] = (float)((i * 37) % 101) * 0.25f - 3.0f;
  OK(f_mlxn_buffer_write(x, XOFF * 4, hx, sizeof hx, msg, CAP));
  {
    static float back[N];
    OK(f_mlxn_buffer_read(x, XOFF * 4, back, sizeof back, msg, CAP));
    CHECK(memcmp(back, hx, sizeof hx) == 0, "write/read round trip");
  }

  /* ---- compile, with function constants of every type; the disk cache ---- */
  const Const consts[] = {
      {0, MLXN_CONST_I32, 3u},
      {1, MLXN_CONST_BOOL, 1u},
      {2, MLXN_CONST_I32, (uint32_t)-7},
      {3, MLXN_CONST_U32, 4000000000u},
      {4, MLXN_CONST_F32, f32_bits(-2.5f)},
      {5, MLXN_CONST_F16, 0x3E00u}, /* 1.5 */
      {6, MLXN_CONST_I16, 0xFFFDu}, /* -3 */
      {7, MLXN_CONST_U16, 0xFFFFu},
      {8, MLXN_CONST_F32, 0x7F800000u}, /* +inf */
      {9, MLXN_CONST_F32, 0x7FC00000u}, /* NaN */
      {10, MLXN_CONST_I32, 0x80000000u},
  };
  const uint32_t nconst = sizeof consts / sizeof consts[0];
  mlxn_library *library = NULL, *library2 = NULL, *library3 = NULL;
  double t0 = now_ms();
  OK(f_mlxn_library_compile(dev, kSource, strlen(kSource), "test_kernels.cu", consts, nconst,
                            &library, msg, CAP));
  const double t_first = now_ms() - t0;
  if (!library) {
    printf("cannot continue without the test library\n%s\n", msg);
    return 1;
  }
  CHECK(count_cache_files(cache_dir) == 1, "cache files after one compile: %d",
        count_cache_files(cache_dir));
  t0 = now_ms();
  OK(f_mlxn_library_compile(dev, kSource, strlen(kSource), "test_kernels.cu", consts, nconst,
                            &library2, msg, CAP));
  const double t_cached = now_ms() - t0;
  CHECK(count_cache_files(cache_dir) == 1, "a cache hit must not add a file");
  Const other[sizeof consts / sizeof consts[0]];
  memcpy(other, consts, sizeof consts);
  other[0].bits = 5; /* MLXN_FC_0 = 5 */
  OK(f_mlxn_library_compile(dev, kSource, strlen(kSource), "test_kernels.cu", other, nconst,
                            &library3, msg, CAP));
  CHECK(count_cache_files(cache_dir) == 2, "other constants must be another cache entry");
  printf("compile: %.1f ms; same source from the disk cache: %.1f ms\n", t_first, t_cached);
  CHECK(t_cached < t_first, "cached compile (%.1f ms) not faster than the first (%.1f ms)",
        t_cached, t_first);

  {
    char names[512];
    uint64_t len = f_mlxn_library_kernel_names(library, names, sizeof names);
    CHECK(strcmp(names, "add_one\nbig_smem\nfault\nfc_probe\nscale_rev\nspin") == 0,
          "kernel names: '%s'", names);
    CHECK(len == strlen(names), "kernel names length");
    char tiny[4];
    CHECK(f_mlxn_library_kernel_names(library, tiny, sizeof tiny) == len && strlen(tiny) == 3,
          "kernel names truncation");
  }

  /* ---- error paths of compile and pipeline creation ---- */
  {
    const char* bad = "extern \"C\" __global__ void broken(float* x) {\n  x[0] = undefined_thing;\n}\n";
    mlxn_library* l = NULL;
    int st = f_mlxn_library_compile(dev, bad, strlen(bad), "broken.cu", NULL, 0, &l, msg, CAP);
    CHECK(st == MLXN_ERR_SHADER_COMPILATION && l == NULL, "compile error status %d", st);
    CHECK(strstr(msg, "broken.cu") && strstr(msg, "undefined_thing") && strstr(msg, "(2)"),
          "compile error text must cite file, line and identifier: %s", msg);
    printf("compile error text: %s\n", msg);
    const Const bad_type = {0, 42, 0};
    st = f_mlxn_library_compile(dev, kSource, strlen(kSource), "t.cu", &bad_type, 1, &l, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT, "unknown constant type: %d", st);
    const Const dup[2] = {{1, MLXN_CONST_BOOL, 1}, {1, MLXN_CONST_BOOL, 0}};
    st = f_mlxn_library_compile(dev, kSource, strlen(kSource), "t.cu", dup, 2, &l, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT, "duplicate constant index: %d", st);
    /* The same compiles on the library's thread: the errors come at finish. */
    mlxn_compile_job* job = NULL;
    CHECK(f_mlxn_library_compile_start(NULL, bad, strlen(bad), "broken.cu", NULL, 0, &job, msg, CAP) ==
              MLXN_ERR_INVALID_ARGUMENT, "compile_start without a device");
    CHECK(f_mlxn_compile_job_done(NULL) == 0, "done of a null job");
    CHECK(f_mlxn_compile_job_finish(NULL, &l, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT, "finish of a null job");
    OK(f_mlxn_library_compile_start(dev, bad, strlen(bad), "broken.cu", NULL, 0, &job, msg, CAP));
    while (!f_mlxn_compile_job_done(job)) usleep(1000);
    CHECK(f_mlxn_compile_job_finish(job, NULL, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT, "finish without out");
    st = f_mlxn_compile_job_finish(job, &l, msg, CAP);
    CHECK(st == MLXN_ERR_SHADER_COMPILATION && l == NULL && strstr(msg, "broken.cu") && strstr(msg, "(2)"),
          "job's compile error %d: %s", st, msg);
    OK(f_mlxn_library_compile_start(dev, kSource, strlen(kSource), "t.cu", dup, 2, &job, msg, CAP));
    st = f_mlxn_compile_job_finish(job, &l, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && l == NULL, "job's duplicate constant index: %d", st);
    mlxn_device* other = NULL;
    OK(f_mlxn_device_open(0, &other, msg, CAP));
    OK(f_mlxn_library_compile_start(other, kSource, strlen(kSource), "job.cu", consts, nconst, &job, msg, CAP));
    f_mlxn_device_close(other); /* the job holds it open */
    OK(f_mlxn_compile_job_finish(job, &l, msg, CAP));
    CHECK(l != NULL && f_mlxn_library_kernel_names(l, NULL, 0) > 0, "job's library has kernels");
    f_mlxn_library_release(l);
    l = NULL;
    mlxn_pipeline* p = NULL;
    st = f_mlxn_pipeline_create(library, "no_such_kernel", &p, msg, CAP);
    CHECK(st == MLXN_ERR_KERNEL_NOT_FOUND && p == NULL, "unknown kernel: %d %s", st, msg);
    printf("unknown kernel text: %s\n", msg);
  }

  mlxn_pipeline *p_scale = NULL, *p_add = NULL, *p_big = NULL, *p_probe = NULL, *p_spin = NULL,
                *p_fault = NULL, *p_scale3 = NULL;
  OK(f_mlxn_pipeline_create(library, "scale_rev", &p_scale, msg, CAP));
  OK(f_mlxn_pipeline_create(library, "add_one", &p_add, msg, CAP));
  OK(f_mlxn_pipeline_create(library, "big_smem", &p_big, msg, CAP));
  OK(f_mlxn_pipeline_create(library2, "fc_probe", &p_probe, msg, CAP));
  OK(f_mlxn_pipeline_create(library, "spin", &p_spin, msg, CAP));
  OK(f_mlxn_pipeline_create(library, "fault", &p_fault, msg, CAP));
  OK(f_mlxn_pipeline_create(library3, "scale_rev", &p_scale3, msg, CAP));
  CHECK(f_mlxn_pipeline_max_threads(p_scale) >= 256, "pipeline max threads %u",
        f_mlxn_pipeline_max_threads(p_scale));
  CHECK(f_mlxn_pipeline_static_threadgroup_memory(p_add) == 1024, "static smem of add_one: %llu",
        (unsigned long long)f_mlxn_pipeline_static_threadgroup_memory(p_add));
  CHECK(f_mlxn_pipeline_static_threadgroup_memory(p_scale) == 0, "static smem of scale_rev");

  mlxn_encoder* enc = NULL;
  OK(f_mlxn_encoder_create(dev, &enc, msg, CAP));
  CHECK(f_mlxn_encoder_status(enc) == MLXN_ENCODER_RECORDING, "fresh encoder status");
  OK(f_mlxn_encoder_wait(enc, msg, CAP)); /* nothing committed: OK */
  CHECK(f_mlxn_encoder_gpu_time_ns(enc) == 0, "gpu time before any commit");

  /* ---- main dispatch: two scale_rev (bytes copied at dispatch), barrier, add_one ---- */
  struct { float scale, bias; uint32_t n; } params = {2.0f, 0.5f, N};
  Block b;
  uint64_t len;
  blk_begin(&b, p_scale, N / TG, 1, 1, TG, 1, 1);
  blk_buffer(&b, 2, y, 0); /* bindings in any order: parameters follow index order */
  blk_tg(&b, 0, TG * 4);   /* threadgroup index space is separate from buffer indices */
  blk_bytes(&b, 1, &params, sizeof params);
  blk_buffer(&b, 0, x, XOFF * 4);
  len = blk_end(&b);
  OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
  /* The same block with other bytes: the first dispatch keeps its own copy. */
  params.scale = -1.0f;
  params.bias = 4.0f;
  blk_begin(&b, p_scale, N / TG, 1, 1, TG, 1, 1);
  blk_buffer(&b, 0, x, XOFF * 4);
  blk_bytes(&b, 1, &params, sizeof params);
  blk_buffer(&b, 2, y2, 0);
  blk_tg(&b, 0, TG * 4);
  len = blk_end(&b);
  OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
  OK(f_mlxn_encoder_barrier(enc, msg, CAP));
  const uint32_t n = N;
  blk_begin(&b, p_add, N / TG, 1, 1, TG, 1, 1);
  blk_buffer(&b, 0, y, 0);
  blk_buffer(&b, 1, z, 0);
  blk_bytes(&b, 2, &n, 4);
  len = blk_end(&b);
  OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
  CHECK(f_mlxn_encoder_status(enc) == MLXN_ENCODER_RECORDING, "status while recording");
  OK(f_mlxn_encoder_commit(enc, msg, CAP));
  int polls = 0, st;
  while ((st = f_mlxn_encoder_status(enc)) == MLXN_ENCODER_PENDING) {
    ++polls;
    usleep(100);
  }
  CHECK(st == MLXN_ENCODER_COMPLETED, "status after completion: %d", st);
  OK(f_mlxn_encoder_wait(enc, msg, CAP));
  const uint64_t gpu_ns = f_mlxn_encoder_gpu_time_ns(enc);
  printf("main commit: %d pending polls, gpu time %llu ns\n", polls, (unsigned long long)gpu_ns);
  CHECK(gpu_ns > 0, "gpu time of a completed commit");
  {
    static float hy[N], hy2[N], hz[N];
    OK(f_mlxn_buffer_read(y, 0, hy, sizeof hy, msg, CAP));
    OK(f_mlxn_buffer_read(y2, 0, hy2, sizeof hy2, msg, CAP));
    OK(f_mlxn_buffer_read(z, 0, hz, sizeof hz, msg, CAP));
    int bad_y = 0, bad_y2 = 0, bad_z = 0;
    for (int i = 0; i < N; ++i) {
      const int blk = i / TG, t = i % TG;
      const float src = hx[blk * TG + (TG - 1 - t)];
      const float ey = src * 2.0f + 0.5f + 3.0f, ey2 = src * -1.0f + 4.0f + 3.0f;
      bad_y += hy[i] != ey;
      bad_y2 += hy2[i] != ey2;
      bad_z += hz[i] != ey + 1.0f;
    }
    CHECK(bad_y == 0, "scale_rev (buffer+offset, bytes, threadgroup memory): %d wrong", bad_y);
    CHECK(bad_y2 == 0, "second dispatch's own inline bytes: %d wrong", bad_y2);
    CHECK(bad_z == 0, "add_one after the barrier: %d wrong", bad_z);
  }

  /* ---- a pipeline from another library (MLXN_FC_0 = 5), the encoder recording afresh ---- */
  params.scale = 1.0f;
  params.bias = 0.0f;
  blk_begin(&b, p_scale3, N / TG, 1, 1, TG, 1, 1);
  blk_buffer(&b, 0, x, XOFF * 4);
  blk_bytes(&b, 1, &params, sizeof params);
  blk_buffer(&b, 2, y, 0);
  blk_tg(&b, 0, TG * 4);
  len = blk_end(&b);
  OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
  /* fc_probe, from the library the cache answered */
  blk_begin(&b, p_probe, 1, 1, 1, 1, 1, 1);
  blk_buffer(&b, 0, probe, 0);
  len = blk_end(&b);
  OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
  /* big_smem: two threadgroup bindings summing past 48 KiB */
  const uint32_t tg0 = 64 * 1024, tg1 = 36 * 1024, words = (tg0 + tg1) / 4, BT = 256, BG = 8;
  blk_begin(&b, p_big, BG, 1, 1, BT, 1, 1);
  blk_tg(&b, 3, tg1);
  blk_tg(&b, 0, tg0);
  blk_buffer(&b, 0, big, 0);
  blk_bytes(&b, 1, &words, 4);
  len = blk_end(&b);
  OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
  OK(f_mlxn_encoder_commit(enc, msg, CAP));
  OK(f_mlxn_encoder_wait(enc, msg, CAP));
  CHECK(f_mlxn_encoder_status(enc) == MLXN_ENCODER_COMPLETED, "status after wait");
  {
    static float hy[N];
    OK(f_mlxn_buffer_read(y, 0, hy, sizeof hy, msg, CAP));
    int bad = 0;
    for (int i = 0; i < N; ++i) bad += hy[i] != hx[(i / TG) * TG + (TG - 1 - i % TG)] + 5.0f;
    CHECK(bad == 0, "MLXN_FC_0 = 5 from the other library: %d wrong", bad);
    uint32_t u[12];
    OK(f_mlxn_buffer_read(probe, 0, u, sizeof u, msg, CAP));
    CHECK(u[0] == 1, "bool constant: %u", u[0]);
    CHECK(u[1] == (uint32_t)-7, "i32 constant: %u", u[1]);
    CHECK(u[2] == 4000000000u, "u32 constant: %u", u[2]);
    CHECK(u[3] == f32_bits(-2.5f), "f32 constant: %08x", u[3]);
    CHECK(u[4] == f32_bits(1.5f), "f16 constant: %08x", u[4]);
    CHECK(u[5] == (uint32_t)-3, "i16 constant: %u", u[5]);
    CHECK(u[6] == 65535u, "u16 constant: %u", u[6]);
    CHECK(u[7] == 0x7F800000u, "f32 infinity constant: %08x", u[7]);
    CHECK(u[8] == 1, "f32 NaN constant");
    CHECK(u[9] == 0x80000000u, "i32 minimum constant: %08x", u[9]);
    CHECK(u[10] == 77, "constants in #if");
    CHECK(u[11] == 0x3E00u, "cuda_fp16.h available: %04x", u[11]);
    static uint32_t hb[8 * 256];
    OK(f_mlxn_buffer_read(big, 0, hb, sizeof(uint32_t) * BG * BT, msg, CAP));
    int badb = 0;
    for (uint32_t g = 0; g < BG; ++g)
      for (uint32_t t = 0; t < BT; ++t) {
        uint32_t s = 0;
        for (uint32_t k = BT - 1 - t; k < words; k += BT) s += k * 2654435761u + g;
        badb += hb[g * BT + t] != s;
      }
    CHECK(badb == 0, "big_smem (100 KiB of threadgroup memory): %d wrong", badb);
  }

  /* ---- malformed blocks: each refused with the words of mlx_native_block.h
   * (the same as the emulator's and metal's), nothing recorded ---- */
  {
    char tg_words[200], offset_words[200];
    snprintf(tg_words, sizeof tg_words,
             "dispatch: kernel 'add_one': threadgroup memory must be at most %llu bytes per threadgroup (got %llu "
             "bytes bound + 1024 bytes static)",
             (unsigned long long)max_tg_mem, (unsigned long long)max_tg_mem + 1);
    snprintf(offset_words, sizeof offset_words,
             "dispatch: kernel 'add_one': binding 0 (buffer [[buffer(0)]]): offset must be at most the buffer's "
             "length, %u bytes (got %u)",
             (unsigned)(N * 4), (unsigned)(N * 4 + 4));
    const char* words[] = {
        "dispatch: kernel 'add_one': block_len must be 48 + 24 * 3 bindings + 4 payload bytes = 124 (got 125)",
        "dispatch: kernel 'add_one': binding 0 (buffer): index must be below 31 (got 31)",
        "dispatch: the pipeline handle must be a live pipeline of the encoder's device (got 0x1234)",
        offset_words,
        "dispatch: kernel 'add_one': threadgroups per grid must be positive on every axis (got 0x1x1)",
        "dispatch: kernel 'add_one': threads per threadgroup on axis x must be at most 1024 on this device (got 2048)",
        "dispatch: kernel 'add_one': the header's reserved field (byte 40) must be 0 (got 1)",
        "dispatch: kernel 'add_one': binding 2: kind must be 1 (buffer), 2 (bytes), 3 (threadgroup memory) or 4 (tensor map) (got 9)",
        "dispatch: kernel 'add_one': binding 1 (buffer [[buffer(0)]]): [[buffer(0)]] must be bound once (binding 0 "
        "binds it too)",
        "dispatch: kernel 'add_one': the kernel takes 3 parameter(s) but the dispatch binds 2 buffer/bytes index(es)",
        tg_words,
        "dispatch: kernel 'add_one': binding 2 (bytes [[buffer(2)]]): offset + length must be at most the payload's 4 "
        "bytes (got 1 + 4)",
        "dispatch: kernel 'add_one': binding 0 (buffer [[buffer(0)]]): the handle must be a live buffer of the "
        "encoder's device (got 0x5678)",
        "dispatch: kernel 'add_one': threadgroups per grid on axis y must be at most 65535 on this device (got 70000)",
        "dispatch: block_len must be at least 48, the header's size (got 40)",
        "dispatch: kernel 'add_one': binding 3 (threadgroup memory [[threadgroup(0)]]): the record's b must be 0 (got "
        "1)",
    };
    struct {
      const char* what;
      int kind;
    } cases[] = {{"block_len mismatch", 0}, {"index 31", 1}, {"bad pipeline handle", 2},
                 {"offset past the buffer", 3}, {"zero grid", 4}, {"too many threads", 5},
                 {"reserved not zero", 6}, {"unknown kind", 7}, {"duplicate index", 8},
                 {"parameter count", 9}, {"threadgroup memory over the limit", 10},
                 {"bytes outside the payload", 11}, {"bad buffer handle", 12},
                 {"grid over the limit", 13}, {"too short", 14}, {"threadgroup b not 0", 15}};
    for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
      const int k = cases[c].kind;
      blk_begin(&b, k == 2 ? (mlxn_pipeline*)(uintptr_t)0x1234 : p_add, k == 4 ? 0 : 1,
                k == 13 ? 70000 : 1, 1, k == 5 ? 2048 : 128, 1, 1);
      blk_buffer(&b, k == 1 ? 31 : 0, k == 12 ? (mlxn_buffer*)(uintptr_t)0x5678 : y,
                 k == 3 ? N * 4 + 4 : 0);
      if (k != 9) blk_buffer(&b, k == 8 ? 0 : 1, z, 0);
      if (k == 7) blk_bind(&b, 9, 2, 0, 0);
      else blk_bytes(&b, 2, &n, 4);
      if (k == 10) blk_tg(&b, 0, max_tg_mem + 1);
      if (k == 15) blk_bind(&b, MLXN_BIND_THREADGROUP_MEMORY, 0, 16, 1);
      len = blk_end(&b);
      if (k == 6) b.data[40] = 1;
      if (k == 11) { /* point the BYTES record one byte past the payload */
        uint64_t off = 1;
        memcpy(b.data + 48 + 24 * 2 + 8, &off, 8);
      }
      const uint64_t pass_len = k == 0 ? len + 1 : k == 14 ? 40 : len;
      st = f_mlxn_encoder_dispatch(enc, b.data, pass_len, msg, CAP);
      CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, words[k]) == msg, "%s: status %d (%s), want \"%s\"",
            cases[c].what, st, msg, words[k]);
      printf("refused (%s): %s\n", cases[c].what, msg);
    }
    OK(f_mlxn_encoder_commit(enc, msg, CAP)); /* empty: nothing was recorded */
    OK(f_mlxn_encoder_wait(enc, msg, CAP));
  }

  /* ---- status never blocks: a commit kept pending by a spinning kernel ---- */
  {
    const unsigned long long cycles = 200ull * 1000 * 1000; /* ~0.1 s at 2 GHz */
    len = spin_block(&b, p_spin, &cycles, flag);
    OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
    OK(f_mlxn_encoder_commit(enc, msg, CAP));
    double tq = now_ms();
    st = f_mlxn_encoder_status(enc);
    tq = now_ms() - tq;
    CHECK(st == MLXN_ENCODER_PENDING, "status right after commit of a long kernel: %d", st);
    CHECK(tq < 20.0, "status took %.2f ms", tq);
    st = f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT, "dispatch while pending: %d", st);
    CHECK(f_mlxn_encoder_commit(enc, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT, "commit while pending");
    polls = 0;
    while ((st = f_mlxn_encoder_status(enc)) == MLXN_ENCODER_PENDING) {
      ++polls;
      usleep(1000);
    }
    CHECK(st == MLXN_ENCODER_COMPLETED, "spin completes: %d", st);
    OK(f_mlxn_encoder_wait(enc, msg, CAP));
    uint32_t fl = 0;
    OK(f_mlxn_buffer_read(flag, 0, &fl, 4, msg, CAP));
    CHECK(fl == 1, "spin wrote its flag");
    printf("spin: %d pending polls, gpu time %.3f ms\n", polls,
           f_mlxn_encoder_gpu_time_ns(enc) / 1e6);
    CHECK(f_mlxn_encoder_gpu_time_ns(enc) > 10 * 1000 * 1000ull, "spin gpu time");
  }

  /* ---- flush: what is recorded starts, the recording goes on, the commit ends it ---- */
  {
    const unsigned long long cycles = 200ull * 1000 * 1000; /* ~0.1 s at 2 GHz */
    mlxn_buffer* tmp = NULL;
    OK(f_mlxn_buffer_alloc(dev, 4, &tmp, msg, CAP));
    len = spin_block(&b, p_spin, &cycles, tmp);
    OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
    double tq = now_ms();
    OK(f_mlxn_encoder_flush(enc, msg, CAP));
    tq = now_ms() - tq;
    CHECK(tq < 20.0, "flush returned after %.2f ms (it must not wait for the spin)", tq);
    CHECK(f_mlxn_encoder_status(enc) == MLXN_ENCODER_RECORDING, "a flushed encoder still records");
    f_mlxn_buffer_release(tmp); /* bound by flushed work: freed when it ends */
    OK(f_mlxn_encoder_flush(enc, msg, CAP)); /* nothing new */
    const unsigned long long few = 1000;
    len = spin_block(&b, p_spin, &few, flag);
    OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
    OK(f_mlxn_encoder_commit(enc, msg, CAP));
    OK(f_mlxn_encoder_wait(enc, msg, CAP));
    CHECK(f_mlxn_encoder_gpu_time_ns(enc) > 10 * 1000 * 1000ull, "a flushed commit's gpu time spans the flushed spin (%.3f ms)",
          f_mlxn_encoder_gpu_time_ns(enc) / 1e6);
    /* Released with flushed work and no commit: the release waits for it. */
    mlxn_encoder* fe = NULL;
    OK(f_mlxn_encoder_create(dev, &fe, msg, CAP));
    len = spin_block(&b, p_spin, &cycles, flag);
    OK(f_mlxn_encoder_dispatch(fe, b.data, len, msg, CAP));
    OK(f_mlxn_encoder_flush(fe, msg, CAP));
    f_mlxn_encoder_release(fe);
    mlxn_encoder* re = NULL;
    OK(f_mlxn_encoder_create_replayable(dev, &re, msg, CAP));
    CHECK(f_mlxn_encoder_flush(re, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT &&
              strcmp(msg, "flush: encoder must not be replayable (its recording is captured whole at its first commit) "
                          "(got a replayable encoder)") == 0,
          "flush of a replayable encoder: %s", msg);
    f_mlxn_encoder_release(re);
    CHECK(f_mlxn_encoder_flush(NULL, msg, CAP) == MLXN_ERR_INVALID_ARGUMENT, "flush of NULL");
    printf("flush: returned in %.3f ms with a spin running\n", tq);
  }

  /* A buffer released while recorded stays valid until the commit completes. */
  {
    mlxn_buffer* tmp = NULL;
    OK(f_mlxn_buffer_alloc(dev, 4, &tmp, msg, CAP));
    const unsigned long long cycles = 1000;
    len = spin_block(&b, p_spin, &cycles, tmp);
    OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
    f_mlxn_buffer_release(tmp);
    OK(f_mlxn_encoder_commit(enc, msg, CAP));
    OK(f_mlxn_encoder_wait(enc, msg, CAP));
    st = f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT, "a released buffer handle must be refused: %d", st);
  }

  /* ---- overhead, for information: many small dispatches in one commit ---- */
  {
    enum { DISPATCHES = 2000 };
    blk_begin(&b, p_add, N / TG, 1, 1, TG, 1, 1);
    blk_buffer(&b, 0, y, 0);
    blk_buffer(&b, 1, z, 0);
    blk_bytes(&b, 2, &n, 4);
    len = blk_end(&b);
    double tr = now_ms();
    for (int i = 0; i < DISPATCHES; ++i) OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
    tr = now_ms() - tr;
    double tc = now_ms();
    OK(f_mlxn_encoder_commit(enc, msg, CAP));
    tc = now_ms() - tc;
    OK(f_mlxn_encoder_wait(enc, msg, CAP));
    printf("%d dispatches of add_one (4096 floats): record %.2f us each, commit %.2f ms, gpu %.3f ms "
           "(%.2f us per kernel)\n",
           DISPATCHES, tr * 1e3 / DISPATCHES, tc, f_mlxn_encoder_gpu_time_ns(enc) / 1e6,
           f_mlxn_encoder_gpu_time_ns(enc) / 1e3 / DISPATCHES);
  }

  /* ---- record once, replay many: the first replay captures a CUDA graph ---- */
  {
    enum { DISPATCHES = 2000 };
    mlxn_encoder* rep = NULL;
    OK(f_mlxn_encoder_create_replayable(dev, &rep, msg, CAP));
    blk_begin(&b, p_add, N / TG, 1, 1, TG, 1, 1);
    blk_buffer(&b, 0, y, 0);
    blk_buffer(&b, 1, z, 0);
    blk_bytes(&b, 2, &n, 4);
    len = blk_end(&b);
    for (int i = 0; i < DISPATCHES; ++i) OK(f_mlxn_encoder_dispatch(rep, b.data, len, msg, CAP));
    st = f_mlxn_encoder_replay(rep, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "never committed"), "replay before commit: %d %s", st, msg);
    double tc = now_ms();
    OK(f_mlxn_encoder_commit(rep, msg, CAP));
    tc = now_ms() - tc;
    OK(f_mlxn_encoder_wait(rep, msg, CAP));
    st = f_mlxn_encoder_dispatch(rep, b.data, len, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "must be recording"), "dispatch after freeze: %d %s", st, msg);
    static float yh[N], zh[N];
    OK(f_mlxn_buffer_read(y, 0, yh, sizeof yh, msg, CAP));
    double first = 0, later = 0;
    for (int r = 0; r < 6; ++r) {
      const uint32_t m = r % 2 ? 100 : N;
      OK(f_mlxn_encoder_patch_bytes(rep, DISPATCHES - 1, 2, &m, 4, msg, CAP));
      for (int i = 0; i < DISPATCHES - 1; ++i) OK(f_mlxn_encoder_patch_bytes(rep, i, 2, &m, 4, msg, CAP));
      const float zero[N] = {0};
      OK(f_mlxn_buffer_write(z, 0, zero, sizeof zero, msg, CAP));
      double t = now_ms();
      OK(f_mlxn_encoder_replay(rep, msg, CAP));
      t = now_ms() - t;
      if (r == 0) first = t; else later += t / 5;
      st = f_mlxn_encoder_patch_bytes(rep, 0, 2, &m, 4, msg, CAP);
      CHECK(st == MLXN_ERR_INVALID_ARGUMENT || f_mlxn_encoder_status(rep) != MLXN_ENCODER_PENDING, "patch while running: %d", st);
      OK(f_mlxn_encoder_wait(rep, msg, CAP));
      OK(f_mlxn_buffer_read(z, 0, zh, sizeof zh, msg, CAP));
      int bad = 0;
      for (uint32_t i = 0; i < N; ++i) bad += zh[i] != (i < m ? yh[i] + 1.0f : 0.0f);
      CHECK(bad == 0, "replay %d (n = %u): %d wrong", r, m, bad);
    }
    st = f_mlxn_encoder_patch_bytes(rep, 0, 2, &n, 8, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "len must be 4"), "patch of another length: %d %s", st, msg);
    st = f_mlxn_encoder_patch_bytes(rep, DISPATCHES, 2, &n, 4, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "dispatch_index must be below"), "patch out of range: %d %s", st, msg);
    st = f_mlxn_encoder_patch_bytes(rep, 0, 1, &n, 4, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "binding_index must be a bytes binding"), "patch of a buffer: %d %s", st, msg);
    st = f_mlxn_encoder_replay(enc, msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "must be replayable"), "replay of a plain encoder: %d %s", st, msg);
    printf("%d dispatches of add_one: commit %.2f ms, first replay (captures the graph) %.2f ms, later replays "
           "%.3f ms host, gpu %.3f ms\n",
           DISPATCHES, tc, first, later, f_mlxn_encoder_gpu_time_ns(rep) / 1e6);
    f_mlxn_encoder_release(rep);
  }

  if (f_mlxn_device_limit(dev, MLXN_LIMIT_COMPUTE_CAPABILITY) >= 90) {
    tensor_map_tests(dev);
  } else {
    /* Below compute capability 9.0 a tensor map is refused, naming the rule. */
    uint8_t d[MLXN_TMAP_DESC_BYTES];
    const int cc[2] = {0, 0};
    tmap_desc(d, 0, 64, 8, 128, 64, 8, 0);
    blk_begin(&b, p_add, 1, 1, 1, 32, 1, 1);
    blk_tmap(&b, 0, y, d);
    blk_buffer(&b, 1, z, 0);
    blk_bytes(&b, 2, cc, 4);
    st = f_mlxn_encoder_dispatch(enc, b.data, blk_end(&b), msg, CAP);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && strstr(msg, "this backend has no tensor maps"), "tensor map below 9.0: %d %s", st, msg);
  }

  /* ---- an execution error: wait reports it, naming the kernel (run last: it breaks the context) ---- */
  {
    blk_begin(&b, p_fault, 1, 1, 1, 1, 1, 1);
    blk_buffer(&b, 0, y, 0);
    len = blk_end(&b);
    OK(f_mlxn_encoder_dispatch(enc, b.data, len, msg, CAP));
    OK(f_mlxn_encoder_commit(enc, msg, CAP));
    while ((st = f_mlxn_encoder_status(enc)) == MLXN_ENCODER_PENDING) usleep(100);
    CHECK(st == MLXN_ENCODER_ERROR, "status of a faulting commit: %d", st);
    st = f_mlxn_encoder_wait(enc, msg, CAP);
    CHECK(st == MLXN_ERR_COMMAND_BUFFER && strstr(msg, "fault"), "wait after a fault: %d %s", st, msg);
    printf("fault text: %s\n", msg);
  }

  f_mlxn_encoder_release(enc);
  f_mlxn_pipeline_release(p_scale);
  f_mlxn_pipeline_release(p_add);
  f_mlxn_pipeline_release(p_big);
  f_mlxn_pipeline_release(p_probe);
  f_mlxn_pipeline_release(p_spin);
  f_mlxn_pipeline_release(p_fault);
  f_mlxn_pipeline_release(p_scale3);
  f_mlxn_library_release(library);
  f_mlxn_library_release(library2);
  f_mlxn_library_release(library3);
  mlxn_buffer* all[] = {x, y, y2, z, probe, big, flag, zero};
  for (unsigned i = 0; i < sizeof all / sizeof all[0]; ++i) f_mlxn_buffer_release(all[i]);
  f_mlxn_device_close(dev);

  /* CUDA keeps an execution error for the rest of the process (it must be
   * restarted), so opening the device again is refused with that error's
   * text, cleanly. */
  {
    mlxn_device* d2 = NULL;
    st = f_mlxn_device_open(0, &d2, msg, CAP);
    CHECK(st == MLXN_ERR_DEVICE_NOT_FOUND && d2 == NULL && strstr(msg, "ILLEGAL_ADDRESS"),
          "open after a fault: %d %s", st, msg);
    printf("open after a fault: %s\n", msg);
    if (d2) f_mlxn_device_close(d2);
  }

  printf("%s: %d checks, %d failed\n", failures ? "FAILED" : "PASSED", checks, failures);
  return failures ? 1 : 0;
}
