// A C program against libMlxNative through native/include/mlx_native.h, as
// any C caller would use it: opens the device, allocates, writes and reads a
// buffer, compiles a kernel with a function constant, dispatches it with more
// than 4 KiB of inline data (the Swift code copies that into a buffer, since
// Metal's setBytes takes at most 4 KiB), then checks results and the status
// codes of misuse. Prints one line per check; exits non-zero on the first
// failure.
//
// Built and run by scripts/swift-ci.sh (Linux, over the emulator); builds the
// same way against the macOS dylib:
//   cc -I native/include swift/Tests/c-abi/main.c -L <dir> -lMlxNative -Wl,-rpath,<dir>
#define _POSIX_C_SOURCE 200809L  /* nanosleep under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlx_native.h"

static char msg[4096];
static int checks;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    ++checks;                                                                \
    if (!(cond)) {                                                           \
      fprintf(stderr, "c-abi: FAIL %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n  last message: %s\n", msg);                        \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define OK(call) CHECK((call) == MLXN_OK, "%s", #call)

static const char kSource[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "constant float scale [[function_constant(0)]];\n"
    "// out[i] = table[i] * scale + out[i]; table comes as inline bytes.\n"
    "kernel void scale_add(device float* out [[buffer(0)]],\n"
    "                      constant float* table [[buffer(1)]],\n"
    "                      constant uint& n [[buffer(2)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  if (i < n) out[i] = table[i] * scale + out[i];\n"
    "}\n";

enum { N = 2048 };  // 8 KiB of floats: twice what setBytes takes

// One dispatch block (layout in mlx_native.h): the header, the binding
// records, then the payload.
typedef struct {
  uint8_t bytes[MLXN_DISPATCH_HEADER_BYTES + 4 * MLXN_DISPATCH_BINDING_BYTES + N * 4 + 16];
  uint32_t count, payload;
} Block;

static void put32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }  // little-endian hosts only
static void put64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }

static void bind(Block* b, uint32_t kind, uint32_t index, uint64_t a, uint64_t v) {
  uint8_t* r = b->bytes + MLXN_DISPATCH_HEADER_BYTES + b->count * MLXN_DISPATCH_BINDING_BYTES;
  put32(r, kind);
  put32(r + 4, index);
  put64(r + 8, a);
  put64(r + 16, v);
  b->count++;
}

// Lays out a block with the given bindings and payload; returns its length.
static uint64_t finish(Block* b, mlxn_pipeline* pipeline, uint32_t groups, uint32_t threads,
                       const void* payload, uint32_t payload_len) {
  uint8_t* h = b->bytes;
  memset(h, 0, MLXN_DISPATCH_HEADER_BYTES);
  put64(h, (uint64_t)(uintptr_t)pipeline);
  put32(h + 8, groups);
  put32(h + 12, 1);
  put32(h + 16, 1);
  put32(h + 20, threads);
  put32(h + 24, 1);
  put32(h + 28, 1);
  put32(h + 32, b->count);
  put32(h + 36, payload_len);
  memcpy(h + MLXN_DISPATCH_HEADER_BYTES + b->count * MLXN_DISPATCH_BINDING_BYTES, payload, payload_len);
  return MLXN_DISPATCH_HEADER_BYTES + (uint64_t)b->count * MLXN_DISPATCH_BINDING_BYTES + payload_len;
}

int main(void) {
  const uint64_t cap = sizeof msg;

  CHECK(mlxn_abi_version() == MLXN_ABI_VERSION, "abi %u", mlxn_abi_version());
  CHECK(strcmp(mlxn_backend_name(), "metal") == 0, "backend %s", mlxn_backend_name());
  CHECK(mlxn_device_count() == 1, "device count %u", mlxn_device_count());

  mlxn_device* device = (mlxn_device*)1;
  CHECK(mlxn_device_open(1, &device, msg, cap) == MLXN_ERR_DEVICE_NOT_FOUND && device == NULL, "ordinal 1");
  OK(mlxn_device_open(0, &device, msg, cap));
  char name[256];
  CHECK(mlxn_device_name(device, name, sizeof name) > 0, "device name");
  CHECK(mlxn_device_limit(device, MLXN_LIMIT_SIMD_WIDTH) == 32, "simd width");
  CHECK(mlxn_device_limit(device, MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP) >= 256, "max threads");
  CHECK(mlxn_device_set_option(device, "schedule", "random", msg, cap) == MLXN_ERR_INVALID_ARGUMENT,
        "the metal backend has no options");
  printf("c-abi: device '%s'\n", name);

  // Buffers: zero-filled, round trip, range checks.
  mlxn_buffer* out = NULL;
  OK(mlxn_buffer_alloc(device, N * 4, &out, msg, cap));
  CHECK(mlxn_buffer_length(out) == N * 4, "length");
  const float* host = (const float*)mlxn_buffer_host_ptr(out);
  CHECK(host != NULL, "host pointer");
  for (int i = 0; i < N; ++i) CHECK(host[i] == 0.0f, "zero-filled at %d", i);
  float initial[N];
  for (int i = 0; i < N; ++i) initial[i] = (float)i;
  OK(mlxn_buffer_write(out, 0, initial, sizeof initial, msg, cap));
  float back[N];
  OK(mlxn_buffer_read(out, 0, back, sizeof back, msg, cap));
  CHECK(memcmp(back, initial, sizeof back) == 0, "round trip");
  CHECK(mlxn_buffer_write(out, N * 4 - 2, initial, 4, msg, cap) == MLXN_ERR_INVALID_ARGUMENT && msg[0],
        "write past the end");
  CHECK(mlxn_buffer_read(out, UINT64_MAX, back, 4, msg, cap) == MLXN_ERR_INVALID_ARGUMENT, "offset overflow");

  // Libraries: a compile error cites the file; constants specialize the kernel.
  mlxn_library* broken = NULL;
  const char bad[] = "#include <metal_stdlib>\nkernel void k() { undeclared = 1; }\n";
  CHECK(mlxn_library_compile(device, bad, sizeof bad - 1, "broken.metal", NULL, 0, &broken, msg, cap) ==
                MLXN_ERR_SHADER_COMPILATION && broken == NULL && strstr(msg, "broken.metal:2:"),
        "compile error");
  const float scale = 2.0f;
  uint32_t constant[3] = {0, MLXN_CONST_F32, 0};
  memcpy(&constant[2], &scale, 4);
  mlxn_library* library = NULL;
  OK(mlxn_library_compile(device, kSource, sizeof kSource - 1, "c-abi.metal", constant, 1, &library, msg, cap));
  // Compiling off the caller's thread: the same library or the same error.
  mlxn_compile_job* job = NULL;
  mlxn_library* built = NULL;
  CHECK(mlxn_library_compile_start(NULL, kSource, sizeof kSource - 1, "c-abi.metal", NULL, 0, &job, msg, cap) ==
            MLXN_ERR_INVALID_ARGUMENT,
        "compile_start without a device");
  CHECK(mlxn_compile_job_done(NULL) == 0, "done of a null job");
  CHECK(mlxn_compile_job_finish(NULL, &built, msg, cap) == MLXN_ERR_INVALID_ARGUMENT, "finish of a null job");
  OK(mlxn_library_compile_start(device, kSource, sizeof kSource - 1, "c-abi.metal", constant, 1, &job, msg, cap));
  const struct timespec ms = {0, 1000000};
  while (!mlxn_compile_job_done(job)) nanosleep(&ms, NULL);
  CHECK(mlxn_compile_job_finish(job, NULL, msg, cap) == MLXN_ERR_INVALID_ARGUMENT, "finish without out");
  OK(mlxn_compile_job_finish(job, &built, msg, cap));
  char built_names[64];
  CHECK(mlxn_library_kernel_names(built, built_names, sizeof built_names) == strlen("scale_add"), "job's kernels");
  mlxn_library_release(built);
  built = (mlxn_library*)&job;
  OK(mlxn_library_compile_start(device, bad, sizeof bad - 1, "broken.metal", NULL, 0, &job, msg, cap));
  CHECK(mlxn_compile_job_finish(job, &built, msg, cap) == MLXN_ERR_SHADER_COMPILATION && built == NULL &&
            strstr(msg, "broken.metal:2:"),
        "job's compile error: %s", msg);

  char names[64];
  CHECK(mlxn_library_kernel_names(library, names, sizeof names) == strlen("scale_add") &&
            strcmp(names, "scale_add") == 0,
        "kernel names: %s", names);
  mlxn_pipeline* missing = NULL;
  CHECK(mlxn_pipeline_create(library, "nope", &missing, msg, cap) == MLXN_ERR_KERNEL_NOT_FOUND && !missing,
        "missing kernel");
  mlxn_pipeline* pipeline = NULL;
  OK(mlxn_pipeline_create(library, "scale_add", &pipeline, msg, cap));
  CHECK(mlxn_pipeline_max_threads(pipeline) >= 256, "pipeline max threads %u", mlxn_pipeline_max_threads(pipeline));

  // Dispatch twice with a barrier between: out[i] = i + 2 * table[i] * 2.
  float table[N];
  for (int i = 0; i < N; ++i) table[i] = (float)(i % 7) - 3.0f;
  uint8_t payload[N * 4 + 4];
  const uint32_t n = N;
  memcpy(payload, table, N * 4);
  memcpy(payload + N * 4, &n, 4);
  static Block block;
  bind(&block, MLXN_BIND_BUFFER, 0, (uint64_t)(uintptr_t)out, 0);
  bind(&block, MLXN_BIND_BYTES, 1, 0, N * 4);
  bind(&block, MLXN_BIND_BYTES, 2, N * 4, 4);
  const uint64_t len = finish(&block, pipeline, N / 256, 256, payload, sizeof payload);

  mlxn_encoder* encoder = NULL;
  OK(mlxn_encoder_create(device, &encoder, msg, cap));
  CHECK(mlxn_encoder_status(encoder) == MLXN_ENCODER_RECORDING, "recording");
  CHECK(mlxn_encoder_dispatch(encoder, block.bytes, len - 1, msg, cap) == MLXN_ERR_INVALID_ARGUMENT,
        "block length off by one");
  OK(mlxn_encoder_dispatch(encoder, block.bytes, len, msg, cap));
  OK(mlxn_encoder_barrier(encoder, msg, cap));
  OK(mlxn_encoder_dispatch(encoder, block.bytes, len, msg, cap));
  OK(mlxn_encoder_commit(encoder, msg, cap));
  OK(mlxn_encoder_wait(encoder, msg, cap));
  CHECK(mlxn_encoder_status(encoder) == MLXN_ENCODER_COMPLETED, "completed: %d", mlxn_encoder_status(encoder));
  OK(mlxn_buffer_read(out, 0, back, sizeof back, msg, cap));
  for (int i = 0; i < N; ++i)
    CHECK(back[i] == initial[i] + 2.0f * table[i] * scale, "out[%d] = %g, expected %g", i, back[i],
          initial[i] + 2.0f * table[i] * scale);

  // Misuse: an unbound [[buffer(2)]], a bad kind, a null encoder.
  static Block unbound;
  bind(&unbound, MLXN_BIND_BUFFER, 0, (uint64_t)(uintptr_t)out, 0);
  bind(&unbound, MLXN_BIND_BYTES, 1, 0, N * 4);
  const uint64_t unbound_len = finish(&unbound, pipeline, 1, 256, payload, N * 4);
  CHECK(mlxn_encoder_dispatch(encoder, unbound.bytes, unbound_len, msg, cap) == MLXN_ERR_INVALID_ARGUMENT &&
            strstr(msg, "[[buffer(2)]] is not bound"),
        "unbound index");
  static Block bad_kind;
  bind(&bad_kind, 9, 0, 0, 0);
  const uint64_t bad_kind_len = finish(&bad_kind, pipeline, 1, 1, NULL, 0);
  CHECK(mlxn_encoder_dispatch(encoder, bad_kind.bytes, bad_kind_len, msg, cap) == MLXN_ERR_INVALID_ARGUMENT,
        "unknown binding kind");
  CHECK(mlxn_encoder_commit(NULL, msg, cap) == MLXN_ERR_INVALID_ARGUMENT, "null encoder");
  CHECK(mlxn_encoder_status(NULL) == MLXN_ENCODER_ERROR, "status of null");

  // Nothing of the refused dispatches was recorded: an empty commit.
  OK(mlxn_encoder_commit(encoder, msg, cap));
  OK(mlxn_encoder_wait(encoder, msg, cap));

  mlxn_encoder_release(encoder);
  mlxn_pipeline_release(pipeline);
  mlxn_library_release(library);
  mlxn_buffer_release(out);
  // A job holds its device open: closing the device first is safe.
  OK(mlxn_library_compile_start(device, kSource, sizeof kSource - 1, "c-abi.metal", constant, 1, &job, msg, cap));
  mlxn_device_close(device);
  OK(mlxn_compile_job_finish(job, &built, msg, cap));
  mlxn_library_release(built);
  printf("c-abi: %d checks passed\n", checks);
  return 0;
}
