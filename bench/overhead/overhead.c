// The C side of bench/overhead: the host cost of encoding one dispatch through
// the C ABI, written as a C caller would (pack the block, one call), for
// comparison with the same loop in TypeScript (run.ts).
//
// Usage: overhead <library> <kernel.metal> <dispatches per batch> <batches>
// Prints one line: "c_ns_per_dispatch <value>".
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlx_native.h"

#define SYM(name) static __typeof__(&name) p_##name;
SYM(mlxn_abi_version)
SYM(mlxn_device_open)
SYM(mlxn_device_close)
SYM(mlxn_buffer_alloc)
SYM(mlxn_buffer_release)
SYM(mlxn_library_compile)
SYM(mlxn_library_release)
SYM(mlxn_pipeline_create)
SYM(mlxn_pipeline_release)
SYM(mlxn_encoder_create)
SYM(mlxn_encoder_release)
SYM(mlxn_encoder_dispatch)
SYM(mlxn_encoder_commit)
SYM(mlxn_encoder_wait)

static char msg[4096];

static void check(mlxn_status st, const char* what) {
  if (st != MLXN_OK) {
    fprintf(stderr, "%s: status %d: %s\n", what, st, msg);
    exit(1);
  }
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void put32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s <library> <kernel.metal> <dispatches per batch> <batches>\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
#define LOAD(name)                                                  \
  p_##name = (__typeof__(p_##name))dlsym(lib, #name);               \
  if (!p_##name) {                                                  \
    fprintf(stderr, "missing symbol %s\n", #name);                  \
    return 1;                                                       \
  }
  LOAD(mlxn_abi_version) LOAD(mlxn_device_open) LOAD(mlxn_device_close) LOAD(mlxn_buffer_alloc)
  LOAD(mlxn_buffer_release) LOAD(mlxn_library_compile) LOAD(mlxn_library_release)
  LOAD(mlxn_pipeline_create) LOAD(mlxn_pipeline_release) LOAD(mlxn_encoder_create)
  LOAD(mlxn_encoder_release) LOAD(mlxn_encoder_dispatch) LOAD(mlxn_encoder_commit)
  LOAD(mlxn_encoder_wait)
  if (p_mlxn_abi_version() != MLXN_ABI_VERSION) {
    fprintf(stderr, "ABI version mismatch\n");
    return 1;
  }
  const long per_batch = atol(argv[3]), batches = atol(argv[4]);

  FILE* f = fopen(argv[2], "rb");
  if (!f) {
    perror(argv[2]);
    return 1;
  }
  static char src[1 << 16];
  size_t src_len = fread(src, 1, sizeof src - 1, f);
  fclose(f);

  mlxn_device* dev;
  check(p_mlxn_device_open(0, &dev, msg, sizeof msg), "device_open");
  mlxn_buffer* bufs[4];
  for (int i = 0; i < 4; i++) check(p_mlxn_buffer_alloc(dev, 256, &bufs[i], msg, sizeof msg), "buffer_alloc");
  mlxn_library* library;
  check(p_mlxn_library_compile(dev, src, src_len, "kernel.metal", NULL, 0, &library, msg, sizeof msg), "compile");
  mlxn_pipeline* pipe;
  check(p_mlxn_pipeline_create(library, "add3", &pipe, msg, sizeof msg), "pipeline_create");
  mlxn_encoder* enc;
  check(p_mlxn_encoder_create(dev, &enc, msg, sizeof msg), "encoder_create");

  // 48-byte header, 5 binding records, 4 bytes of payload.
  uint8_t block[48 + 5 * 24 + 4];
  const float s = 1.5f;
  double total = 0;
  for (long b = -1; b < batches; b++) {  // batch -1 warms up and is not counted
    const double t0 = now_ns();
    for (long i = 0; i < per_batch; i++) {
      put64(block + MLXN_BLOCK_PIPELINE, (uint64_t)(uintptr_t)pipe);
      for (int d = 0; d < 3; d++) put32(block + MLXN_BLOCK_GRID + 4 * d, 1), put32(block + MLXN_BLOCK_THREADS + 4 * d, 1);
      put32(block + MLXN_BLOCK_BINDING_COUNT, 5), put32(block + MLXN_BLOCK_PAYLOAD_BYTES, 4);
      put64(block + MLXN_BLOCK_RESERVED, 0);
      uint8_t* r = block + MLXN_DISPATCH_HEADER_BYTES;
      for (uint32_t k = 0; k < 4; k++, r += MLXN_DISPATCH_BINDING_BYTES) {
        put32(r + MLXN_RECORD_KIND, MLXN_BIND_BUFFER), put32(r + MLXN_RECORD_INDEX, k);
        put64(r + MLXN_RECORD_A, (uint64_t)(uintptr_t)bufs[k]), put64(r + MLXN_RECORD_B, 0);
      }
      put32(r + MLXN_RECORD_KIND, MLXN_BIND_BYTES), put32(r + MLXN_RECORD_INDEX, 4);
      put64(r + MLXN_RECORD_A, 0), put64(r + MLXN_RECORD_B, 4);
      memcpy(r + MLXN_DISPATCH_BINDING_BYTES, &s, 4);
      check(p_mlxn_encoder_dispatch(enc, block, sizeof block, msg, sizeof msg), "dispatch");
    }
    const double t1 = now_ns();
    if (b >= 0) total += t1 - t0;
    check(p_mlxn_encoder_commit(enc, msg, sizeof msg), "commit");
    check(p_mlxn_encoder_wait(enc, msg, sizeof msg), "wait");
  }
  printf("c_ns_per_dispatch %.1f\n", total / (double)(per_batch * batches));

  p_mlxn_encoder_release(enc);
  p_mlxn_pipeline_release(pipe);
  p_mlxn_library_release(library);
  for (int i = 0; i < 4; i++) p_mlxn_buffer_release(bufs[i]);
  p_mlxn_device_close(dev);
  return 0;
}
