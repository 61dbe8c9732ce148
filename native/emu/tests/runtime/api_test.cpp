// Tests of the emulator's C ABI (mlx_native.h): devices, buffers, run-time
// compilation and its disk cache, pipelines, dispatch-block validation,
// encoders. Kernels are hand-written C++ against mlxn_emu_kernel_abi.h,
// "translated" by tests/runtime/fake/fake_translate.cpp.
// Run: native/emu/tests/runtime/run.sh
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../../include/mlx_native.h"
#include "../../../common/tests/check.h"

static char msg[8192];
static bool has(const char* sub) { return std::strstr(msg, sub) != nullptr; }

static const char* kSource = R"SRC(#include "mlxn_emu_kernel_abi.h"
// kernel: add_delta mlxn_emu_kernel_add_delta buffers=0,1
// kernel: tg_reverse mlxn_emu_kernel_tg_reverse buffers=0 threadgroups=0 max=256
extern "C" uint32_t mlxn_emu_kernel_abi(void) { return MLXN_EMU_KERNEL_ABI; }

// buffer(0): float data; buffer(1): inline {float delta; uint32 n}
extern "C" void mlxn_emu_kernel_add_delta(mlxn_emu_thread* t) {
  const float delta = *(const float*)t->buffers[1].ptr;
  const unsigned n = ((const unsigned*)t->buffers[1].ptr)[1];
  unsigned i = t->thread_position_in_grid[0];
  if (i >= n) return;
  unsigned long long off = (unsigned long long)i * 4;
  float* p;
  if (off + 4 > t->buffers[0].length)
    p = (float*)t->hooks->out_of_bounds(t, MLXN_EMU_SPACE_DEVICE, 0, (long long)off, 4,
                                        t->buffers[0].length, {__FILE__, __LINE__, 5});
  else
    p = (float*)(t->buffers[0].ptr + off);
  *p += delta;
}

// Reverses each threadgroup's slice of buffer(0) through threadgroup(0).
extern "C" void mlxn_emu_kernel_tg_reverse(mlxn_emu_thread* t) {
  float* tg = (float*)t->threadgroup[0].ptr;
  float* data = (float*)t->buffers[0].ptr;
  unsigned i = t->thread_index_in_threadgroup, n = t->threads_per_threadgroup[0];
  unsigned g = t->thread_position_in_grid[0];
  tg[i] = data[g];
  t->hooks->threadgroup_barrier(t, {__FILE__, __LINE__, 3}, 0);
  data[g] = tg[n - 1 - i];
}
)SRC";

static std::vector<uint8_t> block(mlxn_pipeline* p, uint32_t gx, uint32_t tx) {
  std::vector<uint8_t> b(48, 0);
  uint64_t h = reinterpret_cast<uint64_t>(p);
  std::memcpy(b.data(), &h, 8);
  uint32_t dims[6] = {gx, 1, 1, tx, 1, 1};
  std::memcpy(b.data() + 8, dims, 24);
  return b;
}

// Appends a binding record; the block's binding count and payload length are
// fixed up by finish().
static void add_binding(std::vector<uint8_t>& b, uint32_t kind, uint32_t index, uint64_t a, uint64_t bb) {
  uint8_t r[24];
  std::memcpy(r, &kind, 4);
  std::memcpy(r + 4, &index, 4);
  std::memcpy(r + 8, &a, 8);
  std::memcpy(r + 16, &bb, 8);
  b.insert(b.end(), r, r + 24);
}

static void finish(std::vector<uint8_t>& b, uint32_t n, const std::vector<uint8_t>& payload) {
  uint32_t p = uint32_t(payload.size());
  std::memcpy(b.data() + 32, &n, 4);
  std::memcpy(b.data() + 36, &p, 4);
  b.insert(b.end(), payload.begin(), payload.end());
}

static std::vector<uint8_t> add_delta_block(mlxn_pipeline* p, mlxn_buffer* buf, uint32_t n, float delta,
                                            uint32_t threads = 64) {
  std::vector<uint8_t> b = block(p, threads ? (n + threads - 1) / threads : 1, threads);
  add_binding(b, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
  add_binding(b, MLXN_BIND_BYTES, 1, 0, 8);
  std::vector<uint8_t> payload(8);
  std::memcpy(payload.data(), &delta, 4);
  std::memcpy(payload.data() + 4, &n, 4);
  finish(b, 2, payload);
  return b;
}

int main() {
  char cache[] = "/tmp/mlxn-emu-api-test-XXXXXX";
  if (!mkdtemp(cache)) return 2;
  setenv("MLX_NATIVE_EMU_CACHE", cache, 1);

  CHECK(mlxn_abi_version() == MLXN_ABI_VERSION, "abi");
  CHECK(std::strcmp(mlxn_backend_name(), "emu") == 0, "backend name");
  CHECK(mlxn_device_count() == 1, "count");

  mlxn_device* dev = nullptr;
  CHECK(mlxn_device_open(1, &dev, msg, sizeof msg) == MLXN_ERR_DEVICE_NOT_FOUND, "%s", msg);
  CHECK(mlxn_device_open(0, &dev, msg, sizeof msg) == MLXN_OK, "%s", msg);
  char name[128];
  uint64_t full = mlxn_device_name(dev, name, sizeof name);
  CHECK(std::strncmp(name, "CPU emulator (", 14) == 0 && full == std::strlen(name), "%s", name);
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP) == 1024, "limit");
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_MAX_THREADGROUP_MEMORY) == 32768, "limit");
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_SIMD_WIDTH) == 32, "limit");
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_COMPUTE_CAPABILITY) == 0, "limit");
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_MULTIPROCESSORS) == 0, "limit");
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_SHARED_MEMORY) == 1, "limit");
  CHECK(mlxn_device_limit(dev, MLXN_LIMIT_MAX_BUFFER_LENGTH) > (1u << 20), "limit");
  CHECK(mlxn_device_limit(dev, 99) == 0, "limit");
  CHECK(mlxn_device_set_option(dev, "schedule", "random", msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_device_set_option(dev, "seed", "42", msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_device_set_option(dev, "seed", "4x", msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT && has("seed"),
        "%s", msg);
  CHECK(mlxn_device_set_option(dev, "schedule", "fast", msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT, "%s", msg);
  CHECK(mlxn_device_set_option(dev, "color", "red", msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT &&
            has("unknown emu option 'color'"),
        "%s", msg);
  CHECK(mlxn_device_set_option(dev, "schedule", "sequential", msg, sizeof msg) == MLXN_OK, "%s", msg);

  // Buffers.
  mlxn_buffer* buf = nullptr;
  const uint32_t n = 1000;
  CHECK(mlxn_buffer_alloc(dev, n * 4, &buf, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_buffer_length(buf) == n * 4, "length");
  float* host = static_cast<float*>(mlxn_buffer_host_ptr(buf));
  CHECK(host && (reinterpret_cast<uintptr_t>(host) & 15) == 0, "host ptr");
  bool zero = true;
  for (uint32_t i = 0; i < n; ++i) zero &= host[i] == 0.f;
  CHECK(zero, "not zero-filled");
  std::vector<float> init(n);
  for (uint32_t i = 0; i < n; ++i) init[i] = float(i);
  CHECK(mlxn_buffer_write(buf, 0, init.data(), n * 4, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_buffer_write(buf, 4, init.data(), n * 4, msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT &&
            has("outside the buffer"),
        "%s", msg);
  float probe[2];
  CHECK(mlxn_buffer_read(buf, 8, probe, 8, msg, sizeof msg) == MLXN_OK && probe[0] == 2.f && probe[1] == 3.f,
        "%s", msg);
  mlxn_buffer* big = nullptr;
  CHECK(mlxn_buffer_alloc(dev, 8u << 20, &big, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(static_cast<uint8_t*>(mlxn_buffer_host_ptr(big))[(8u << 20) - 1] == 0, "big zero");
  mlxn_buffer_release(big);
  mlxn_buffer* huge = nullptr;
  CHECK(mlxn_buffer_alloc(dev, ~uint64_t(0), &huge, msg, sizeof msg) == MLXN_ERR_BUFFER_ALLOCATION, "%s", msg);

  // Compilation: a compile error cites the source's file and line.
  mlxn_library* lib = nullptr;
  const char* bad = "// kernel: k mlxn_emu_kernel_k\nint x = 1;\nint y = undefined_name;\n";
  CHECK(mlxn_library_compile(dev, bad, std::strlen(bad), "broken.metal", nullptr, 0, &lib, msg, sizeof msg) ==
                MLXN_ERR_SHADER_COMPILATION &&
            has("broken.metal:3:") && has("undefined_name"),
        "%s", msg);

  // Compiling on the library's thread: the compile's own errors, at finish;
  // the job holds the device open, so it may be closed before the finish.
  {
    mlxn_compile_job* job = nullptr;
    mlxn_library* got = nullptr;
    CHECK(mlxn_library_compile_start(nullptr, bad, std::strlen(bad), "broken.metal", nullptr, 0, &job, msg,
                                     sizeof msg) == MLXN_ERR_INVALID_ARGUMENT && job == nullptr,
          "start without a device");
    CHECK(mlxn_compile_job_done(nullptr) == 0, "done of a null job");
    CHECK(mlxn_compile_job_finish(nullptr, &got, msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT, "finish of null");
    CHECK(mlxn_library_compile_start(dev, bad, std::strlen(bad), "broken.metal", nullptr, 0, &job, msg,
                                     sizeof msg) == MLXN_OK && job != nullptr,
          "%s", msg);
    while (!mlxn_compile_job_done(job)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(mlxn_compile_job_finish(job, nullptr, msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT, "finish without out");
    CHECK(mlxn_compile_job_finish(job, &got, msg, sizeof msg) == MLXN_ERR_SHADER_COMPILATION && got == nullptr &&
              has("broken.metal:3:") && has("undefined_name"),
          "%s", msg);
    CHECK(mlxn_library_compile_start(dev, kSource, std::strlen(kSource), "x.metal\n#error", nullptr, 0, &job, msg,
                                     sizeof msg) == MLXN_OK,
          "%s", msg);
    CHECK(mlxn_compile_job_finish(job, &got, msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT &&
              has("without control characters"),
          "%s", msg);
    mlxn_device* other = nullptr;
    CHECK(mlxn_device_open(0, &other, msg, sizeof msg) == MLXN_OK, "%s", msg);
    CHECK(mlxn_library_compile_start(other, kSource, std::strlen(kSource), "job.metal", nullptr, 0, &job, msg,
                                     sizeof msg) == MLXN_OK,
          "%s", msg);
    mlxn_device_close(other);
    CHECK(mlxn_compile_job_finish(job, &got, msg, sizeof msg) == MLXN_OK && got != nullptr, "%s", msg);
    char job_names[256];
    mlxn_library_kernel_names(got, job_names, sizeof job_names);
    CHECK(std::strcmp(job_names, "add_delta\ntg_reverse") == 0, "%s", job_names);
    mlxn_library_release(got);  // the device's last reference
  }

  // A name with a control character would reach the generated C++ (#line).
  CHECK(mlxn_library_compile(dev, kSource, std::strlen(kSource), "x.metal\n#error injected", nullptr, 0, &lib, msg,
                             sizeof msg) == MLXN_ERR_INVALID_ARGUMENT &&
            has("without control characters"),
        "%s", msg);

  auto t0 = std::chrono::steady_clock::now();
  CHECK(mlxn_library_compile(dev, kSource, std::strlen(kSource), "kernels.metal", nullptr, 0, &lib, msg,
                             sizeof msg) == MLXN_OK,
        "%s", msg);
  auto t1 = std::chrono::steady_clock::now();
  if (!lib) {
    check_summary();
    return 1;
  }
  char names[256];
  mlxn_library_kernel_names(lib, names, sizeof names);
  CHECK(std::strcmp(names, "add_delta\ntg_reverse") == 0, "%s", names);

  // The second compile of the same source is served by the disk cache.
  mlxn_library* lib2 = nullptr;
  auto t2 = std::chrono::steady_clock::now();
  CHECK(mlxn_library_compile(dev, kSource, std::strlen(kSource), "kernels.metal", nullptr, 0, &lib2, msg,
                             sizeof msg) == MLXN_OK,
        "%s", msg);
  auto t3 = std::chrono::steady_clock::now();
  double first_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  double cached_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
  std::printf("compile %.1f ms, cached %.1f ms\n", first_ms, cached_ms);
  CHECK(cached_ms < first_ms / 3, "cache not used: %.1f vs %.1f ms", cached_ms, first_ms);
  mlxn_library_release(lib2);
  // Function constants are part of the cache key (they change the C++).
  uint32_t fc[3] = {0, MLXN_CONST_U32, 7};
  CHECK(mlxn_library_compile(dev, kSource, std::strlen(kSource), "kernels.metal", fc, 1, &lib2, msg,
                             sizeof msg) == MLXN_OK,
        "%s", msg);
  mlxn_library_release(lib2);
  uint32_t bad_fc[3] = {0, 99, 7};
  CHECK(mlxn_library_compile(dev, kSource, std::strlen(kSource), "kernels.metal", bad_fc, 1, &lib2, msg,
                             sizeof msg) == MLXN_ERR_INVALID_ARGUMENT,
        "%s", msg);

  mlxn_pipeline* pl = nullptr;
  CHECK(mlxn_pipeline_create(lib, "nope", &pl, msg, sizeof msg) == MLXN_ERR_KERNEL_NOT_FOUND && has("'nope'") &&
            has("add_delta"),
        "%s", msg);
  mlxn_pipeline* add = nullptr;
  mlxn_pipeline* rev = nullptr;
  CHECK(mlxn_pipeline_create(lib, "add_delta", &add, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_pipeline_create(lib, "tg_reverse", &rev, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_pipeline_max_threads(add) == 1024 && mlxn_pipeline_max_threads(rev) == 256, "max threads");
  CHECK(mlxn_pipeline_static_threadgroup_memory(rev) == 0, "static tg");

  // Encoders: record, commit, poll, wait.
  mlxn_encoder* enc = nullptr;
  CHECK(mlxn_encoder_create(dev, &enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_status(enc) == MLXN_ENCODER_RECORDING, "status");
  CHECK(mlxn_encoder_wait(enc, msg, sizeof msg) == MLXN_OK, "wait with nothing committed: %s", msg);
  std::vector<uint8_t> b = add_delta_block(add, buf, n, 0.5f);
  CHECK(mlxn_encoder_dispatch(enc, b.data(), b.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_barrier(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  b = add_delta_block(add, buf, n, 0.25f);
  CHECK(mlxn_encoder_dispatch(enc, b.data(), b.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
  // The block was copied: changing it now has no effect.
  std::memset(b.data() + b.size() - 8, 0xff, 8);
  std::vector<uint8_t> rb = block(rev, n / 200, 200);
  add_binding(rb, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
  add_binding(rb, MLXN_BIND_THREADGROUP_MEMORY, 0, 200 * 4, 0);
  finish(rb, 2, {});
  CHECK(mlxn_encoder_dispatch(enc, rb.data(), rb.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_commit(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_dispatch(enc, rb.data(), rb.size(), msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT ||
            mlxn_encoder_status(enc) != MLXN_ENCODER_PENDING,
        "dispatch while pending: %s", msg);
  while (mlxn_encoder_status(enc) == MLXN_ENCODER_PENDING) std::this_thread::yield();
  CHECK(mlxn_encoder_status(enc) == MLXN_ENCODER_COMPLETED, "status %d", mlxn_encoder_status(enc));
  CHECK(mlxn_encoder_wait(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_gpu_time_ns(enc) > 0, "gpu time");
  bool ok = true;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t g = i / 200, j = i % 200;
    ok &= host[i] == float(g * 200 + 199 - j) + 0.75f;
  }
  CHECK(ok, "results wrong: host[0]=%f", host[0]);

  // An out-of-bounds write fails the commit with kernel, binding and offset.
  mlxn_buffer* small = nullptr;
  mlxn_buffer_alloc(dev, 100 * 4, &small, msg, sizeof msg);
  b = add_delta_block(add, small, 128, 1.f);
  CHECK(mlxn_encoder_dispatch(enc, b.data(), b.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_status(enc) == MLXN_ENCODER_RECORDING, "records afresh");
  CHECK(mlxn_encoder_commit(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_wait(enc, msg, sizeof msg) == MLXN_ERR_COMMAND_BUFFER && has("add_delta") &&
            has("[[buffer(0)]]") && has("byte offset 400") && has("kernels.metal:16:5"),
        "%s", msg);
  CHECK(mlxn_encoder_status(enc) == MLXN_ENCODER_ERROR, "error status");
  CHECK(mlxn_encoder_commit(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_wait(enc, msg, sizeof msg) == MLXN_OK, "empty commit after error: %s", msg);

  // Dispatch validation: nothing is recorded on error.
  auto reject = [&](std::vector<uint8_t> blk, const char* want) {
    msg[0] = 0;
    mlxn_status st = mlxn_encoder_dispatch(enc, blk.data(), blk.size(), msg, sizeof msg);
    CHECK(st == MLXN_ERR_INVALID_ARGUMENT && has(want), "want '%s', got %d: %s", want, st, msg);
  };
  b = add_delta_block(add, buf, n, 1.f);
  reject(std::vector<uint8_t>(b.begin(), b.end() - 1), "block_len must be 48 + 24 * 2 bindings + 8 payload bytes = 104 (got 103)");
  reject(add_delta_block(add, buf, n, 1.f, 1025), "threads per threadgroup must be at most 1024 for this pipeline (got 1025x1x1 = 1025)");
  {
    std::vector<uint8_t> x = block(rev, 1, 512);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
    add_binding(x, MLXN_BIND_THREADGROUP_MEMORY, 0, 2048, 0);
    finish(x, 2, {});
    reject(x, "threads per threadgroup must be at most 256 for this pipeline (got 512x1x1 = 512)");
  }
  {
    std::vector<uint8_t> x = block(rev, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
    add_binding(x, MLXN_BIND_THREADGROUP_MEMORY, 0, 32768 + 4, 0);
    finish(x, 2, {});
    reject(x, "32768");
  }
  {
    std::vector<uint8_t> x = block(rev, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
    add_binding(x, MLXN_BIND_THREADGROUP_MEMORY, 0, 16384 + 16, 0);
    add_binding(x, MLXN_BIND_THREADGROUP_MEMORY, 1, 16384, 0);
    finish(x, 3, {});
    reject(x, "threadgroup memory must be at most 32768 bytes per threadgroup (got 32784 bytes bound + 0 bytes static)");
  }
  {
    std::vector<uint8_t> x = block(rev, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
    finish(x, 1, {});
    reject(x, "kernel 'tg_reverse': [[threadgroup(0)]] has no threadgroup memory length");
  }
  {
    std::vector<uint8_t> x = block(add, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
    finish(x, 1, {});
    reject(x, "kernel 'add_delta': [[buffer(1)]] is not bound");
  }
  {
    std::vector<uint8_t> x = block(add, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, 0x1234, 0);
    add_binding(x, MLXN_BIND_BYTES, 1, 0, 8);
    finish(x, 2, std::vector<uint8_t>(8));
    reject(x, "binding 0 (buffer [[buffer(0)]]): the handle must be a live buffer of the encoder's device (got 0x1234)");
  }
  {
    std::vector<uint8_t> x = block(add, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), n * 4 + 4);
    add_binding(x, MLXN_BIND_BYTES, 1, 0, 8);
    finish(x, 2, std::vector<uint8_t>(8));
    reject(x, "binding 0 (buffer [[buffer(0)]]): offset must be at most the buffer's length, 4000 bytes (got 4004)");
  }
  {
    std::vector<uint8_t> x = block(add, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 31, reinterpret_cast<uint64_t>(buf), 0);
    finish(x, 1, {});
    reject(x, "binding 0 (buffer): index must be below 31 (got 31)");
  }
  {
    std::vector<uint8_t> x = block(add, 1, 32);
    add_binding(x, MLXN_BIND_BUFFER, 0, reinterpret_cast<uint64_t>(buf), 0);
    add_binding(x, MLXN_BIND_BYTES, 1, 4, 8);
    finish(x, 2, std::vector<uint8_t>(8));
    reject(x, "binding 1 (bytes [[buffer(1)]]): offset + length must be at most the payload's 8 bytes (got 4 + 8)");
  }
  {
    std::vector<uint8_t> x = block(reinterpret_cast<mlxn_pipeline*>(buf), 1, 32);
    finish(x, 0, {});
    reject(x, "the pipeline handle must be a live pipeline of the encoder's device");
  }
  reject(add_delta_block(add, buf, n, 1.f, 0), "positive");
  CHECK(mlxn_encoder_commit(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_wait(enc, msg, sizeof msg) == MLXN_OK, "rejected dispatches were recorded: %s", msg);

  // A buffer, pipeline and library released after a dispatch that binds them
  // was recorded stay alive until its work ends: the 8 MiB buffer is mapped
  // on its own, so writing it after an early free would fault, and the
  // kernel's code would be unloaded with its library.
  {
    mlxn_library* lib3 = nullptr;
    mlxn_pipeline* add3 = nullptr;
    mlxn_buffer* big3 = nullptr;
    const uint32_t n3 = 2u << 20;
    CHECK(mlxn_library_compile(dev, kSource, std::strlen(kSource), "kernels.metal", nullptr, 0, &lib3, msg,
                               sizeof msg) == MLXN_OK, "%s", msg);
    CHECK(mlxn_pipeline_create(lib3, "add_delta", &add3, msg, sizeof msg) == MLXN_OK, "%s", msg);
    CHECK(mlxn_buffer_alloc(dev, uint64_t(n3) * 4, &big3, msg, sizeof msg) == MLXN_OK, "%s", msg);
    mlxn_encoder* enc3 = nullptr;
    CHECK(mlxn_encoder_create(dev, &enc3, msg, sizeof msg) == MLXN_OK, "%s", msg);
    std::vector<uint8_t> b3 = add_delta_block(add3, big3, n3, 1.f, 256);
    CHECK(mlxn_encoder_dispatch(enc3, b3.data(), b3.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
    mlxn_buffer_release(big3);
    mlxn_pipeline_release(add3);
    mlxn_library_release(lib3);
    // The released handles are refused by later dispatches.
    CHECK(mlxn_encoder_dispatch(enc3, b3.data(), b3.size(), msg, sizeof msg) == MLXN_ERR_INVALID_ARGUMENT &&
              has("the pipeline handle must be a live pipeline of the encoder's device"), "%s", msg);
    CHECK(mlxn_encoder_commit(enc3, msg, sizeof msg) == MLXN_OK, "%s", msg);
    CHECK(mlxn_encoder_wait(enc3, msg, sizeof msg) == MLXN_OK, "work on released objects: %s", msg);
    // A recording never committed lets go of what it holds on release.
    mlxn_buffer* small3 = nullptr;
    CHECK(mlxn_buffer_alloc(dev, 256, &small3, msg, sizeof msg) == MLXN_OK, "%s", msg);
    b3 = add_delta_block(add, small3, 64, 1.f);
    CHECK(mlxn_encoder_dispatch(enc3, b3.data(), b3.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
    mlxn_buffer_release(small3);
    mlxn_encoder_release(enc3);
  }

  // Releasing the device first keeps the objects made from it usable.
  mlxn_device_close(dev);
  b = add_delta_block(add, buf, n, 1.f);
  CHECK(mlxn_encoder_dispatch(enc, b.data(), b.size(), msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_commit(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  CHECK(mlxn_encoder_wait(enc, msg, sizeof msg) == MLXN_OK, "%s", msg);
  mlxn_encoder_release(enc);
  mlxn_pipeline_release(add);
  mlxn_pipeline_release(rev);
  mlxn_library_release(lib);
  mlxn_buffer_release(small);
  mlxn_buffer_release(buf);

  std::string rm = std::string("rm -rf ") + cache;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", cache);
  return check_summary();
}
