// The C ABI of native/include/mlx_native.h for the emulator backend.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../include/mlx_native.h"
#include "../common/compile_job.h"
#include "../common/patch_bytes.h"
#include "../include/mlx_native_block.h"
#include "compiler.h"
#include "executor.h"
#include "util.h"

using namespace mlxn::emu;

namespace {

// The live handles of one kind, which every dispatch looks its handles up in:
// open addressing in a power-of-two table, a multiplicative hash, linear
// probing, backward-shift deletion. (std::unordered_set divides by a prime on
// each lookup, a large part of a dispatch's host cost.) The host thread's only.
class HandleSet {
 public:
  size_t count(const void* p) const {
    if (p == nullptr) return 0;
    for (size_t i = home(p);; i = (i + 1) & mask_) {
      if (slots_[i] == p) return 1;
      if (slots_[i] == nullptr) return 0;
    }
  }
  void insert(const void* p) {
    if (p == nullptr || count(p)) return;
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(p);
    ++size_;
  }
  size_t erase(const void* p) {
    if (p == nullptr) return 0;
    size_t i = home(p);
    while (slots_[i] != p) {
      if (slots_[i] == nullptr) return 0;
      i = (i + 1) & mask_;
    }
    // Moves back each later entry of the run that may not lie past the hole.
    for (size_t j = (i + 1) & mask_; slots_[j] != nullptr; j = (j + 1) & mask_) {
      const size_t h = home(slots_[j]);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = nullptr;
    --size_;
    return 1;
  }

 private:
  size_t home(const void* p) const {
    return size_t((uint64_t(uintptr_t(p)) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(const void* p) {
    size_t i = home(p);
    while (slots_[i] != nullptr) i = (i + 1) & mask_;
    slots_[i] = p;
  }
  void grow() {
    std::vector<const void*> old(slots_.size() * 2, nullptr);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    --shift_;
    for (const void* p : old)
      if (p != nullptr) place(p);
  }
  std::vector<const void*> slots_ = std::vector<const void*>(16, nullptr);
  size_t mask_ = 15;
  int shift_ = 60;  // 64 - log2(slots)
  size_t size_ = 0;
};

}  // namespace

// Objects are reference counted. Objects made from a device hold a reference
// to it, so that closing the device before releasing them leaves them usable
// until they are released. Buffers and pipelines are also held by every
// recorded or running dispatch that binds them: releasing one removes its
// handle at once (later dispatches refuse it) but frees it only when the last
// dispatch holding it has run or been dropped, as Metal's retained references
// and the cuda backend do.
struct mlxn_device {
  std::atomic<int64_t> refs{1};
  std::string name;
  Schedule schedule;
  uint64_t max_buffer_length = 0;
  // Live handles, to reject stale or foreign ones in dispatch blocks.
  HandleSet buffers;
  HandleSet pipelines;
};

struct mlxn_buffer {
  std::atomic<int64_t> refs{1};
  uint64_t hold_stamp = 0;  // the recording that holds a reference already (host thread only)
  mlxn_device* device;
  uint8_t* data;
  uint64_t length;
  uint64_t mapped;  // bytes mmap'd, 0 when from aligned_alloc
};

struct mlxn_library {
  mlxn_device* device;
  std::string name;
  std::shared_ptr<Code> code;
};

struct mlxn_pipeline {
  std::atomic<int64_t> refs{1};
  uint64_t hold_stamp = 0;
  mlxn_device* device;
  std::shared_ptr<Code> code;
  Kernel* kernel;
};

// A recorded dispatch, kept compact (a few cache lines) so that recording
// stays cheap; the runner expands it into a Launch just before executing it.
struct Bound {
  uint32_t kind;   // MLXN_BIND_*
  uint32_t index;
  uint64_t a;      // BUFFER: address; BYTES: offset into the payload; TG: length
  uint64_t b;      // BUFFER, BYTES: length
};

struct Command {
  Kernel* kernel;
  uint32_t grid[3];
  uint32_t threads[3];
  uint32_t first;  // into mlxn_encoder::bound
  uint32_t count;
  Schedule schedule;
  bool after_barrier;  // a barrier was recorded between the previous dispatch and this one
};

struct mlxn_encoder {
  mlxn_device* device;
  std::vector<Command> commands;
  std::vector<Bound> bound;
  std::vector<uint8_t> payload;  // inline bytes, each block 16-byte aligned
  // One reference per binding of a recorded dispatch (and per dispatch for its
  // pipeline), dropped when the commit's work ends or the recording is dropped.
  std::vector<mlxn_buffer*> held_buffers;
  std::vector<mlxn_pipeline*> held_pipelines;
  uint64_t stamp = 0;  // this recording's number, unique in the process
  bool barrier_pending = false;  // a barrier recorded since the last dispatch
  uint64_t commits = 0;          // varies the random schedule's dispatch order between commits
  std::thread runner;
  std::atomic<int32_t> state{MLXN_ENCODER_RECORDING};
  std::string error;
  std::atomic<uint64_t> gpu_time_ns{0};
  // Record once, replay many: a replayable encoder keeps its recording (and
  // the references it holds) after its first commit, which freezes it.
  bool replayable = false;
  bool frozen = false;
  // A run that gave up with a worker inside a kernel took the recording's
  // inline bytes and references for good (run_commands): nothing is left to replay.
  bool retired = false;
};

namespace {

void device_unref(mlxn_device* d) {
  if (d && d->refs.fetch_sub(1) == 1) delete d;
}

// May run on an encoder's runner thread; touches nothing but the buffer and
// the device's reference count (the device's handle sets are the host's).
void buffer_unref(mlxn_buffer* b) {
  if (b->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (b->mapped)
    munmap(b->data, b->mapped);
  else
    std::free(b->data);
  mlxn_device* d = b->device;
  delete b;
  device_unref(d);
}

void pipeline_unref(mlxn_pipeline* p) {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  mlxn_device* d = p->device;
  delete p;
  device_unref(d);
}

std::atomic<uint64_t> g_next_stamp{1};

// Objects already held by the current recording are not held twice (the
// stamps say which): a model step binds its weights many times.
void drop_held(mlxn_encoder* e) {
  for (mlxn_buffer* b : e->held_buffers) buffer_unref(b);
  for (mlxn_pipeline* p : e->held_pipelines) pipeline_unref(p);
  e->held_buffers.clear();
  e->held_pipelines.clear();
}

bool parse_u64(const char* s, uint64_t* out) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; ++p)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end) return false;
  *out = v;
  return true;
}

mlxn_status apply_option(Schedule* s, const std::string& key, const char* value, std::string* err) {
  const std::string v = value ? value : "";
  if (key == "schedule") {
    if (v == "sequential") s->random = false;
    else if (v == "random") s->random = true;
    else {
      *err = "emu option 'schedule' must be \"sequential\" or \"random\" (got \"" + v + "\")";
      return MLXN_ERR_INVALID_ARGUMENT;
    }
    return MLXN_OK;
  }
  if (key == "seed") {
    uint64_t seed;
    if (!parse_u64(value, &seed)) {
      *err = "emu option 'seed' must be a decimal unsigned integer (got \"" + v + "\")";
      return MLXN_ERR_INVALID_ARGUMENT;
    }
    s->seed = seed;
    return MLXN_OK;
  }
  if (key == "timeout_ms") {
    uint64_t ms;
    if (!parse_u64(value, &ms)) {
      *err = "emu option 'timeout_ms' must be a decimal unsigned integer, 0 for no limit (got \"" + v + "\")";
      return MLXN_ERR_INVALID_ARGUMENT;
    }
    s->timeout_ms = ms;
    return MLXN_OK;
  }
  *err = "unknown emu option '" + key + "' (known: schedule, seed, timeout_ms)";
  return MLXN_ERR_INVALID_ARGUMENT;
}


void join_runner(mlxn_encoder* e) {
  if (e->runner.joinable()) e->runner.join();
}

// An encoder whose commit finished records afresh.
void start_recording(mlxn_encoder* e) {
  int32_t s = e->state.load();
  if (e->frozen) return;  // a replayable recording is kept (its callers refuse first)
  if (s == MLXN_ENCODER_COMPLETED || s == MLXN_ENCODER_ERROR) {
    join_runner(e);
    drop_held(e);  // already dropped by the runner; kept for clarity of the invariant
    e->commands.clear();
    e->bound.clear();
    e->payload.clear();
    e->error.clear();
    e->state.store(MLXN_ENCODER_RECORDING);
  }
}

}  // namespace

extern "C" {

uint32_t mlxn_abi_version(void) { return MLXN_ABI_VERSION; }

const char* mlxn_backend_name(void) { return "emu"; }

uint32_t mlxn_device_count(void) { return 1; }

mlxn_status mlxn_device_open(uint32_t ordinal, mlxn_device** out, char* msg, uint64_t msg_cap) {
  if (!out) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_device_open: out is null");
  *out = nullptr;
  if (ordinal != 0)
    return set_msg(msg, msg_cap, MLXN_ERR_DEVICE_NOT_FOUND,
                   "emu has one device, ordinal 0 (got " + std::to_string(ordinal) + ")");
  Schedule sched;
  std::string err;
  if (const char* s = std::getenv("MLX_NATIVE_EMU_SCHEDULE"); s && *s)
    if (apply_option(&sched, "schedule", s, &err) != MLXN_OK)
      return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "MLX_NATIVE_EMU_SCHEDULE: " + err);
  if (const char* s = std::getenv("MLX_NATIVE_EMU_SEED"); s && *s)
    if (apply_option(&sched, "seed", s, &err) != MLXN_OK)
      return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "MLX_NATIVE_EMU_SEED: " + err);
  if (const char* s = std::getenv("MLX_NATIVE_EMU_TIMEOUT_MS"); s && *s)
    if (apply_option(&sched, "timeout_ms", s, &err) != MLXN_OK)
      return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "MLX_NATIVE_EMU_TIMEOUT_MS: " + err);
  auto* d = new mlxn_device();
  d->schedule = sched;
  d->name = "CPU emulator (" + std::to_string(worker_count()) + " threads)";
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  d->max_buffer_length = (pages > 0 && page > 0) ? uint64_t(pages) * uint64_t(page) / 2 : (uint64_t(1) << 32);
  *out = d;
  return ok_msg(msg, msg_cap);
}

void mlxn_device_close(mlxn_device* device) { device_unref(device); }

uint64_t mlxn_device_name(mlxn_device* device, char* out, uint64_t cap) {
  if (!device) return write_string("", out, cap);
  return write_string(device->name, out, cap);
}

uint64_t mlxn_device_limit(mlxn_device* device, uint32_t key) {
  if (!device) return 0;
  switch (key) {
    case MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP: return kMaxThreadsPerThreadgroup;
    case MLXN_LIMIT_MAX_THREADGROUP_MEMORY: return kMaxThreadgroupMemory;
    case MLXN_LIMIT_SIMD_WIDTH: return kSimdWidth;
    case MLXN_LIMIT_MAX_BUFFER_LENGTH: return device->max_buffer_length;
    case MLXN_LIMIT_SHARED_MEMORY: return 1;
    default: return 0;
  }
}

mlxn_status mlxn_device_set_option(mlxn_device* device, const char* key, const char* value, char* msg,
                                   uint64_t msg_cap) {
  if (!device || !key)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_device_set_option: null device or key");
  std::string err;
  mlxn_status st = apply_option(&device->schedule, key, value, &err);
  if (st != MLXN_OK) return set_msg(msg, msg_cap, st, err);
  return ok_msg(msg, msg_cap);
}

// ---- buffers ----

mlxn_status mlxn_buffer_alloc(mlxn_device* device, uint64_t length, mlxn_buffer** out, char* msg,
                              uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_buffer_alloc: null device or out");
  *out = nullptr;
  if (length > device->max_buffer_length)
    return set_msg(msg, msg_cap, MLXN_ERR_BUFFER_ALLOCATION,
                   "buffer of " + std::to_string(length) + " bytes exceeds the emu limit of " +
                       std::to_string(device->max_buffer_length) + " bytes");
  uint8_t* data = nullptr;
  uint64_t mapped = 0;
  if (length >= (uint64_t(1) << 20)) {
    // Large buffers: anonymous pages are zero and only touched pages cost memory.
    void* m = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      data = static_cast<uint8_t*>(m);
      mapped = length;
    }
  } else {
    const uint64_t rounded = (std::max<uint64_t>(length, 1) + 63) & ~uint64_t(63);
    data = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    if (data) std::memset(data, 0, rounded);
  }
  if (!data)
    return set_msg(msg, msg_cap, MLXN_ERR_BUFFER_ALLOCATION,
                   "cannot allocate a buffer of " + std::to_string(length) + " bytes");
  auto* b = new mlxn_buffer{{1}, 0, device, data, length, mapped};
  device->refs.fetch_add(1);
  device->buffers.insert(b);
  *out = b;
  return ok_msg(msg, msg_cap);
}

void mlxn_buffer_release(mlxn_buffer* buffer) {
  if (!buffer) return;
  // A handle that is not live (released twice) is ignored.
  if (!buffer->device->buffers.erase(buffer)) return;
  buffer_unref(buffer);
}

uint64_t mlxn_buffer_length(mlxn_buffer* buffer) { return buffer ? buffer->length : 0; }

void* mlxn_buffer_host_ptr(mlxn_buffer* buffer) { return buffer ? buffer->data : nullptr; }

static mlxn_status check_range(const char* fn, mlxn_buffer* buffer, uint64_t offset, const void* p,
                               uint64_t length, char* msg, uint64_t msg_cap) {
  if (!buffer) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, std::string(fn) + ": null buffer");
  if (!p && length > 0)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, std::string(fn) + ": null data pointer");
  if (offset > buffer->length || length > buffer->length - offset)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   std::string(fn) + ": range [" + std::to_string(offset) + ", " + std::to_string(offset) +
                       " + " + std::to_string(length) + ") is outside the buffer of " +
                       std::to_string(buffer->length) + " bytes");
  return MLXN_OK;
}

mlxn_status mlxn_buffer_write(mlxn_buffer* buffer, uint64_t offset, const void* src, uint64_t length,
                              char* msg, uint64_t msg_cap) {
  if (mlxn_status st = check_range("mlxn_buffer_write", buffer, offset, src, length, msg, msg_cap)) return st;
  if (length) std::memcpy(buffer->data + offset, src, length);
  return ok_msg(msg, msg_cap);
}

mlxn_status mlxn_buffer_read(mlxn_buffer* buffer, uint64_t offset, void* dst, uint64_t length, char* msg,
                             uint64_t msg_cap) {
  if (mlxn_status st = check_range("mlxn_buffer_read", buffer, offset, dst, length, msg, msg_cap)) return st;
  if (length) std::memcpy(dst, buffer->data + offset, length);
  return ok_msg(msg, msg_cap);
}

// ---- libraries ----

mlxn_status mlxn_library_compile(mlxn_device* device, const char* source, uint64_t source_len,
                                 const char* name, const void* constants, uint32_t constants_count,
                                 mlxn_library** out, char* msg, uint64_t msg_cap) {
  if (!device || !out || (!source && source_len > 0))
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_library_compile: null device, source or out");
  *out = nullptr;
  if (!constants && constants_count > 0)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_library_compile: constants is null but constants_count is " +
                       std::to_string(constants_count));
  std::vector<ConstantValue> cs(constants_count);
  for (uint32_t i = 0; i < constants_count; ++i) {
    const mlxn::common::ConstantRecord rec = mlxn::common::constant_record(constants, i);
    cs[i] = {rec.index, rec.type, rec.bits};
    if (cs[i].type < MLXN_CONST_BOOL || cs[i].type > MLXN_CONST_U16)
      return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                     "function constant " + std::to_string(cs[i].index) + ": unknown type " +
                         std::to_string(cs[i].type));
  }
  const std::string file = (name && *name) ? name : "source.metal";
  const std::string bad_name = mlxn::common::library_name_refusal(file);
  if (!bad_name.empty()) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, bad_name);
  std::shared_ptr<Code> code;
  std::string err;
  mlxn_status st = compile_metal(std::string(source ? source : "", source_len), file, cs, &code, &err);
  if (st != MLXN_OK) return set_msg(msg, msg_cap, st, err);
  auto* lib = new mlxn_library{device, file, std::move(code)};
  device->refs.fetch_add(1);
  *out = lib;
  return ok_msg(msg, msg_cap);
}

mlxn_status mlxn_library_compile_start(mlxn_device* device, const char* source, uint64_t source_len,
                                       const char* name, const void* constants, uint32_t constants_count,
                                       mlxn_compile_job** out, char* msg, uint64_t msg_cap) {
  return mlxn::common::library_compile_start(
      device, source, source_len, name, constants, constants_count, [device] { device->refs.fetch_add(1); },
      [device] { device_unref(device); }, out, msg, msg_cap);
}

int32_t mlxn_compile_job_done(mlxn_compile_job* job) { return mlxn::common::compile_job_done(job); }

mlxn_status mlxn_compile_job_finish(mlxn_compile_job* job, mlxn_library** out, char* msg, uint64_t msg_cap) {
  return mlxn::common::library_compile_finish(job, out, msg, msg_cap);
}

void mlxn_library_release(mlxn_library* library) {
  if (!library) return;
  mlxn_device* d = library->device;
  delete library;
  device_unref(d);
}

uint64_t mlxn_library_kernel_names(mlxn_library* library, char* out, uint64_t cap) {
  std::string names;
  if (library)
    for (const auto& k : library->code->kernels) {
      if (!names.empty()) names += '\n';
      names += k->name;
    }
  return write_string(names, out, cap);
}

// ---- pipelines ----

mlxn_status mlxn_pipeline_create(mlxn_library* library, const char* kernel_name, mlxn_pipeline** out,
                                 char* msg, uint64_t msg_cap) {
  if (!library || !kernel_name || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_pipeline_create: null library, kernel name or out");
  *out = nullptr;
  Kernel* k = library->code->find(kernel_name);
  if (!k) {
    std::string have;
    for (const auto& kk : library->code->kernels) have += (have.empty() ? "" : ", ") + kk->name;
    return set_msg(msg, msg_cap, MLXN_ERR_KERNEL_NOT_FOUND,
                   "kernel '" + std::string(kernel_name) + "' not found in " + library->name +
                       " (kernels: " + (have.empty() ? "none" : have) + ")");
  }
  auto* p = new mlxn_pipeline{{1}, 0, library->device, library->code, k};
  library->device->refs.fetch_add(1);
  library->device->pipelines.insert(p);
  *out = p;
  return ok_msg(msg, msg_cap);
}

void mlxn_pipeline_release(mlxn_pipeline* pipeline) {
  if (!pipeline) return;
  if (!pipeline->device->pipelines.erase(pipeline)) return;
  pipeline_unref(pipeline);
}

uint32_t mlxn_pipeline_max_threads(mlxn_pipeline* pipeline) {
  return pipeline ? pipeline->kernel->max_threads : 0;
}

uint64_t mlxn_pipeline_static_threadgroup_memory(mlxn_pipeline* pipeline) {
  return pipeline ? pipeline->kernel->static_threadgroup_bytes.load() : 0;
}

// Not in mlx_native.h: the argument reflection of a pipeline, for the Swift
// backend's Metal on Linux (swift/Sources/Metal), which loads this library
// privately and answers MTLComputePipelineReflection.bindings with it. Writes
// up to `cap` of the indices the kernel declares for `kind`
// (MLXN_BIND_BUFFER: [[buffer(n)]], bound by buffers or bytes;
// MLXN_BIND_THREADGROUP_MEMORY: [[threadgroup(n)]]) in declaration order, and
// returns how many there are (0 for a null pipeline or another kind).
uint32_t mlxn_emu_pipeline_binding_indices(mlxn_pipeline* pipeline, uint32_t kind, uint32_t* out, uint32_t cap) {
  if (!pipeline) return 0;
  const std::vector<uint32_t>* indices = nullptr;
  if (kind == MLXN_BIND_BUFFER) indices = &pipeline->kernel->buffer_indices;
  else if (kind == MLXN_BIND_THREADGROUP_MEMORY) indices = &pipeline->kernel->threadgroup_indices;
  else return 0;
  for (uint32_t i = 0; out && i < cap && i < indices->size(); ++i) out[i] = (*indices)[i];
  return uint32_t(indices->size());
}

// ---- encoders ----

mlxn_status mlxn_encoder_create(mlxn_device* device, mlxn_encoder** out, char* msg, uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_create: null device or out");
  auto* e = new mlxn_encoder();
  e->device = device;
  e->stamp = g_next_stamp.fetch_add(1);
  device->refs.fetch_add(1);
  *out = e;
  return ok_msg(msg, msg_cap);
}

void mlxn_encoder_release(mlxn_encoder* encoder) {
  if (!encoder) return;
  join_runner(encoder);
  drop_held(encoder);  // a recording never committed still holds its bindings
  mlxn_device* d = encoder->device;
  delete encoder;
  device_unref(d);
}

mlxn_status mlxn_encoder_dispatch(mlxn_encoder* e, const void* block, uint64_t block_len, char* msg,
                                  uint64_t msg_cap) {
  if (!e) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "dispatch: encoder must be non-NULL");
  if (e->state.load(std::memory_order_acquire) == MLXN_ENCODER_PENDING)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "dispatch: the encoder's committed work is still running; wait first");
  if (e->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "dispatch: the encoder must be recording (got a replayable encoder whose recording was "
                   "committed: replay it)");
  start_recording(e);
  mlxn_block blk;  // written by the decoder only as far as the block goes
  // The words of a refusal name the kernel wherever the handle is a live pipeline.
  auto refuse = [&](int32_t) {
    char text[MLXN_BLOCK_MESSAGE_CAP];
    auto* p = reinterpret_cast<mlxn_pipeline*>(blk.pipeline);
    const char* kernel = e->device->pipelines.count(p) ? p->kernel->name.c_str() : nullptr;
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, mlxn_block_message(&blk, kernel, text, sizeof text));
  };
  if (mlxn_block_decode(block, block_len, &blk) != MLXN_BLOCK_OK) return refuse(blk.error);
  auto* pipeline = reinterpret_cast<mlxn_pipeline*>(blk.pipeline);
  if (!e->device->pipelines.count(pipeline))
    return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_PIPELINE, 0, blk.pipeline, 0, 0));
  Kernel* kernel = pipeline->kernel;
  const uint64_t threads = uint64_t(blk.threads[0]) * blk.threads[1] * blk.threads[2];
  const uint64_t max_threads = std::min<uint64_t>(kernel->max_threads, kMaxThreadsPerThreadgroup);
  if (threads > max_threads)
    return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_THREADGROUP_SIZE, 0, threads, max_threads, 0));
  const uint64_t static_bytes = kernel->static_threadgroup_bytes.load(std::memory_order_relaxed);
  if (blk.threadgroup_bytes > kMaxThreadgroupMemory || static_bytes > kMaxThreadgroupMemory - blk.threadgroup_bytes)
    return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_THREADGROUP_MEMORY, 0, blk.threadgroup_bytes,
                                  kMaxThreadgroupMemory, static_bytes));

  Command c;
  c.kernel = kernel;
  for (int d = 0; d < 3; ++d) {
    c.grid[d] = blk.grid[d];
    c.threads[d] = blk.threads[d];
  }
  const uint32_t n = blk.binding_count;
  c.first = uint32_t(e->bound.size());
  c.count = n;
  c.schedule = e->device->schedule;
  c.after_barrier = e->barrier_pending;

  // Records are appended as they are checked and dropped again if the block
  // is rejected, so that nothing of a rejected dispatch stays recorded.
  struct Rollback {
    mlxn_encoder* e;
    size_t bound, payload;
    bool keep = false;
    ~Rollback() {
      if (keep) return;
      e->bound.resize(bound);
      e->payload.resize(payload);
    }
  } rollback{e, e->bound.size(), e->payload.size()};

  mlxn_buffer* bufs[MLXN_MAX_BINDINGS];
  uint32_t nbufs = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const mlxn_block_binding& b = blk.bindings[i];
    if (b.kind == MLXN_BIND_BUFFER) {
      auto* buf = reinterpret_cast<mlxn_buffer*>(b.handle);
      if (!e->device->buffers.count(buf))
        return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_BUFFER, i, b.handle, 0, 0));
      if (b.offset > buf->length)
        return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_BUFFER_OFFSET, i, b.offset, buf->length, 0));
      e->bound.push_back({b.kind, b.index, uint64_t(uintptr_t(buf->data + b.offset)), buf->length - b.offset});
      bufs[nbufs++] = buf;  // at most 31: each index is bound once
    } else if (b.kind == MLXN_BIND_TENSOR_MAP) {
      return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_TENSOR_MAP_BACKEND, i, 0, 0, 0));
    } else if (b.kind == MLXN_BIND_BYTES) {
      // Each inline block starts 16-byte aligned, as constant data does on the GPU.
      const size_t at = (e->payload.size() + 15) & ~size_t(15);
      e->payload.resize(at + b.length);
      if (b.length) std::memcpy(e->payload.data() + at, b.data, b.length);
      e->bound.push_back({b.kind, b.index, at, b.length});
    } else {
      e->bound.push_back({b.kind, b.index, b.length, 0});
    }
  }
  // What only the emulator knows: the kernel's declared bindings, its limit on the grid.
  std::string err = check_grid_and_bindings(*kernel, c.grid, c.threads, blk.buffer_mask, blk.threadgroup_mask);
  if (!err.empty()) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "dispatch: " + err);
  e->commands.push_back(c);
  e->barrier_pending = false;
  rollback.keep = true;
  // Everything checked: the dispatch holds what it binds until its work ends.
  for (uint32_t i = 0; i < nbufs; ++i) {
    if (bufs[i]->hold_stamp == e->stamp) continue;
    bufs[i]->hold_stamp = e->stamp;
    bufs[i]->refs.fetch_add(1, std::memory_order_relaxed);
    e->held_buffers.push_back(bufs[i]);
  }
  if (pipeline->hold_stamp != e->stamp) {
    pipeline->hold_stamp = e->stamp;
    pipeline->refs.fetch_add(1, std::memory_order_relaxed);
    e->held_pipelines.push_back(pipeline);
  }
  return ok_msg(msg, msg_cap);
}

mlxn_status mlxn_encoder_barrier(mlxn_encoder* e, char* msg, uint64_t msg_cap) {
  if (!e) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_barrier: null encoder");
  if (e->state.load(std::memory_order_acquire) == MLXN_ENCODER_PENDING)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "barrier: the encoder's committed work is still running; wait first");
  if (e->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "barrier: the encoder must be recording (got a replayable encoder whose recording was "
                   "committed: replay it)");
  // Under the sequential schedule dispatches run one after another, so every
  // barrier holds already. The random schedule runs the dispatches between
  // two barriers in a shuffled order, so a barrier that is missing between
  // dependent dispatches shows as wrong results there.
  start_recording(e);
  e->barrier_pending = true;
  return ok_msg(msg, msg_cap);
}

// The order the commands run in: recorded order, except under the random
// schedule, where each run of dispatches with no barrier between them is
// shuffled (seeded by the schedule's seed and the commit's number), as a GPU
// may overlap or reorder them.
static std::vector<uint32_t> run_order(const mlxn_encoder* e) {
  const std::vector<Command>& cs = e->commands;
  std::vector<uint32_t> order(cs.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  uint64_t state = 0;
  bool random = false;
  for (const Command& c : cs)
    if (c.schedule.random) {
      random = true;
      state = c.schedule.seed * 0x9e3779b97f4a7c15ull ^ (e->commits + 1) * 0xbf58476d1ce4e5b9ull;
      break;
    }
  if (!random) return order;
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  size_t begin = 0;
  while (begin < cs.size()) {
    size_t end = begin + 1;
    while (end < cs.size() && !cs[end].after_barrier) ++end;
    for (size_t i = end - 1; i > begin; --i) std::swap(order[i], order[begin + next() % (i - begin + 1)]);
    begin = end;
  }
  return order;
}

static void run_commands(mlxn_encoder* e) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  bool left_running = false;
  for (uint32_t ci : run_order(e)) {
    const Command& c = e->commands[ci];
    Launch l;
    l.kernel = c.kernel;
    for (int d = 0; d < 3; ++d) {
      l.grid[d] = c.grid[d];
      l.threads[d] = c.threads[d];
    }
    l.schedule = c.schedule;
    for (uint32_t i = 0; i < c.count; ++i) {
      const Bound& b = e->bound[c.first + i];
      if (b.kind == MLXN_BIND_THREADGROUP_MEMORY) {
        l.threadgroup_set |= 1u << b.index;
        l.threadgroup_length[b.index] = b.a;
      } else {
        l.buffer_set |= 1u << b.index;
        l.buffers[b.index].ptr = b.kind == MLXN_BIND_BUFFER ? reinterpret_cast<uint8_t*>(uintptr_t(b.a))
                                                            : e->payload.data() + b.a;
        l.buffers[b.index].length = b.b;
      }
    }
    err = execute(l, &left_running);
    if (!err.empty()) break;
  }
  const auto t1 = std::chrono::steady_clock::now();
  e->gpu_time_ns.store(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
  e->error = err;
  // The work is over: what it held may go (the host cannot touch the held
  // lists until it sees the state change below). Unless a dispatch gave up
  // with a worker still inside its kernel: then its buffers and code are kept
  // for good (a leak, rare, rather than a write into freed memory).
  if (left_running) {
    e->retired = true;
    e->held_buffers.clear();
    e->held_pipelines.clear();
    new std::vector<uint8_t>(std::move(e->payload));  // the kernel's inline bytes, kept as well
    e->payload.clear();
  }
  if (!e->replayable) drop_held(e);  // a replayable recording holds them until its encoder goes
  e->state.store(err.empty() ? MLXN_ENCODER_COMPLETED : MLXN_ENCODER_ERROR, std::memory_order_release);
}

mlxn_status mlxn_encoder_commit(mlxn_encoder* e, char* msg, uint64_t msg_cap) {
  if (!e) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_commit: null encoder");
  const int32_t s = e->state.load(std::memory_order_acquire);
  if (s == MLXN_ENCODER_PENDING)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "commit: the encoder is already committed; wait first");
  if (e->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "commit: the encoder must be recording (got a replayable encoder whose recording was "
                   "committed: replay it)");
  if (s != MLXN_ENCODER_RECORDING) start_recording(e);  // nothing new recorded: an empty commit
  e->frozen = e->replayable;
  e->stamp = g_next_stamp.fetch_add(1);  // what is recorded next is a new recording
  e->barrier_pending = false;
  ++e->commits;
  e->state.store(MLXN_ENCODER_PENDING, std::memory_order_release);
  e->runner = std::thread(run_commands, e);
  return ok_msg(msg, msg_cap);
}

// The emulator runs a recording at its commit: a flush checks the encoder and
// leaves the recording as it is (mlx_native.h allows it).
mlxn_status mlxn_encoder_flush(mlxn_encoder* e, char* msg, uint64_t msg_cap) {
  if (!e)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_encoder_flush: encoder must be non-NULL (got NULL)");
  if (e->state.load(std::memory_order_acquire) == MLXN_ENCODER_PENDING)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "flush: the encoder's committed work is still running; wait first");
  if (e->replayable)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "flush: encoder must not be replayable (its recording is captured whole at its first commit) "
                   "(got a replayable encoder)");
  return ok_msg(msg, msg_cap);
}

mlxn_status mlxn_encoder_create_replayable(mlxn_device* device, mlxn_encoder** out, char* msg,
                                           uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_encoder_create_replayable: null device or out");
  const mlxn_status st = mlxn_encoder_create(device, out, msg, msg_cap);
  if (st == MLXN_OK) (*out)->replayable = true;
  return st;
}

// What replay and patch share: a replayable encoder with no work running.
static mlxn_status check_replayable(const char* fn, mlxn_encoder* e, char* msg, uint64_t msg_cap) {
  const std::string f = fn;
  if (!e) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, f + ": encoder must be non-NULL (got NULL)");
  if (!e->replayable)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   f + ": encoder must be replayable (made by mlxn_encoder_create_replayable) "
                       "(got an encoder made by mlxn_encoder_create)");
  if (e->state.load(std::memory_order_acquire) == MLXN_ENCODER_PENDING)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   f + ": encoder must have no work running (got a commit or replay still running; wait first)");
  if (e->retired)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   f + ": encoder must hold its recording (got one given up after a dispatch that timed out)");
  return MLXN_OK;
}

mlxn_status mlxn_encoder_replay(mlxn_encoder* e, char* msg, uint64_t msg_cap) {
  if (mlxn_status st = check_replayable("mlxn_encoder_replay", e, msg, msg_cap)) return st;
  if (!e->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_encoder_replay: encoder must have committed its recording once (got a recording "
                   "never committed)");
  join_runner(e);
  e->error.clear();
  ++e->commits;  // the random schedule shuffles each replay anew
  e->state.store(MLXN_ENCODER_PENDING, std::memory_order_release);
  e->runner = std::thread(run_commands, e);
  return ok_msg(msg, msg_cap);
}

mlxn_status mlxn_encoder_patch_bytes(mlxn_encoder* e, uint64_t dispatch_index, uint32_t binding_index,
                                     const void* data, uint64_t len, char* msg, uint64_t msg_cap) {
  static const char* fn = "mlxn_encoder_patch_bytes";
  if (mlxn_status st = check_replayable(fn, e, msg, msg_cap)) return st;
  if (std::string why = mlxn::common::patch_dispatch_refusal(fn, e->commands.size(), dispatch_index); !why.empty())
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, why);
  const Command& c = e->commands[dispatch_index];
  std::vector<mlxn::common::BytesBinding> bytes;
  std::vector<uint64_t> at;  // each one's offset into the payload
  for (uint32_t i = 0; i < c.count; ++i) {
    const Bound& b = e->bound[c.first + i];
    if (b.kind != MLXN_BIND_BYTES) continue;
    bytes.push_back({b.index, b.b});
    at.push_back(b.a);
  }
  size_t which = 0;
  if (std::string why = mlxn::common::patch_binding_refusal(fn, dispatch_index, c.kernel->name, bytes, binding_index, len, data, &which);
      !why.empty())
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, why);
  if (len) std::memcpy(e->payload.data() + at[which], data, len);
  return ok_msg(msg, msg_cap);
}

mlxn_status mlxn_encoder_wait(mlxn_encoder* e, char* msg, uint64_t msg_cap) {
  if (!e) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_wait: null encoder");
  join_runner(e);
  if (e->state.load() == MLXN_ENCODER_ERROR) return set_msg(msg, msg_cap, MLXN_ERR_COMMAND_BUFFER, e->error);
  return ok_msg(msg, msg_cap);
}

int32_t mlxn_encoder_status(mlxn_encoder* e) { return e ? e->state.load() : MLXN_ENCODER_ERROR; }

uint64_t mlxn_encoder_gpu_time_ns(mlxn_encoder* e) {
  if (!e) return 0;
  return e->gpu_time_ns.load();
}

}  // extern "C"
